import { DateTime } from 'luxon'
import type { Database } from '@adonisjs/lucid/database'
import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { EscrowConfirmationFailedError, PayoutsApiError, PayoutsError } from '../client/errors.ts'
import type { PayoutsClient } from '../client/payouts_client.ts'
import { dbDate } from '../database/dates.ts'
import { affectedRows } from '../database/dialects.ts'
import { E_ESCROW_CONFIRMATION_IN_FLIGHT } from '../errors.ts'
import type { PayoutChange } from '../ledger/vocabulary.ts'
import EscrowDeposit from '../models/escrow_deposit.ts'
import Payout from '../models/payout.ts'
import type { EscrowEvent } from '../types/events.ts'

export interface EscrowFallbackOptions {
  db: Database
  client: Pick<PayoutsClient, 'getQuoteStatus' | 'confirmEscrowDeposit'>
  connection?: string
  /** Minutes after on-chain confirmation before the manual fallback may be used. */
  confirmAfterMinutes?: number
  /** Confirmations sent for one deposit before it is marked `confirm_failed` (alert). */
  maxAttempts?: number
  /** Wait after the first failed confirmation; doubles after each one. */
  retryBackoffMs?: number
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
 * The answer that says the service did not confirm the deposit: its single 500, whatever
 * the body says (the typed error once the client recognises it, any 500 until then), or
 * any other answer than success. Decided on status and code, never on the error's text.
 */
function isConfirmationRefused(error: unknown): boolean {
  if (error instanceof EscrowConfirmationFailedError) return true
  if (!(error instanceof PayoutsApiError)) return error instanceof PayoutsError
  return !isNoVerdict(error)
}

/** No verdict on the deposit: nothing answered, or the service asked to come back later. */
function isNoVerdict(error: PayoutsApiError): boolean {
  return (
    error.status === 0 ||
    error.status === 429 ||
    error.status === 502 ||
    error.status === 503 ||
    error.status === 504 ||
    error.code === 'IDEMPOTENCY_REQUEST_IN_FLIGHT'
  )
}

/** The code a failure is recorded and reported under. */
function failureCode(error: unknown): string {
  if (error instanceof PayoutsApiError && error.status === 500) return 'ESCROW_CONFIRMATION_FAILED'
  return (error as { code?: string }).code ?? 'UNKNOWN'
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
 * confirmed on-chain. Every request is a decision made after reading the deposit's state
 * (the local payout, then the quote status), and is sent once: never blind-retried. A
 * refused confirmation (the service's 500, whatever its body) is read again, then tried
 * later with a doubling wait, `maxAttempts` times in all; then the deposit is
 * `confirm_failed` and `onFailed` fires once. See docs/spec-gaps.md.
 */
export class EscrowFallback {
  /** Deposits a run in this process is working on: not abandoned, whatever their age. */
  #working = new Set<number>()
  /**
   * Events this process fired for a deposit whose row the database then failed to mark (a
   * stall, a dropped connection): a later run marks the row without firing them again.
   */
  #announced = new Set<string>()
  #options: Required<Omit<EscrowFallbackOptions, 'connection' | 'onConfirmed' | 'onFailed'>> &
    Pick<EscrowFallbackOptions, 'connection' | 'onConfirmed' | 'onFailed'>

  constructor(options: EscrowFallbackOptions) {
    this.#options = {
      confirmAfterMinutes: 10,
      maxAttempts: 3,
      retryBackoffMs: 5 * 60_000,
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
    // Never under a confirmation in flight (nor after one that succeeded): conditional
    // updates, so a run that claims the row meanwhile is not overwritten either.
    const sql = db.connection(connection)
    const recorded = {
      tx_hash: input.txHash,
      tx_confirmed_at: dbDate(sql, confirmedAt),
      state: 'deposit_recorded',
      updated_at: dbDate(sql),
    }
    // Another transaction, or the same one recorded again after the fallback gave up (a
    // human's decision): a fresh start. Recording the same pending one again keeps its
    // attempts and its wait, so repeating the call cannot stretch the bound.
    let updated = await sql
      .from(EscrowDeposit.table)
      .where('id', deposit.id)
      .whereNotIn('state', ['confirm_requested', 'confirmed'])
      .where((fresh) =>
        fresh
          .where('state', 'confirm_failed')
          .orWhereNull('tx_hash')
          .orWhereNot('tx_hash', input.txHash)
      )
      .update({
        ...recorded,
        attempts: 0,
        last_error: null,
        last_error_code: null,
        next_attempt_at: null,
      })
    if (affectedRows(updated) === 0) {
      updated = await sql
        .from(EscrowDeposit.table)
        .where('id', deposit.id)
        .whereIn('state', ['awaiting_deposit', 'deposit_recorded'])
        .where('tx_hash', input.txHash)
        .update(recorded)
    }
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
        // A deposit the fallback gave up on too: the service has it after all.
        .whereIn('state', ['awaiting_deposit', 'deposit_recorded', 'confirm_failed'])
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
    // Recorded deposits past the wait (and past their backoff after a failed attempt), and
    // attempts that a dead process abandoned as long ago (resuming is safe: the state is
    // read first, and the service is idempotent on the quote and the transaction).
    const isDue = <Query extends { where: (...args: any[]) => Query }>(query: Query) =>
      query
        .where((state: any) =>
          state
            .where((recorded: any) =>
              recorded
                .where('state', 'deposit_recorded')
                .where((backoff: any) =>
                  backoff
                    .whereNull('next_attempt_at')
                    .orWhere('next_attempt_at', '<=', dbDate(sql, now))
                )
            )
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
   * One claimed deposit: read, then (still awaiting) one confirmation, then read again
   * before deciding on a refusal. Events fire before the row is marked: a crash in between
   * fires them again after the restart (same quoteId), never not at all.
   */
  async #confirm(deposit: EscrowDeposit, summary: EscrowSummary) {
    let detected: boolean
    try {
      detected = await this.#detected(deposit)
    } catch (error) {
      await this.#release(deposit)
      throw error
    }
    if (detected) return this.#markConfirmed(deposit, summary, 'detected')
    // A refusal whose read-back failed: the state is known now, and the bound is reached.
    if (deposit.attempts >= this.#options.maxAttempts) return this.#giveUp(deposit, summary)
    try {
      // Without an Idempotency-Key the client never repeats the request once it may have
      // reached the service: no blind retry, whatever the answer. The service is
      // idempotent on (quoteId, txHash) itself, and a resumed attempt reads state first.
      await this.#options.client.confirmEscrowDeposit({
        quoteId: deposit.quoteId,
        txHash: deposit.txHash!,
      })
    } catch (error) {
      if (error instanceof PayoutsApiError && !isConfirmationRefused(error)) {
        // No verdict (no answer, 429, a gateway error): the next run asks again.
        deposit.lastError = error.message
        deposit.lastErrorCode = error.code
        await this.#release(deposit)
        summary.waiting++
        return
      }
      if (!isConfirmationRefused(error)) {
        await this.#release(deposit)
        throw error
      }
      return this.#refused(deposit, error, summary)
    }
    await this.#markConfirmed(deposit, summary, 'confirmed')
  }

  /** The service refused the confirmation: read the state again, then decide. */
  async #refused(deposit: EscrowDeposit, error: unknown, summary: EscrowSummary) {
    deposit.attempts += 1
    deposit.lastErrorCode = failureCode(error)
    deposit.lastError = (error as Error).message ?? null
    let detected: boolean | null = null
    try {
      detected = await this.#detected(deposit)
    } catch {
      // Unknown: decided on the next attempt's read, never without one.
    }
    if (detected) return this.#markConfirmed(deposit, summary, 'detected')
    if (detected === false && deposit.attempts >= this.#options.maxAttempts) {
      return this.#giveUp(deposit, summary)
    }
    const wait = this.#options.retryBackoffMs * 2 ** Math.max(0, deposit.attempts - 1)
    deposit.nextAttemptAt = this.#options.now().plus({ milliseconds: wait })
    await this.#release(deposit)
    summary.waiting++
  }

  /**
   * Whether the service has the deposit: the local payout already out of pending (a
   * change the ledger applied while this run held the row), else the quote status.
   */
  async #detected(deposit: EscrowDeposit): Promise<boolean> {
    if (deposit.payoutUuid) {
      const payout = await Payout.query({ connection: this.#options.connection })
        .where('payout_uuid', deposit.payoutUuid)
        .first()
      if (payout && (payout.status === 'processing' || payout.status === 'completed')) return true
    }
    const quote = await this.#options.client.getQuoteStatus(deposit.quoteId)
    return quote.status !== 'awaiting_escrow_deposit'
  }

  /** Back in the queue, due again after `nextAttemptAt` (if set). */
  async #release(deposit: EscrowDeposit) {
    deposit.state = 'deposit_recorded'
    await deposit.save()
  }

  async #markConfirmed(
    deposit: EscrowDeposit,
    summary: EscrowSummary,
    how: 'confirmed' | 'detected'
  ) {
    await this.#announce(deposit, 'confirmed', () =>
      this.#options.onConfirmed?.({
        quoteId: deposit.quoteId,
        payoutId: deposit.payoutUuid,
        txHash: deposit.txHash,
      })
    )
    summary[how]++
  }

  /** Out of attempts: a human decides. Fired once: the row leaves the queue with it. */
  async #giveUp(deposit: EscrowDeposit, summary: EscrowSummary) {
    await this.#announce(deposit, 'confirm_failed', () =>
      this.#options.onFailed?.({
        quoteId: deposit.quoteId,
        payoutId: deposit.payoutUuid,
        txHash: deposit.txHash,
        attempts: deposit.attempts,
        code: deposit.lastErrorCode ?? 'UNKNOWN',
      })
    )
    summary.failed++
  }

  /**
   * Fires the event, then moves the row to `state`. A crash in between fires it again in
   * the next process; a mark the database lost is retried by a later run of this one,
   * without firing again.
   */
  async #announce(
    deposit: EscrowDeposit,
    state: 'confirmed' | 'confirm_failed',
    fire: () => void | Promise<void>
  ) {
    const key = `${state}:${deposit.id}`
    if (!this.#announced.has(key)) {
      await fire()
      this.#announced.add(key)
    }
    deposit.state = state
    deposit.nextAttemptAt = null
    await deposit.save()
    this.#announced.delete(key)
  }
}
