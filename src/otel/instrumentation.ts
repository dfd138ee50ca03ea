import { AsyncLocalStorage } from 'node:async_hooks'
import { tracingChannel, type TracingChannelSubscribers } from 'node:diagnostics_channel'
import {
  context as otelContext,
  isSpanContextValid,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type Link,
  type Span,
  type SpanContext,
  type Tracer,
} from '@opentelemetry/api'
import { InstrumentationBase, type InstrumentationConfig } from '@opentelemetry/instrumentation'
import { PACKAGE_VERSION } from '../client/version.ts'
import {
  backlogChannel,
  CHANNEL_NAMES,
  type InboxBacklogSample,
  type ClientRequestContext,
  type ExecuteContext,
  type InboxBatchContext,
  type JobRunContext,
  type NotifyContext,
  type RecoverContext,
  type StreamContext,
  type WebhookReceiveContext,
} from '../tracing/channels.ts'
import { remoteSpanContext } from '../tracing/trace_parent.ts'
import {
  ATTR,
  defined,
  errorType,
  executeOutcome,
  PayoutsMetrics,
  SCOPE_NAME,
  type Ending,
} from './metrics.ts'

/** `messaging.system` of the service's events, whether they came by webhook or WebSocket. */
const MESSAGING_SYSTEM = 'svc-payouts-webhooks'

/** Links of one span at most: the SDK's default `linkCountLimit` (a batch has 100 rows). */
const MAX_LINKS = 128

/** What the instrumentation makes of one channel's traces. */
interface SpanShape<Ctx extends object> {
  channel: string
  kind: SpanKind
  /**
   * Work that a loop, a timer or a socket runs (the inbox drain, the jobs, the stream): a root
   * span, linked to the span active then, never the child of whichever request happened to
   * start the loop (it outlives that request, and every later batch would join its trace).
   */
  root?: boolean
  /**
   * The stored W3C traceparents of what began the work (the requests that stored a batch's
   * deliveries, the execute that made an intent): the span links to each.
   */
  linked?(context: Ctx): Array<string | null> | undefined
  /** A template: never an id. */
  name(context: Ctx): string
  /** Attributes known when the work starts. */
  opening(context: Ctx): Record<string, unknown>
  /** Attributes the work filled in, read when it ends. */
  closing?(context: Ctx, ending: Ending): Record<string, unknown>
  /** A failure the work reported without throwing (a 503 answered, a listener that failed). */
  problem?(context: Ctx): string | undefined
  record?(metrics: PayoutsMetrics, context: Ctx, ending: Ending): void
}

const clientRequest: SpanShape<ClientRequestContext> = {
  channel: CHANNEL_NAMES.clientRequest,
  kind: SpanKind.CLIENT,
  name: (context) => `payouts client ${context.method} ${context.route}`,
  opening: (context) => ({
    'http.request.method': context.method,
    'http.route': context.route,
    'url.template': context.route,
    [ATTR.endpoint]: context.endpoint,
  }),
  closing: (context) => ({
    'http.response.status_code': context.status || undefined,
    'http.request.resend_count': context.attempts > 1 ? context.attempts - 1 : undefined,
    [ATTR.retryReason]: context.retryReason,
  }),
  record: (metrics, context, ending) => metrics.clientRequest(context, ending),
}

const execute: SpanShape<ExecuteContext> = {
  channel: CHANNEL_NAMES.execute,
  kind: SpanKind.INTERNAL,
  name: () => 'payouts execute',
  opening: (context) => ({ [ATTR.keyOrigin]: context.keyOrigin }),
  closing: (context, ending) => ({
    [ATTR.intentId]: context.intentId,
    [ATTR.payoutId]: context.payoutId,
    [ATTR.flow]: context.flow,
    [ATTR.outcome]: executeOutcome(context, ending),
  }),
  record: (metrics, context, ending) => metrics.execute(context, ending),
}

/** The HTTP instrumentation owns the server span: this one is inside it. */
const webhookReceive: SpanShape<WebhookReceiveContext> = {
  channel: CHANNEL_NAMES.webhookReceive,
  kind: SpanKind.INTERNAL,
  name: () => 'payouts webhook receive',
  opening: (context) => ({
    'messaging.system': MESSAGING_SYSTEM,
    'messaging.operation.type': 'receive',
    'messaging.operation.name': 'receive',
    'messaging.message.id': context.deliveryId,
    [ATTR.eventType]: context.eventType,
    [ATTR.source]: 'http',
  }),
  closing: (context) => ({
    [ATTR.outcome]: context.outcome,
    [ATTR.reason]: context.reason,
    'http.response.status_code': context.status,
  }),
  problem: (context) => (context.outcome === 'unavailable' ? 'delivery not stored' : undefined),
  record: (metrics, context, ending) => metrics.webhookReceive(context, ending),
}

const inboxBatch: SpanShape<InboxBatchContext> = {
  channel: CHANNEL_NAMES.inboxBatch,
  kind: SpanKind.CONSUMER,
  root: true,
  name: () => 'payouts inbox batch',
  opening: (context) => ({
    'messaging.system': MESSAGING_SYSTEM,
    'messaging.operation.type': 'process',
    'messaging.operation.name': 'process',
    'messaging.batch.message_count': context.deliveryIds?.length,
    [ATTR.inboxPath]: context.path,
    [ATTR.deliveryIds]: context.deliveryIds,
  }),
  linked: (context) => context.traceParents,
  closing: (context) => ({
    'messaging.batch.message_count': context.rows,
    [ATTR.inboxDead]: context.dead,
  }),
  record: (metrics, context, ending) => metrics.inboxBatch(context, ending),
}

const notify: SpanShape<NotifyContext> = {
  channel: CHANNEL_NAMES.notify,
  kind: SpanKind.INTERNAL,
  name: () => 'payouts notify',
  opening: (context) => ({
    [ATTR.payoutId]: context.payoutId,
    [ATTR.eventId]: context.eventId,
    [ATTR.events]: context.events,
    [ATTR.status]: context.status,
    [ATTR.step]: context.step,
  }),
  closing: (context) => ({ [ATTR.listenerFailures]: context.listenerFailures }),
  problem: (context) =>
    context.listenerFailures ? `${context.listenerFailures} listener(s) failed` : undefined,
  record: (metrics, context, ending) => metrics.notify(context, ending),
}

const jobRun: SpanShape<JobRunContext> = {
  channel: CHANNEL_NAMES.jobRun,
  kind: SpanKind.INTERNAL,
  root: true,
  name: (context) => `payouts job ${context.job}`,
  opening: (context) => ({ [ATTR.job]: context.job }),
  record: (metrics, context, ending) => metrics.jobRun(context, ending),
}

/** One intent sent again: inside the recovery run (a job's span), linked to its execute. */
const recover: SpanShape<RecoverContext> = {
  channel: CHANNEL_NAMES.recover,
  kind: SpanKind.INTERNAL,
  name: () => 'payouts recover',
  opening: (context) => ({
    [ATTR.intentId]: context.intentId,
    [ATTR.keyOrigin]: context.keyOrigin,
  }),
  closing: (context) => ({ [ATTR.outcome]: context.outcome }),
  linked: (context) => [context.traceParent],
}

const streamMessage: SpanShape<StreamContext> = {
  channel: CHANNEL_NAMES.streamMessage,
  kind: SpanKind.CONSUMER,
  root: true,
  name: () => 'payouts stream message',
  opening: (context) => ({
    'messaging.system': MESSAGING_SYSTEM,
    'messaging.operation.type': 'receive',
    'messaging.operation.name': 'receive',
    'messaging.message.id': context.deliveryId,
    [ATTR.eventType]: context.type,
    [ATTR.source]: 'websocket',
  }),
  closing: (context) => ({ [ATTR.outcome]: context.outcome }),
  record: (metrics, context, ending) => metrics.streamMessage(context, ending),
}

const streamReconnect: SpanShape<StreamContext> = {
  channel: CHANNEL_NAMES.streamReconnect,
  kind: SpanKind.INTERNAL,
  root: true,
  name: () => 'payouts stream reconnect',
  opening: () => ({}),
  record: (metrics, context, ending) => metrics.streamReconnect(context, ending),
}

/**
 * A store for `start.bindStore` that runs the traced work with the payouts span as
 * OpenTelemetry's active context (through whatever context manager the app registered, even
 * one registered after this instrumentation was enabled): spans started inside, the
 * plugin's, the HTTP client's, the database's, a listener's, are its children.
 */
class ActiveSpanStore extends AsyncLocalStorage<Context> {
  override run<R, Args extends unknown[]>(
    value: Context,
    callback: (...args: Args) => R,
    ...args: Args
  ): R {
    return otelContext.with(value, callback, undefined, ...args)
  }
}

interface Owner {
  tracer(): Tracer
  metrics(): PayoutsMetrics
  failed(what: string, error: unknown): void
}

const OPEN = Symbol('payouts.otel.open')

interface Open {
  span?: Span
  startedAt: number
  failed: boolean
  error?: unknown
}

/**
 * A span's links: for a root span the span active when the work began, then the span context
 * of each stored traceparent; each once, at most `MAX_LINKS`.
 */
function linksOf<Ctx extends object>(shape: SpanShape<Ctx>, message: Ctx, parent: Context) {
  // Most spans (a client call, a notify) link nothing: nothing is allocated for them.
  if (!shape.root && !shape.linked) return undefined
  const links: Link[] = []
  const seen = new Set<string>()
  const add = (spanContext: SpanContext | undefined) => {
    if (!spanContext || !isSpanContextValid(spanContext) || links.length >= MAX_LINKS) return
    const key = `${spanContext.traceId}-${spanContext.spanId}`
    if (seen.has(key)) return
    seen.add(key)
    links.push({ context: spanContext })
  }
  if (shape.root) add(trace.getSpan(parent)?.spanContext())
  for (const traceParent of shape.linked?.(message) ?? []) {
    if (links.length >= MAX_LINKS) break
    add(remoteSpanContext(traceParent))
  }
  return links
}

/**
 * Turns one channel's traces into spans and measurements; returns what undoes it. Nothing
 * here may throw into the plugin's work: a handler that throws would surface as an uncaught
 * exception.
 */
function watch<Ctx extends object>(shape: SpanShape<Ctx>, owner: Owner): () => void {
  const channel = tracingChannel<Context, Ctx>(shape.channel)
  // The open span rides on the trace's own context object (a symbol key no subscriber reads):
  // a WeakMap's ephemerons cost every garbage collection more than one property does.
  type Tracked = Ctx & { [OPEN]?: Open }
  const store = new ActiveSpanStore()

  // Called before `start` is published, around the work: the span begins here.
  const begin = (message: Ctx): Context => {
    const parent = otelContext.active()
    const opened: Open = { startedAt: performance.now(), failed: false }
    ;(message as Tracked)[OPEN] = opened
    try {
      const links = linksOf(shape, message, parent)
      opened.span = owner.tracer().startSpan(
        shape.name(message),
        {
          kind: shape.kind,
          attributes: defined(shape.opening(message)),
          root: shape.root,
          links: links?.length ? links : undefined,
        },
        parent
      )
      return trace.setSpan(parent, opened.span)
    } catch (error) {
      owner.failed(shape.channel, error)
      return parent
    }
  }

  const finish = (message: Ctx) => {
    const opened = (message as Tracked)[OPEN]
    if (!opened) return
    ;(message as Tracked)[OPEN] = undefined
    const ending: Ending = {
      seconds: (performance.now() - opened.startedAt) / 1000,
      failed: opened.failed,
      error: opened.error,
    }
    const span = opened.span
    try {
      if (span) {
        span.setAttributes(defined(shape.closing?.(message, ending) ?? {}))
        if (ending.failed) {
          // The type only: some errors' messages name an idempotency key.
          const type = errorType(ending.error)
          span.setAttribute('error.type', type)
          span.addEvent('exception', { 'exception.type': type })
          span.setStatus({ code: SpanStatusCode.ERROR, message: type })
        } else {
          const problem = shape.problem?.(message)
          if (problem) span.setStatus({ code: SpanStatusCode.ERROR, message: problem })
        }
      }
      shape.record?.(owner.metrics(), message, ending)
    } catch (error) {
      owner.failed(shape.channel, error)
    } finally {
      span?.end()
    }
  }

  const handlers: TracingChannelSubscribers<Ctx> = {
    start() {},
    end() {},
    asyncStart() {},
    asyncEnd: finish,
    error(message) {
      const opened = (message as Tracked)[OPEN]
      if (opened) {
        opened.failed = true
        opened.error = message.error
      }
    },
  }
  channel.start.bindStore(store, begin)
  channel.subscribe(handlers)
  return () => {
    channel.start.unbindStore(store)
    channel.unsubscribe(handlers)
  }
}

const SHAPES = [
  clientRequest,
  execute,
  webhookReceive,
  inboxBatch,
  notify,
  jobRun,
  recover,
  streamMessage,
  streamReconnect,
] as SpanShape<object>[]

/**
 * The OpenTelemetry instrumentation of the plugin, for `@adonisjs/otel`'s `instrumentations`
 * (`config/otel.ts`) or any `registerInstrumentations`: it subscribes to the plugin's tracing
 * channels (`svc-payouts.*`), makes one span per trace (a child of the active span; a root span
 * for an inbox batch, a job run and the stream's work) with that span active inside, links an
 * inbox batch to the requests that stored its deliveries and a recovery to its execute (the
 * traceparents stored with them), and records the plugin's metrics. Enabled when constructed,
 * as every OpenTelemetry instrumentation; `disable()` unsubscribes. Span names and
 * `http.route` are templates; no span or instrument carries a key, a secret, a signature, a
 * body or an error's message.
 */
export class PayoutsInstrumentation extends InstrumentationBase {
  // Declared only: the base constructor calls enable() and _updateMetricInstruments() before
  // this class's own field initializers would run (and reset them).
  declare private unsubscribe: (() => void) | undefined
  declare private instruments: PayoutsMetrics

  constructor(config: InstrumentationConfig = {}) {
    super(SCOPE_NAME, PACKAGE_VERSION, config)
  }

  /** No module to patch: the plugin publishes its own channels. */
  protected init() {
    return undefined
  }

  /** Called again whenever a meter provider is set (`@adonisjs/otel` sets it after enabling). */
  protected override _updateMetricInstruments() {
    this.instruments = new PayoutsMetrics(this.meter)
  }

  override enable() {
    if (this.unsubscribe) return
    super.enable()
    const owner: Owner = {
      tracer: () => this.tracer,
      metrics: () => this.instruments,
      failed: (channel, error) =>
        this._diag.error(`handling a trace of ${channel} failed`, errorType(error)),
    }
    const stops = SHAPES.map((shape) => watch(shape, owner))
    const sampled = (sample: unknown) =>
      this.instruments?.backlogSampled(sample as InboxBacklogSample)
    backlogChannel.subscribe(sampled)
    stops.push(() => backlogChannel.unsubscribe(sampled))
    this.unsubscribe = () => stops.forEach((stop) => stop())
  }

  override disable() {
    super.disable()
    this.unsubscribe?.()
    this.unsubscribe = undefined
  }
}
