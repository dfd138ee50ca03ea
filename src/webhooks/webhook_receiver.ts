import type { HttpContext } from '@adonisjs/core/http'
import type { Logger } from '@adonisjs/core/logger'
import { isDeadlineError, withDeadline } from '../time_bounds.ts'
import { channels, traced, type WebhookReceiveContext } from '../tracing/channels.ts'
import { activeTraceParent } from '../tracing/trace_parent.ts'
import debug from '../debug.ts'
import { verifySignature } from '../signature/signature.ts'
import { BodyTooLargeError, readRawBody } from './raw_body.ts'
import type { AcceptedSecrets } from './accepted_secrets.ts'
import type { InboxProcessor } from './inbox_processor.ts'
import type { InboxStore } from './inbox_store.ts'
import { tellStored, type DeliveryListener } from './webhook_received.ts'
import { safeError } from '../safe_error.ts'

/** The signed webhook route's collaborators and bounds. */
export interface WebhookReceiverOptions {
  inbox: Pick<InboxStore, 'insert'>
  /**
   * The secrets to verify with, current ones first. Read again (at most once a second) when
   * none matches, so a secret stored by another process since the last read is not refused.
   */
  secrets: Pick<AcceptedSecrets, 'list'>
  /**
   * Kicked after a new delivery is stored, so processing starts after the ack (inline
   * mode); null in worker mode, where the worker's loop picks the row up.
   */
  processor: Pick<InboxProcessor, 'kickAfterPoll' | 'acknowledging'> | null
  /**
   * Told of each delivery this route stored (`payouts:webhook_received`), once its answer is
   * written: never for a duplicate, a refused one or one not stored; in worker mode too.
   */
  deliveries: DeliveryListener
  toleranceSeconds: number
  maxBodyBytes: number
  /**
   * The route answers within this time of a request's arrival, whatever the database
   * does: past it, 503, and the service delivers again (it gives a receiver 10 s).
   */
  ackTimeoutMs: number
  logger: Logger
  nowSeconds?: () => number
}

const DELIVERY_ID = /^[\x21-\x7e]{1,255}$/

/**
 * The webhook route: verify over the raw bytes, persist to the inbox, acknowledge.
 * Nothing is processed before the acknowledgement, and nothing is acknowledged before it
 * is stored, so a crash anywhere loses nothing (the service retries what we did not ack).
 */
export class WebhookReceiver {
  /** Deliveries stored whose telling has not ended yet. */
  #telling = new Set<Promise<void>>()

  constructor(private options: WebhookReceiverOptions) {}

  /**
   * Resolves once every delivery stored so far was told, its listeners done or given up
   * (`payouts.fake()` waits for it, so a test sees its listeners' work after a move).
   */
  async told(): Promise<void> {
    while (this.#telling.size > 0) await Promise.all(this.#telling)
  }

  /** One delivery, traced on `svc-payouts.webhook.receive` when anybody listens. */
  handle(ctx: HttpContext) {
    const { request } = ctx
    return traced(
      channels.webhookReceive,
      () => ({
        eventType: request.header('svc-event-type')?.slice(0, 100) ?? null,
        deliveryId: request.header('svc-delivery-id')?.slice(0, 255) ?? null,
      }),
      async (trace) => {
        const outcome = await this.#handle(ctx, trace)
        if (trace) trace.status = ctx.response.getStatus()
        return outcome
      }
    )
  }

  /**
   * Inline processing starts once the answer is written (or the connection closed), after the
   * event loop has polled its sockets once more: what it does (a transaction, the app's
   * listeners) never runs between the delivery's storing and its 200 going out, nor before
   * the requests that arrived meanwhile are read.
   */
  #kickWhenAnswered({ response }: HttpContext) {
    const processor = this.options.processor
    if (!processor) return
    whenAnswered(response, () => processor.kickAfterPoll())
  }

  /**
   * A delivery stored: `payouts:webhook_received` once the answer is written (or the
   * connection closed), after a poll, so its listeners never hold the acknowledgement. Its
   * row is committed, so it is told even when the answer was a 503 (its commit came past
   * the bound): the service's next attempt is a duplicate and tells nothing.
   */
  #tellWhenAnswered({ response }: HttpContext, raw: Buffer, deliveryId: string) {
    const telling: Promise<void> = new Promise<void>((resolve) =>
      whenAnswered(response, () => setImmediate(resolve))
    )
      .then(() => tellStored(this.options.deliveries, raw, deliveryId, 'webhook'))
      .finally(() => this.#telling.delete(telling))
    this.#telling.add(telling)
  }

  /**
   * From here until its answer is written (or its connection closes), the delivery is an
   * acknowledgement in flight: the inline processing of this process takes no slice
   * meanwhile. Only once it is verified: a sender that never finishes an unsigned body holds
   * nothing back.
   */
  #inFlight({ response }: HttpContext) {
    const processor = this.options.processor
    if (!processor) return
    const answered = processor.acknowledging()
    const socket = response.response
    if (socket.writableFinished || socket.destroyed) return answered()
    socket.once('finish', answered)
    socket.once('close', answered)
  }

  async #handle(ctx: HttpContext, trace?: WebhookReceiveContext) {
    const startedAt = Date.now()
    const { logger, ackTimeoutMs } = this.options
    const { request, response } = ctx
    let raw: Buffer
    try {
      raw = await readRawBody(request.request, this.options.maxBodyBytes)
    } catch (error) {
      if (trace) trace.outcome = 'rejected'
      if (error instanceof BodyTooLargeError) {
        if (trace) trace.reason = 'body_too_large'
        logger.warn({ limit: error.limit }, 'payouts webhook rejected: body too large')
        return response.status(413).send({ error: 'payload too large' })
      }
      if (trace) trace.reason = 'unreadable_body'
      logger.warn({ err: safeError(error).message }, 'payouts webhook rejected: unreadable body')
      return response.status(400).send({ error: 'invalid webhook' })
    }

    const deliveryId = request.header('svc-delivery-id')
    if (!deliveryId || !DELIVERY_ID.test(deliveryId)) {
      return this.#reject(response, 'malformed_delivery_id', undefined, trace)
    }
    debug('webhook %s received (%d bytes)', deliveryId, raw.length)
    const remaining = ackTimeoutMs - (Date.now() - startedAt)
    let outcome: 'stored' | 'duplicate' | 'rejected'
    try {
      outcome = await withDeadline(
        this.#verifyAndStore(ctx, raw, deliveryId, trace),
        Math.max(1, remaining),
        'webhook acknowledgement'
      )
    } catch (error) {
      // Not known to be stored: answer 5xx so the service delivers it again.
      if (trace) trace.outcome = 'unavailable'
      logger.error(
        { deliveryId, err: safeError(error).message, timedOut: isDeadlineError(error) },
        'payouts webhook not stored'
      )
      return response.status(503).send({ error: 'temporarily unavailable' })
    }
    debug('webhook %s %s', deliveryId, outcome)
    if (trace) trace.outcome = outcome
    if (outcome === 'rejected') return
    if (outcome === 'duplicate') {
      return response.status(200).send({ received: true, duplicate: true })
    }
    this.#kickWhenAnswered(ctx)
    return response.status(200).send({ received: true })
  }

  /** The secrets, the signature, the insert: every step that may wait on the database. */
  async #verifyAndStore(
    ctx: HttpContext,
    raw: Buffer,
    deliveryId: string,
    trace?: WebhookReceiveContext
  ): Promise<'stored' | 'duplicate' | 'rejected'> {
    const { request, response } = ctx
    const { logger } = this.options
    const verify = (secrets: string[]) =>
      verifySignature({
        header: request.header('svc-signature'),
        rawBody: raw,
        secrets,
        toleranceSeconds: this.options.toleranceSeconds,
        nowSeconds: this.options.nowSeconds?.(),
      })
    let secrets = await this.options.secrets.list()
    let verdict = verify(secrets)
    if (!verdict.ok && verdict.reason === 'no_matching_signature') {
      // Perhaps a secret stored by another process since the cache was filled (another
      // instance, payouts:webhooks:rotate-secret): read again, at most once a second.
      const fresh = await this.options.secrets.list(Date.now(), { maxAgeMs: 1000 })
      if (fresh.some((secret) => !secrets.includes(secret))) verdict = verify(fresh)
      secrets = fresh
    }
    if (secrets.length === 0) {
      logger.error('payouts webhook rejected: no signing secret is configured')
      if (trace) trace.reason = 'no_secret_configured'
      response.status(400).send({ error: 'invalid webhook' })
      return 'rejected'
    }
    if (!verdict.ok) {
      this.#reject(response, verdict.reason, deliveryId, trace)
      return 'rejected'
    }
    this.#inFlight(ctx)
    const eventType = (request.header('svc-event-type') ?? 'unknown').slice(0, 100)
    const stored = this.options.inbox.insert({
      deliveryId,
      eventType,
      rawBody: raw,
      signatureHeader: request.header('svc-signature')!,
      source: 'webhook',
      // The request's trace: the batch that applies the row links to it, in whichever process.
      traceParent: activeTraceParent(),
    })
    // Its own outcome, past the route's bound too; once per stored row (a duplicate is not).
    stored.then(
      (outcome) => outcome === 'stored' && this.#tellWhenAnswered(ctx, raw, deliveryId),
      () => {}
    )
    return stored
  }

  #reject(
    response: HttpContext['response'],
    reason: string,
    deliveryId?: string,
    trace?: WebhookReceiveContext
  ) {
    if (trace) {
      trace.outcome = 'rejected'
      trace.reason = reason
    }
    this.options.logger.warn({ reason, deliveryId }, 'payouts webhook rejected')
    return response.status(400).send({ error: 'invalid webhook' })
  }
}

/** Runs `then` once the answer is written or its connection closed, whichever comes first. */
function whenAnswered(response: HttpContext['response'], then: () => void) {
  let done = false
  const once = () => {
    if (done) return
    done = true
    then()
  }
  const socket = response.response
  if (socket.writableFinished || socket.destroyed) return once()
  socket.once('finish', once)
  socket.once('close', once)
}
