import { DateTime } from 'luxon'
import type { Database } from '@adonisjs/lucid/database'
import { EscrowConfirmationFailedError } from '../client/errors.ts'
import type { PayoutsClient } from '../client/payouts_client.ts'
import { dbDate } from '../database/dates.ts'
import EscrowDeposit from '../models/escrow_deposit.ts'
import type { EscrowEvent } from '../types/events.ts'

export interface EscrowFallbackOptions {
  db: Database
  client: Pick<PayoutsClient, 'getQuoteStatus' | 'confirmEscrowDeposit'>
  connection?: string
  /** Minutes after on-chain confirmation before the manual fallback may be used. */
  confirmAfterMinutes?: number
  batchSize?: number
  onConfirmed?: (event: EscrowEvent) => void | Promise<void>
  onFailed?: (event: EscrowEvent) => void | Promise<void>
  now?: () => DateTime
}

export interface EscrowSummary {
  checked: number
  confirmed: number
  detected: number
  failed: number
  waiting: number
}

/**
 * The manual confirmation fallback, used only as the spec allows: a recorded deposit
 * whose quote is still awaiting_escrow_deposit N minutes after the transaction was
 * confirmed on-chain. The quote status is read first; a 500 is recorded and surfaced,
 * never retried (the row leaves the job's queue).
 */
export class EscrowFallback {
  #options: Required<Omit<EscrowFallbackOptions, 'connection' | 'onConfirmed' | 'onFailed'>> &
    Pick<EscrowFallbackOptions, 'connection' | 'onConfirmed' | 'onFailed'>

  constructor(options: EscrowFallbackOptions) {
    this.#options = {
      confirmAfterMinutes: 10,
      batchSize: 50,
      now: () => DateTime.now(),
      ...options,
    }
  }

  /** The host app records the deposit it sent, with when it was confirmed on-chain. */
  async recordDeposit(input: {
    quoteId: string
    txHash: string
    confirmedAt?: DateTime | Date | string
  }) {
    if (!/^0x[0-9a-fA-F]{64}$/.test(input.txHash))
      throw new TypeError('txHash must be a 0x-prefixed 32-byte hex hash')
    const confirmedAt =
      input.confirmedAt instanceof DateTime
        ? input.confirmedAt
        : input.confirmedAt instanceof Date
          ? DateTime.fromJSDate(input.confirmedAt)
          : input.confirmedAt
            ? DateTime.fromISO(input.confirmedAt)
            : this.#options.now()
    const deposit = await EscrowDeposit.query({ connection: this.#options.connection })
      .where('quote_id', input.quoteId)
      .first()
    if (!deposit) throw new Error(`no escrow deposit is known for quote ${input.quoteId}`)
    if (deposit.state === 'confirmed') return deposit
    deposit.merge({
      txHash: input.txHash,
      txConfirmedAt: confirmedAt,
      state: 'deposit_recorded',
      lastError: null,
    })
    await deposit.save()
    return deposit
  }

  async run(): Promise<EscrowSummary> {
    const { db, client, connection, confirmAfterMinutes } = this.#options
    const now = this.#options.now()
    const due = now.minus({ minutes: confirmAfterMinutes })
    const deposits = await EscrowDeposit.query({ connection })
      .where('state', 'deposit_recorded')
      .where('tx_confirmed_at', '<=', dbDate(db.connection(connection), due))
      .orderBy('tx_confirmed_at', 'asc')
      .limit(this.#options.batchSize)
    const summary: EscrowSummary = { checked: 0, confirmed: 0, detected: 0, failed: 0, waiting: 0 }
    for (const deposit of deposits) {
      summary.checked++
      const status = await client.getQuoteStatus(deposit.quoteId)
      const event = {
        quoteId: deposit.quoteId,
        payoutId: deposit.payoutUuid,
        txHash: deposit.txHash,
      }
      if (status.status !== 'awaiting_escrow_deposit') {
        // Automatic detection got there first: nothing to confirm.
        deposit.state = 'confirmed'
        await deposit.save()
        summary.detected++
        await this.#options.onConfirmed?.(event)
        continue
      }
      deposit.state = 'confirm_requested'
      deposit.confirmAttemptedAt = now
      await deposit.save()
      try {
        await client.confirmEscrowDeposit(
          { quoteId: deposit.quoteId, txHash: deposit.txHash! },
          { idempotencyKey: `escrow-${deposit.quoteId}` }
        )
        deposit.state = 'confirmed'
        await deposit.save()
        summary.confirmed++
        await this.#options.onConfirmed?.(event)
      } catch (error) {
        if (!(error instanceof EscrowConfirmationFailedError)) {
          // Transient (network, 5xx after retries): back in the queue for the next run.
          deposit.state = 'deposit_recorded'
          deposit.lastError = (error as Error).message
          await deposit.save()
          summary.waiting++
          continue
        }
        deposit.state = 'confirm_failed'
        deposit.lastError = error.message
        await deposit.save()
        summary.failed++
        await this.#options.onFailed?.({ ...event, error: error.message })
      }
    }
    return summary
  }
}
