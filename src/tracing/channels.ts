/**
 * The plugin's `node:diagnostics_channel` tracing channels, in its own namespace
 * (`svc-payouts.*`), as AdonisJS publishes `adonisjs.http.request`: a subscriber (an
 * OpenTelemetry instrumentation, an APM agent, a test) sees `start`, `end`, `asyncStart`,
 * `asyncEnd` and `error` with the context object below; the plugin fills its fields as the work
 * goes (a status, an outcome), and `tracePromise` adds `result` or `error`. With nothing
 * subscribed a channel costs a property read: no context is built. No context holds a key, a
 * secret, a signature, a body or banking instructions; routes are templates
 * (`GET /payouts/{id}`), never paths with ids. docs/observability.md lists every field.
 */
import {
  channel as plainChannel,
  tracingChannel,
  type TracingChannel,
} from 'node:diagnostics_channel'

/** One call of the client (all its attempts): `svc-payouts.client.request`. */
export interface ClientRequestContext {
  /** The contract's endpoint name (`getPayout`, `execute`, ...). */
  endpoint: string
  method: string
  /** The path template (`/payouts/{id}`), as configured. */
  route: string
  /** Attempts sent so far (1 on the first). */
  attempts: number
  /** The last answer's HTTP status (0: none, a network error or timeout). */
  status?: number
  /** The service's request id of the last answer, when it sent one. */
  requestId?: string | null
  /** Why the last retry was made (`429`, `503`, `network`, `timeout`, ...). */
  retryReason?: string
}

/** One `payouts.execute`: `svc-payouts.execute`. */
export interface ExecuteContext {
  /** Whose key guards it: the app's own (`app`) or one the plugin made (`plugin`). */
  keyOrigin: 'app' | 'plugin'
  /** The intent's id, once it exists. */
  intentId?: number
  /** The payout's UUID and flow, once the service answered. */
  payoutId?: string
  flow?: string
  /** How it ended: `sent`, `repeated` (a key seen before), `failed`, `unknown`, ... */
  outcome?: string
}

/** One delivery at the webhook route: `svc-payouts.webhook.receive`. */
export interface WebhookReceiveContext {
  /** `Svc-Event-Type` as sent (at most 100 characters). */
  eventType: string | null
  deliveryId: string | null
  /** `stored`, `duplicate`, `rejected` or `unavailable` (503). */
  outcome?: 'stored' | 'duplicate' | 'rejected' | 'unavailable'
  /** Why it was refused (`no_matching_signature`, `timestamp_out_of_tolerance`, ...). */
  reason?: string
  /** The HTTP status answered. */
  status?: number
}

/** One inbox batch (claimed, applied, marked): `svc-payouts.inbox.batch`. */
export interface InboxBatchContext {
  /** `transaction` (one transaction for the lot) or `row_by_row` (under a lease). */
  path: 'transaction' | 'row_by_row'
  /** Rows handled; among them, dead-lettered, and failed (retried after a backoff). */
  rows?: number
  dead?: number
  failed?: number
  /** The delivery ids of the rows (webhook ids, or `ws_<hash>` for stream messages). */
  deliveryIds?: string[]
  /**
   * Aligned with `deliveryIds`: the W3C traceparent each row was received in (the webhook
   * request's, maybe in another process), or null (the stream's, or no SDK then).
   */
  traceParents?: Array<string | null>
}

/** One committed change told to the app: `svc-payouts.notify`. */
export interface NotifyContext {
  payoutId: string
  eventId: string
  /** The app events fired, in order, with their keys. */
  events: string[]
  eventKeys: string[]
  status: string
  step: string | null
  /** The payout's status before the change (null: first seen with it). */
  previousStatus: string | null
  /** Listeners that failed or timed out. */
  listenerFailures?: number
}

/** One intent sent again by recovery: `svc-payouts.recover`. */
export interface RecoverContext {
  intentId: number
  /** Whose key guards it: the app's own (`app`, also on rows from before the column) or ours. */
  keyOrigin: 'app' | 'plugin'
  /** The W3C traceparent of the execute that made the intent, or null. */
  traceParent: string | null
  /** The intent's state after the attempt: `succeeded`, `unknown`, `failed`, ... */
  outcome?: string
}

/** One run of a job: `svc-payouts.job.run`. */
export interface JobRunContext {
  /** `reconcile`, `escrow`, `recover` or `prune`. */
  job: string
}

/** One WebSocket message stored, or a reconnect: `svc-payouts.stream.message` / `.reconnect`. */
export interface StreamContext {
  /** The message's event type, or `reconnect`. */
  type: string
  deliveryId?: string
  outcome?: string
}

/**
 * A sample of the inbox's backlog (`svc-payouts.inbox.backlog`, a plain channel, not a
 * trace): published at most every 15 s by a process that processes the inbox, only while
 * someone listens (the OpenTelemetry instrumentation's gauges).
 */
export interface InboxBacklogSample {
  /** Rows not processed yet (due, being processed, or failed once and waiting). */
  rows: number
  /** Milliseconds since the oldest of them arrived; null when none waits. */
  oldestAgeMs: number | null
  /** The account whose inbox it is (docs/accounts.md); `main` when not given. */
  account?: string
}

/** The plain channel the backlog samples go out on. */
export const backlogChannel = plainChannel('svc-payouts.inbox.backlog')

/** The names, for subscribers: `diagnostics_channel.tracingChannel(CHANNEL_NAMES.execute)`. */
export const CHANNEL_NAMES = {
  clientRequest: 'svc-payouts.client.request',
  execute: 'svc-payouts.execute',
  webhookReceive: 'svc-payouts.webhook.receive',
  inboxBatch: 'svc-payouts.inbox.batch',
  notify: 'svc-payouts.notify',
  jobRun: 'svc-payouts.job.run',
  recover: 'svc-payouts.recover',
  streamMessage: 'svc-payouts.stream.message',
  streamReconnect: 'svc-payouts.stream.reconnect',
} as const

/** Every channel the plugin publishes. */
export const channels = {
  clientRequest: tracingChannel<ClientRequestContext>(CHANNEL_NAMES.clientRequest),
  execute: tracingChannel<ExecuteContext>(CHANNEL_NAMES.execute),
  webhookReceive: tracingChannel<WebhookReceiveContext>(CHANNEL_NAMES.webhookReceive),
  inboxBatch: tracingChannel<InboxBatchContext>(CHANNEL_NAMES.inboxBatch),
  notify: tracingChannel<NotifyContext>(CHANNEL_NAMES.notify),
  jobRun: tracingChannel<JobRunContext>(CHANNEL_NAMES.jobRun),
  recover: tracingChannel<RecoverContext>(CHANNEL_NAMES.recover),
  streamMessage: tracingChannel<StreamContext>(CHANNEL_NAMES.streamMessage),
  streamReconnect: tracingChannel<StreamContext>(CHANNEL_NAMES.streamReconnect),
} as const

/**
 * Runs `work` inside `channel`'s trace when anybody listens, with the context `context()`
 * builds then (nothing is built otherwise); `work` gets the context (or undefined) to fill.
 * The trace ends with no `result`: what the work returns (a payout, an intent with its key,
 * a response body) never reaches a subscriber; a failure ends it with its `error`.
 */
export async function traced<Context extends object, T>(
  channel: TracingChannel<Context>,
  context: () => NoInfer<Context>,
  work: (context: Context | undefined) => Promise<T>
): Promise<T> {
  if (!channel.hasSubscribers) return work(undefined)
  const built = context()
  let value!: T
  await channel.tracePromise(async () => {
    value = await work(built)
  }, built)
  return value
}
