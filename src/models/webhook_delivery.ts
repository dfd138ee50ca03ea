import { BaseModel, column } from '@adonisjs/lucid/orm'
import type { DateTime } from 'luxon'
import { utcDateTime } from './utc_date_time.ts'

/** One row of the durable inbox: a verified delivery, stored before it was acknowledged. */
export default class WebhookDelivery extends BaseModel {
  static table = 'svc_webhook_deliveries'

  @column({ isPrimary: true })
  declare id: number

  /** The account whose subscription or stream delivered it: the delivery id is unique in it. */
  @column()
  declare account: string

  /** Svc-Delivery-Id (webhooks) or a content hash (WebSocket). */
  @column()
  declare deliveryId: string

  @column()
  declare eventType: string

  /** Base64 of the exact bytes received. */
  @column({ serializeAs: null })
  declare rawBody: string

  @column({ serializeAs: null })
  declare signatureHeader: string | null

  @column()
  declare source: 'webhook' | 'websocket'

  @column()
  declare state: 'pending' | 'processing' | 'processed' | 'failed' | 'dead'

  @column()
  declare attempts: number

  @column.dateTime(utcDateTime)
  declare nextAttemptAt: DateTime | null

  @column()
  declare lastError: string | null

  @column.dateTime(utcDateTime)
  declare receivedAt: DateTime

  @column.dateTime(utcDateTime)
  declare processedAt: DateTime | null

  /**
   * The W3C traceparent of the request that stored it (null for the stream's messages, and
   * without an OpenTelemetry SDK): the batch that applies it links to that trace.
   */
  @column()
  declare traceParent: string | null

  /** The body as it arrived. */
  get body(): Buffer {
    return Buffer.from(this.rawBody, 'base64')
  }
}
