import { BaseModel, column } from '@adonisjs/lucid/orm'
import type { DateTime } from 'luxon'
import { utcDateTime } from './utc_date_time.ts'

/** Append-only log of every observation of a payout, applied or not (and why). */
export default class PayoutEvent extends BaseModel {
  static table = 'svc_payout_events'

  @column({ isPrimary: true })
  declare id: number

  /** The account of the payout this row logs. */
  @column()
  declare account: string

  @column()
  declare payoutUuid: string

  @column()
  declare source: string

  @column()
  declare eventType: string | null

  @column()
  declare status: string | null

  @column()
  declare step: string | null

  @column({ consume: (value: unknown) => Boolean(value) })
  declare applied: boolean

  @column()
  declare reason: string | null

  @column()
  declare deliveryId: string | null

  @column.dateTime(utcDateTime)
  declare observedAt: DateTime

  /** The read id this row was logged under, when its placeholder row merged into this payout. */
  @column()
  declare mergedFrom: string | null

  /** When the app events of this change fired; null until then (the outbox). */
  @column.dateTime(utcDateTime)
  declare notifiedAt: DateTime | null

  /** The process that holds this change's notification lease (null: nobody). */
  @column()
  declare notifyOwner: string | null

  /** When that lease ends unless renewed; another process may take the change after it. */
  @column.dateTime(utcDateTime)
  declare notifyUntil: DateTime | null

  @column.dateTime({ ...utcDateTime, autoCreate: true })
  declare createdAt: DateTime
}
