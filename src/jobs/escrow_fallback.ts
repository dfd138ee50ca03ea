import { DateTime } from 'luxon'
import type { Database } from '@adonisjs/lucid/database'
import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { EscrowConfirmationFailedError } from '../client/errors.ts'
import type { PayoutsClient } from '../client/payouts_client.ts'
import { dbDate } from '../database/dates.ts'
import { affectedRows } from '../database/dialects.ts'
import { E_ESCROW_CONFIRMATION_IN_FLIGHT } from '../errors.ts'
import type { PayoutChange } from '../ledger/payout_ledger.ts'
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

/** A stablecoin payout moving out of pending: the service has the deposit. */
function showsDetection(change: PayoutChange): boolean {
  return (
    change.payout.flow === 'stablecoin_to_fiat' &&
    (change.previous === null || change.previous.status === 'pending') &&
    (change.current.status === 'processing' || change.current.status === 'completed')
  )
}

/**
 * The manual confirmation fallback, used only as the spec allows: a recorded deposit
 * whose quote is still awaiting_escrow_deposit N minutes after the transaction was
 * confirmed on-chain. The quote status is read first; a 500 is recorded and surfaced,
 * never retried (the row leaves the job's queue).
 */
export class EscrowFallback {
  /** Deposits a run in this process is working on: not abandoned, whatever their age. */
  #working = new Set<number>()
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
    const { db, connection } = this.#options
    const find = () => EscrowDeposit.query({ connection }).where('quote_id', input.quoteId).first()
    const deposit = await find()
    if (!deposit) throw new Error(`no escrow deposit is known for quote ${input.quoteId}`)
    // Never under a confirmation in flight (nor after one that succeeded): a conditional
    // update, so a run that claims the row meanwhile is not overwritten either.
    const sql = db.connection(connection)
    const updated = await sql
      .from(EscrowDeposit.table)
      .where('id', deposit.id)
      .whereNotIn('state', ['confirm_requested', 'confirmed'])
      .update({
        tx_hash: input.txHash,
        tx_confirmed_at: dbDate(sql, confirmedAt),
        state: 'deposit_recorded',
        last_error: null,
        updated_at: dbDate(sql),
      })
    const current = (await find())!
    if (affectedRows(updated) === 1) return current
    if (current.state === 'confirm_requested' && current.txHash !== input.txHash) {
      throw new E_ESCROW_CONFIRMATION_IN_FLIGHT([input.quoteId, current.txHash ?? ''])
    }
    // Confirmed already, or the same deposit is being confirmed right now: nothing to do.
    return current
  }

  /**
   * Inside the ledger's transaction: a stablecoin payout that leaves pending for
   * processing or completed had its deposit detected by the service. Its deposit row, unless
   * a fallback run holds it or is done with it, is confirmed by that change, which carries
   * the event to fire after COMMIT (and through `renotify` after a crash).
   */
  async confirmDetected(trx: TransactionClientContract, changes: PayoutChange[]) {
    for (const change of changes) {
      if (!showsDetection(change)) continue
      const updated = await trx
        .from(EscrowDeposit.table)
        .where('payout_uuid', change.payout.payoutUuid)
        .whereIn('state', ['awaiting_deposit', 'deposit_recorded'])
        .update({
          state: 'confirmed',
          confirmed_by_event_id: change.eventId,
          last_error: null,
          updated_at: dbDate(trx),
        })
      change.escrowConfirmed = null
      if (affectedRows(updated) === 0) continue
      const row = await EscrowDeposit.query({ client: trx })
        .where('confirmed_by_event_id', change.eventId)
        .firstOrFail()
      change.escrowConfirmed = {
        quoteId: row.quoteId,
        payoutId: change.payout.payoutUuid,
        txHash: row.txHash,
      }
    }
  }

  /** The deposit a change confirmed: its own annotation, else (rebuilt) the stored mark. */
  async confirmedBy(change: PayoutChange): Promise<EscrowEvent | null> {
    if (change.escrowConfirmed !== undefined) return change.escrowConfirmed
    if (!showsDetection(change)) return null
    const row = await EscrowDeposit.query({ connection: this.#options.connection })
      .where('confirmed_by_event_id', change.eventId)
      .first()
    return row ? { quoteId: row.quoteId, payoutId: row.payoutUuid, txHash: row.txHash } : null
  }

  async run(): Promise<EscrowSummary> {
    const { db, connection, confirmAfterMinutes } = this.#options
    const now = this.#options.now()
    const sql = db.connection(connection)
    const due = dbDate(sql, now.minus({ minutes: confirmAfterMinutes }))
    // Recorded deposits past the wait, and attempts that a dead process abandoned as long
    // ago (resuming is safe: the quote status is read first, the Idempotency-Key is the
    // same, so the service answers what it answered the first time).
    const isDue = <Query extends { where: (...args: any[]) => Query }>(query: Query) =>
      query
        .where((state: any) =>
          state
            .where('state', 'deposit_recorded')
            .orWhere((interrupted: any) =>
              interrupted
                .where('state', 'confirm_requested')
                .where('confirm_attempted_at', '<=', due)
            )
        )
        .where('tx_confirmed_at', '<=', due)
    const deposits = await isDue(EscrowDeposit.query({ connection }))
      .orderBy('tx_confirmed_at', 'asc')
      .limit(this.#options.batchSize)
    const summary: EscrowSummary = { checked: 0, confirmed: 0, detected: 0, failed: 0, waiting: 0 }
    for (const deposit of deposits) {
      // Claimed by a conditional update, so overlapping runs (a run longer than the job's
      // interval, another instance) never both work on a deposit or both fire its event.
      if (this.#working.has(deposit.id)) continue
      const claimed = await isDue(sql.from(EscrowDeposit.table).where('id', deposit.id)).update({
        state: 'confirm_requested',
        confirm_attempted_at: dbDate(sql, now),
      })
      if (affectedRows(claimed) !== 1) continue
      deposit.merge({ state: 'confirm_requested', confirmAttemptedAt: now })
      deposit.$hydrateOriginals()
      summary.checked++
      this.#working.add(deposit.id)
      try {
        await this.#confirm(deposit, summary)
      } finally {
        this.#working.delete(deposit.id)
      }
    }
    return summary
  }

  /**
   * One claimed deposit. Its event fires before the row is marked: a crash in between
   * fires it again after the restart (same quoteId), never not at all.
   */
  async #confirm(deposit: EscrowDeposit, summary: EscrowSummary) {
    const { client } = this.#options
    const event = { quoteId: deposit.quoteId, payoutId: deposit.payoutUuid, txHash: deposit.txHash }
    let status: Awaited<ReturnType<typeof client.getQuoteStatus>>
    try {
      status = await client.getQuoteStatus(deposit.quoteId)
    } catch (error) {
      deposit.state = 'deposit_recorded'
      await deposit.save()
      throw error
    }
    if (status.status !== 'awaiting_escrow_deposit') {
      // Automatic detection got there first: nothing to confirm.
      await this.#options.onConfirmed?.(event)
      deposit.state = 'confirmed'
      await deposit.save()
      summary.detected++
      return
    }
    try {
      await client.confirmEscrowDeposit(
        { quoteId: deposit.quoteId, txHash: deposit.txHash! },
        // One key per (quote, transaction): a resumed attempt repeats its own request, and
        // a corrected transaction after a failed one is a new request, not a reused key.
        { idempotencyKey: `escrow-${deposit.quoteId}-${deposit.txHash}` }
      )
    } catch (error) {
      if (!(error instanceof EscrowConfirmationFailedError)) {
        // Transient (network, 5xx after retries): back in the queue for the next run.
        deposit.state = 'deposit_recorded'
        deposit.lastError = (error as Error).message
        await deposit.save()
        summary.waiting++
        return
      }
      await this.#options.onFailed?.({ ...event, error: error.message })
      deposit.state = 'confirm_failed'
      deposit.lastError = error.message
      await deposit.save()
      summary.failed++
      return
    }
    await this.#options.onConfirmed?.(event)
    deposit.state = 'confirmed'
    await deposit.save()
    summary.confirmed++
  }
}
