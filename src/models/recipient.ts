import { BaseModel, column } from '@adonisjs/lucid/orm'
import type { DateTime } from 'luxon'
import { utcDateTime } from './utc_date_time.ts'
import { jsonColumn } from './json_column.ts'

/** A payee mirrored from the service; `remoteId` is the service's UUID. */
export default class Recipient extends BaseModel {
  static table = 'svc_recipients'

  @column({ isPrimary: true })
  declare id: number

  /** The account whose key created or listed the recipient. */
  @column()
  declare account: string

  @column()
  declare remoteId: string

  @column()
  declare ownerId: string | null

  @column()
  declare name: string | null

  @column()
  declare email: string | null

  @column()
  declare country: string | null

  @column()
  declare currency: string | null

  @column()
  declare type: string | null

  @column(jsonColumn)
  declare paymentMethods: Array<Record<string, unknown>> | null

  @column(jsonColumn)
  declare metadata: Record<string, unknown> | null

  @column.dateTime(utcDateTime)
  declare deletedAt: DateTime | null

  @column.dateTime(utcDateTime)
  declare syncedAt: DateTime | null

  @column.dateTime({ ...utcDateTime, autoCreate: true })
  declare createdAt: DateTime

  @column.dateTime({ ...utcDateTime, autoCreate: true, autoUpdate: true })
  declare updatedAt: DateTime
}
