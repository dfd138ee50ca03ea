import type { HttpContext } from '@adonisjs/core/http'
import type { Logger } from '@adonisjs/core/logger'
import { verifySignature } from '../signature/main.ts'
import { BodyTooLargeError, readRawBody } from './raw_body.ts'
import type { InboxStore } from './inbox_store.ts'

/** Options of the signed webhook route. */
export interface WebhookReceiverOptions {
  inbox: Pick<InboxStore, 'insert'>
  /** Current secret first, then the previous one while its grace period lasts. */
  secrets: () => string[] | Promise<string[]>
  toleranceSeconds: number
  maxBodyBytes: number
  logger: Logger
  /** Called after a new delivery is persisted, so processing starts after the ack. */
  onStored?: () => void
  nowSeconds?: () => number
}

const DELIVERY_ID = /^[\x21-\x7e]{1,255}$/

/**
 * The webhook route: verify over the raw bytes, persist to the inbox, acknowledge.
 * Nothing is processed before the acknowledgement, and nothing is acknowledged before it
 * is stored, so a crash anywhere loses nothing (the service retries what we did not ack).
 */
export class WebhookReceiver {
  constructor(private options: WebhookReceiverOptions) {}

  async handle({ request, response }: HttpContext) {
    const { logger } = this.options
    let raw: Buffer
    try {
      raw = await readRawBody(request.request, this.options.maxBodyBytes)
    } catch (error) {
      if (error instanceof BodyTooLargeError) {
        logger.warn({ limit: error.limit }, 'payouts webhook rejected: body too large')
        return response.status(413).send({ error: 'payload too large' })
      }
      logger.warn({ err: (error as Error).message }, 'payouts webhook rejected: unreadable body')
      return response.status(400).send({ error: 'invalid webhook' })
    }

    const deliveryId = request.header('svc-delivery-id')
    if (!deliveryId || !DELIVERY_ID.test(deliveryId)) {
      return this.#reject(response, 'missing or malformed Svc-Delivery-Id')
    }
    const secrets = await this.options.secrets()
    if (secrets.length === 0) {
      logger.error('payouts webhook rejected: no signing secret is configured')
      return response.status(400).send({ error: 'invalid webhook' })
    }
    const verdict = verifySignature({
      header: request.header('svc-signature'),
      rawBody: raw,
      secrets,
      toleranceSeconds: this.options.toleranceSeconds,
      nowSeconds: this.options.nowSeconds?.(),
    })
    if (!verdict.ok) return this.#reject(response, verdict.reason, deliveryId)

    const eventType = (request.header('svc-event-type') ?? 'unknown').slice(0, 100)
    try {
      const stored = await this.options.inbox.insert({
        deliveryId,
        eventType,
        rawBody: raw,
        signatureHeader: request.header('svc-signature')!,
        source: 'webhook',
      })
      if (stored === 'duplicate') {
        return response.status(200).send({ received: true, duplicate: true })
      }
    } catch (error) {
      // Not stored: answer 5xx so the service delivers it again.
      logger.error({ deliveryId, err: (error as Error).message }, 'payouts webhook not stored')
      return response.status(503).send({ error: 'temporarily unavailable' })
    }
    this.options.onStored?.()
    return response.status(200).send({ received: true })
  }

  #reject(response: HttpContext['response'], reason: string, deliveryId?: string) {
    this.options.logger.warn({ reason, deliveryId }, 'payouts webhook rejected')
    return response.status(400).send({ error: 'invalid webhook' })
  }
}
