import { BaseModel, column, hasMany, hasOne } from '@adonisjs/lucid/orm'
import type { HasMany, HasOne } from '@adonisjs/lucid/types/relations'
import type { DateTime } from 'luxon'
import { utcDateTime } from './utc_date_time.ts'
import type { PayoutStatus, PayoutStep } from '../schemas/common.ts'
import type { ProviderMetadata } from '../schemas/resources.ts'
import { jsonColumn } from './json_column.ts'
import PayoutEvent from './payout_event.ts'
import EscrowDeposit from './escrow_deposit.ts'

/** The host app's record of one payout. Amounts are decimal strings, never floats. */
export default class Payout extends BaseModel {
  static table = 'svc_payouts'

  @column({ isPrimary: true })
  declare id: number

  /** The account (API key) the payout belongs to: its ids are unique within it. */
  @column()
  declare account: string

  /** The execute UUID; the key every observation is applied on. */
  @column()
  declare payoutUuid: string

  /** The prefixed read id (po_...), once a read has shown it. */
  @column()
  declare readId: string | null

  @column()
  declare ownerId: string | null

  @column()
  declare flow: string | null

  @column()
  declare status: PayoutStatus

  @column()
  declare step: PayoutStep | null

  @column()
  declare transactionType: string | null

  @column()
  declare quoteId: string | null

  @column()
  declare sourceAmount: string | null

  @column()
  declare sourceCurrency: string | null

  @column()
  declare payoutAmount: string | null

  @column()
  declare payoutCurrency: string | null

  @column()
  declare toAmount: string | null

  @column(jsonColumn)
  declare fees: Record<string, unknown> | null

  @column()
  declare partnerFxRate: string | null

  @column()
  declare effectiveRate: string | null

  @column()
  declare recipientId: string | null

  @column()
  declare recipientPaymentMethodId: string | null

  @column()
  declare paymentMethod: string | null

  @column()
  declare paymentPurpose: string | null

  @column()
  declare reference: string | null

  /**
   * The routing detail (its onramp and offramp legs, their protocol and status) as the latest
   * read of the payout gave it; null until a read has given it.
   */
  @column(jsonColumn)
  declare providerMetadata: ProviderMetadata | null

  /** When `providerMetadata` was observed (a read taken earlier never replaces it). */
  @column.dateTime(utcDateTime)
  declare providerMetadataAt: DateTime | null

  /**
   * When the payout ended, while the routing detail of its end is not read yet; null
   * otherwise (`metadataDueOf`). The reconciler reads such payouts once.
   */
  @column.dateTime({ ...utcDateTime, serializeAs: null })
  declare providerMetadataDueAt: DateTime | null

  /** Banking instructions, payment URL or escrow details: private, never broadcast. */
  @column({ ...jsonColumn, serializeAs: null })
  declare instructions: Record<string, unknown> | null

  @column.dateTime(utcDateTime)
  declare lastObservedAt: DateTime | null

  @column.dateTime(utcDateTime)
  declare statusChangedAt: DateTime | null

  @column.dateTime(utcDateTime)
  declare completedAt: DateTime | null

  @column.dateTime({ ...utcDateTime, autoCreate: true })
  declare createdAt: DateTime

  @column.dateTime({ ...utcDateTime, autoCreate: true, autoUpdate: true })
  declare updatedAt: DateTime

  /*
   * Joined on the payout id alone (a Lucid relation takes one key): with several accounts,
   * scope a preload to the account, `preload('events', (q) => q.where('account', name))`.
   */
  @hasMany(() => PayoutEvent, { localKey: 'payoutUuid', foreignKey: 'payoutUuid' })
  declare events: HasMany<typeof PayoutEvent>

  @hasOne(() => EscrowDeposit, { localKey: 'payoutUuid', foreignKey: 'payoutUuid' })
  declare escrowDeposit: HasOne<typeof EscrowDeposit>
}
