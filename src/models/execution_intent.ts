import { BaseModel, column } from '@adonisjs/lucid/orm'
import type { DateTime } from 'luxon'
import { utcDateTime } from './utc_date_time.ts'
import { jsonColumn } from './json_column.ts'

/**
 * `unknown`: a request may have reached the service (recovery re-sends it with its key).
 * `refused`: no request ever left this process (invalid input, connection refused); final.
 * `failed`: the service answered a definitive error; final. `needs_attention`: a human
 * decides (past the replay window, or a body that cannot be sent again).
 */
export type IntentState =
  'pending' | 'unknown' | 'succeeded' | 'failed' | 'refused' | 'needs_attention'

/**
 * An execute call, committed with its Idempotency-Key before the request is sent. Only
 * this row makes a crash safe: recovery re-sends the same body with the same key.
 */
export default class ExecutionIntent extends BaseModel {
  static table = 'svc_execution_intents'

  @column({ isPrimary: true })
  declare id: number

  /** The account that sends it: an idempotency key is unique within its account. */
  @column()
  declare account: string

  @column({ serializeAs: null })
  declare idempotencyKey: string

  @column()
  declare ownerId: string | null

  /**
   * `app`: the key is the app's own (kept as long as the payout it made); `plugin`: a fresh
   * one the plugin made; null on rows from before the column existed (treated as `app`).
   */
  @column()
  declare keyOrigin: 'app' | 'plugin' | null

  @column()
  declare flow: string

  @column(jsonColumn)
  declare requestBody: Record<string, unknown>

  @column()
  declare bodyHash: string

  @column()
  declare state: IntentState

  @column()
  declare attempts: number

  @column()
  declare payoutUuid: string | null

  @column({ ...jsonColumn, serializeAs: null })
  declare response: Record<string, unknown> | null

  @column(jsonColumn)
  declare error: Record<string, unknown> | null

  @column.dateTime(utcDateTime)
  declare lastAttemptAt: DateTime | null

  /**
   * The W3C traceparent of the execute that made it (null without an OpenTelemetry SDK): a
   * recovery run that sends it again links to that trace.
   */
  @column()
  declare traceParent: string | null

  @column.dateTime({ ...utcDateTime, autoCreate: true })
  declare createdAt: DateTime

  @column.dateTime({ ...utcDateTime, autoCreate: true, autoUpdate: true })
  declare updatedAt: DateTime
}
