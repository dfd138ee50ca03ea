import { BaseModel, column } from '@adonisjs/lucid/orm'
import type { DateTime } from 'luxon'
import { utcDateTime } from './utc_date_time.ts'

/** The escrow side of a stablecoin payout: where to send, what was sent, what was confirmed. */
export default class EscrowDeposit extends BaseModel {
  static table = 'svc_escrow_deposits'

  @column({ isPrimary: true })
  declare id: number

  /** The account of the stablecoin payout the deposit pays for. */
  @column()
  declare account: string

  @column()
  declare quoteId: string

  @column()
  declare payoutUuid: string | null

  @column()
  declare escrowAddress: string | null

  @column()
  declare tokenAddress: string | null

  @column()
  declare chainId: number | null

  /** Atomic units as a decimal string (bigint-safe). */
  @column()
  declare amountAtomic: string | null

  @column()
  declare txHash: string | null

  @column.dateTime(utcDateTime)
  declare txConfirmedAt: DateTime | null

  @column()
  declare state:
    'awaiting_deposit' | 'deposit_recorded' | 'confirm_requested' | 'confirmed' | 'confirm_failed'

  @column()
  declare lastError: string | null

  /** Confirmations that failed (the fallback gives up after `jobs.escrowMaxAttempts`). */
  @column()
  declare attempts: number

  /** The code of the last failure (`ESCROW_CONFIRMATION_FAILED` for the service's 500). */
  @column()
  declare lastErrorCode: string | null

  /** The fallback does not try again before this (backoff after a failed confirmation). */
  @column.dateTime(utcDateTime)
  declare nextAttemptAt: DateTime | null

  @column.dateTime(utcDateTime)
  declare confirmAttemptedAt: DateTime | null

  /** The payout change that showed automatic detection (payout_events id), if that is how. */
  @column()
  declare confirmedByEventId: number | null

  @column.dateTime({ ...utcDateTime, autoCreate: true })
  declare createdAt: DateTime

  @column.dateTime({ ...utcDateTime, autoCreate: true, autoUpdate: true })
  declare updatedAt: DateTime
}
