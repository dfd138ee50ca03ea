import {
  metrics,
  type Attributes,
  type Counter,
  type Histogram,
  type Meter,
} from '@opentelemetry/api'
import { PACKAGE_VERSION } from '../client/version.ts'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import type {
  InboxBacklogSample,
  ClientRequestContext,
  ExecuteContext,
  InboxBatchContext,
  JobRunContext,
  NotifyContext,
  StreamContext,
  WebhookReceiveContext,
} from '../tracing/channels.ts'

/** The instrumentation scope of the plugin's spans and instruments. */
export const SCOPE_NAME = '@svc/adonis-payouts'

/** Attribute keys of the plugin, on spans and on instruments alike. */
export const ATTR = {
  outcome: 'payouts.outcome',
  reason: 'payouts.reason',
  status: 'payouts.status',
  step: 'payouts.step',
  flow: 'payouts.flow',
  keyOrigin: 'payouts.key_origin',
  intentId: 'payouts.intent.id',
  payoutId: 'payouts.payout.id',
  eventId: 'payouts.event.id',
  eventType: 'payouts.event_type',
  events: 'payouts.events',
  listenerFailures: 'payouts.listener_failures',
  endpoint: 'payouts.endpoint',
  retryReason: 'payouts.retry.reason',
  inboxPath: 'payouts.inbox.path',
  inboxDead: 'payouts.inbox.dead',
  deliveryIds: 'payouts.inbox.delivery_ids',
  job: 'payouts.job',
  source: 'payouts.source',
  account: 'payouts.account',
} as const

/**
 * Bucket bounds for durations in seconds, OpenTelemetry's for HTTP durations, with a longer
 * tail for jobs (a reconcile pass may take minutes).
 */
const SECONDS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]
const JOB_SECONDS = [...SECONDS, 30, 60, 120, 300, 600]

/** How one trace ended, measured by the instrumentation. */
export interface Ending {
  /** From the trace's start to its end. */
  seconds: number
  /** The error the work failed with, when it failed. */
  failed: boolean
  error?: unknown
}

/** The failure's kind for `error.type`: its code (`RATE_LIMITED`, `E_...`) or its class name. */
export function errorType(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code
  if (typeof code === 'string' && code.length > 0) return code.slice(0, 100)
  const name = (error as { name?: unknown } | null)?.name
  return typeof name === 'string' && name.length > 0 ? name.slice(0, 100) : 'Error'
}

/**
 * How an execute ended: the intent's state when the trace has it; after a failure without
 * one, `unknown` when the request may have reached the service, `needs_attention` when the
 * intent waits for a human, `error` otherwise.
 */
export function executeOutcome(context: ExecuteContext, ending: Ending): string {
  if (context.outcome) return context.outcome
  if (!ending.failed) return 'succeeded'
  if ((ending.error as { outcomeUnknown?: unknown } | null)?.outcomeUnknown === true) {
    return 'unknown'
  }
  if (errorType(ending.error) === 'E_PAYOUTS_INTENT_NEEDS_ATTENTION') return 'needs_attention'
  return 'error'
}

/**
 * Whether a told change put the payout into its status: a status other than the one it had
 * (a payout first seen is created in its status); a step within the same status is not.
 */
export function entersStatus(context: NotifyContext): boolean {
  return context.previousStatus !== context.status
}

/** Keeps the attributes that have a value. */
export function defined(attributes: Record<string, unknown>): Attributes {
  const kept: Attributes = {}
  for (const key in attributes) {
    const value = attributes[key]
    if (value !== undefined && value !== null && value !== '') kept[key] = value as never
  }
  return kept
}

/**
 * The plugin's instruments (docs/observability.md lists them), from a meter of
 * `@opentelemetry/api`: without a meter provider in the app they are its no-ops. Each method
 * records what one finished trace of a channel says. No attribute has unbounded values: no
 * payout, delivery or intent id, no event type a sender chose.
 */
export class PayoutsMetrics {
  readonly webhookDeliveries: Counter
  readonly webhookAckDuration: Histogram
  readonly streamMessages: Counter
  readonly streamReconnects: Counter
  readonly inboxRowsApplied: Counter
  readonly inboxDeadLetters: Counter
  readonly payoutTransitions: Counter
  readonly listenerFailures: Counter
  readonly executeOutcomes: Counter
  readonly clientRequestDuration: Histogram
  readonly clientRetries: Counter
  readonly jobRuns: Counter
  readonly jobDuration: Histogram
  /**
   * The last backlog sample of each account a process published (`svc-payouts.inbox.backlog`):
   * the gauges report each under its `payouts.account`.
   */
  #backlogs = new Map<string, InboxBacklogSample>()

  constructor(meter: Meter = metrics.getMeter(SCOPE_NAME, PACKAGE_VERSION)) {
    // Observed from the last sample: none until a process that processes the inbox read one.
    meter
      .createObservableGauge('payouts.inbox.backlog', {
        unit: '{delivery}',
        description: 'Stored deliveries not processed yet (sampled at most every 15 s).',
      })
      .addCallback((result) => {
        for (const [account, sample] of this.#backlogs) {
          result.observe(sample.rows, { [ATTR.account]: account })
        }
      })
    meter
      .createObservableGauge('payouts.inbox.oldest_age', {
        unit: 's',
        description: 'Age of the oldest stored delivery not processed yet (0 when none waits).',
      })
      .addCallback((result) => {
        for (const [account, sample] of this.#backlogs) {
          result.observe((sample.oldestAgeMs ?? 0) / 1000, { [ATTR.account]: account })
        }
      })
    this.webhookDeliveries = meter.createCounter('payouts.webhook.deliveries', {
      unit: '{delivery}',
      description:
        'Deliveries at the webhook route, by outcome (stored, duplicate, rejected, unavailable).',
    })
    this.webhookAckDuration = meter.createHistogram('payouts.webhook.ack.duration', {
      unit: 's',
      description: 'From a delivery reaching the webhook route to its answer.',
      advice: { explicitBucketBoundaries: SECONDS },
    })
    this.streamMessages = meter.createCounter('payouts.stream.messages', {
      unit: '{message}',
      description: 'WebSocket messages stored in the inbox, by outcome (stored, duplicate).',
    })
    this.streamReconnects = meter.createCounter('payouts.stream.reconnects', {
      unit: '{reconnect}',
      description: 'Catch-ups after a reconnect of the event stream.',
    })
    this.inboxRowsApplied = meter.createCounter('payouts.inbox.rows_applied', {
      unit: '{row}',
      description: 'Stored deliveries handled by an inbox batch and not dead-lettered.',
    })
    this.inboxDeadLetters = meter.createCounter('payouts.inbox.dead_letters', {
      unit: '{row}',
      description: 'Stored deliveries an inbox batch kept as dead letters.',
    })
    this.payoutTransitions = meter.createCounter('payouts.payout.transitions', {
      unit: '{transition}',
      description: 'Payouts entering a status (first seen in it, or changed to it), by status.',
    })
    this.listenerFailures = meter.createCounter('payouts.listener.failures', {
      unit: '{failure}',
      description: 'App listeners of payouts events that failed or timed out.',
    })
    this.executeOutcomes = meter.createCounter('payouts.execute.outcomes', {
      unit: '{execute}',
      description: 'Calls of payouts.execute, by outcome (the intent state).',
    })
    this.clientRequestDuration = meter.createHistogram('payouts.client.request.duration', {
      unit: 's',
      description: 'Calls of the service by the client, all their attempts and waits included.',
      advice: { explicitBucketBoundaries: SECONDS },
    })
    this.clientRetries = meter.createCounter('payouts.client.retries', {
      unit: '{retry}',
      description:
        'Attempts sent again by the client, by the reason of the last retry of the call.',
    })
    this.jobRuns = meter.createCounter('payouts.job.runs', {
      unit: '{run}',
      description: 'Runs of the background jobs, by job and outcome.',
    })
    this.jobDuration = meter.createHistogram('payouts.job.duration', {
      unit: 's',
      description: 'Duration of one run of a background job.',
      advice: { explicitBucketBoundaries: JOB_SECONDS },
    })
  }

  clientRequest(context: ClientRequestContext, ending: Ending) {
    const route = {
      'http.request.method': context.method,
      'http.route': context.route,
    }
    this.clientRequestDuration.record(
      ending.seconds,
      defined({
        ...route,
        'http.response.status_code': context.status || undefined,
        'error.type': ending.failed ? errorType(ending.error) : undefined,
      })
    )
    if (context.attempts > 1) {
      this.clientRetries.add(
        context.attempts - 1,
        defined({ ...route, [ATTR.retryReason]: context.retryReason ?? 'other' })
      )
    }
  }

  execute(context: ExecuteContext, ending: Ending) {
    this.executeOutcomes.add(
      1,
      defined({
        [ATTR.outcome]: executeOutcome(context, ending),
        [ATTR.keyOrigin]: context.keyOrigin,
        [ATTR.flow]: context.flow,
      })
    )
  }

  webhookReceive(context: WebhookReceiveContext, ending: Ending) {
    const outcome = context.outcome ?? (ending.failed ? 'error' : undefined)
    this.webhookDeliveries.add(
      1,
      defined({ [ATTR.outcome]: outcome, [ATTR.reason]: context.reason })
    )
    this.webhookAckDuration.record(ending.seconds, defined({ [ATTR.outcome]: outcome }))
  }

  streamMessage(context: StreamContext, ending: Ending) {
    const outcome = context.outcome ?? (ending.failed ? 'error' : undefined)
    this.streamMessages.add(1, defined({ [ATTR.outcome]: outcome }))
  }

  streamReconnect(_context: StreamContext, ending: Ending) {
    this.streamReconnects.add(
      1,
      defined({ 'error.type': ending.failed ? errorType(ending.error) : undefined })
    )
  }

  /** A backlog sample: the gauges report it until the next one. */
  backlogSampled(sample: InboxBacklogSample) {
    this.#backlogs.set(sample.account ?? DEFAULT_ACCOUNT, sample)
  }

  inboxBatch(context: InboxBatchContext, _ending: Ending) {
    const attributes = { [ATTR.inboxPath]: context.path }
    const dead = context.dead ?? 0
    const applied = (context.rows ?? 0) - dead - (context.failed ?? 0)
    if (applied > 0) this.inboxRowsApplied.add(applied, attributes)
    if (dead > 0) this.inboxDeadLetters.add(dead, attributes)
  }

  notify(context: NotifyContext, _ending: Ending) {
    if (entersStatus(context)) this.payoutTransitions.add(1, { [ATTR.status]: context.status })
    if (context.listenerFailures) this.listenerFailures.add(context.listenerFailures)
  }

  jobRun(context: JobRunContext, ending: Ending) {
    const attributes = defined({
      [ATTR.job]: context.job,
      [ATTR.outcome]: ending.failed ? 'failed' : 'succeeded',
      'error.type': ending.failed ? errorType(ending.error) : undefined,
    })
    this.jobRuns.add(1, attributes)
    this.jobDuration.record(ending.seconds, attributes)
  }
}
