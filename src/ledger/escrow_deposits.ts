import { DateTime } from 'luxon'
import type { Database } from '@adonisjs/lucid/database'
import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { EscrowConfirmationFailedError, PayoutsApiError, PayoutsError } from '../client/errors.ts'
import type { PayoutsClient } from '../client/payouts_client.ts'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import { dbDate } from '../database/dates.ts'
import { affectedRows } from '../database/dialects.ts'
import { E_PAYOUTS_ESCROW_CONFIRMATION_IN_FLIGHT } from '../errors.ts'
import EscrowDeposit from '../models/escrow_deposit.ts'
import Payout from '../models/payout.ts'
import type { StablecoinToFiatExecuteData } from '../schemas/resources.ts'
import type { EscrowEvent } from '../types/events.ts'
import { safeError } from '../safe_error.ts'

/** What the escrow deposits need: the service to read and confirm, and the event hooks. */
export interface EscrowDepositsOptions {
  db: Database
  client: Pick<PayoutsClient, 'getQuoteStatus' | 'confirmEscrowDeposit'>
  /** The account whose deposits these are (`main` when absent): a quote id is its own. */
  account?: string
  connection?: string
  /** Confirmations sent for one deposit before it is marked `confirm_failed` (alert). */
  maxAttempts?: number
  /** Wait after the first failed confirmation; doubles after each one. */
  retryBackoffMs?: number
  onConfirmed?: (event: EscrowEvent) => unknown
  onFailed?: (event: EscrowEvent) => unknown
  now?: () => DateTime
}

/** How one attempt on a claimed deposit ended; the fallback job counts them. */
export type ConfirmOutcome = 'confirmed' | 'detected' | 'failed' | 'waiting'

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

/**
 * The deposit a stablecoin execute asks for, stored in the execute's transaction. Created
 * once: a second store of the same response (a recovery racing the original call) must
 * not reset a deposit already recorded or confirmed.
 */
export async function createEscrowDeposit(
  trx: TransactionClientContract,
  result: StablecoinToFiatExecuteData,
  account: string
) {
  await EscrowDeposit.firstOrCreate(
    { account, quoteId: result.quoteId },
    {
      payoutUuid: result.payoutId,
      escrowAddress: result.escrowAddress,
      tokenAddress: result.tokenAddress,
      chainId: result.chainId,
      amountAtomic: result.depositAmountAtomic.toString(),
      state: 'awaiting_deposit',
    },
    { client: trx }
  )
}

/**
 * The escrow deposits of stablecoin payouts, and every change of their state: the host
 * app records the deposit it sent (`record`), a payout change that shows the service has
 * it confirms it in the ledger's transaction (`confirmDetectedDeposits` in
 * `escrow_detection.ts`), and the manual
 * confirmation of a deposit the fallback job claimed (`confirmClaimed`), used only as the
 * spec allows. Every request is a decision made after reading the deposit's state (the
 * local payout, then the quote status), and is sent once: never blind-retried. A refused
 * confirmation (the service's 500, whatever its body) is read again, then tried later with
 * a doubling wait, `maxAttempts` times in all; then the deposit is `confirm_failed` and
 * `onFailed` fires once. See docs/spec-gaps.md.
 */
export class EscrowDeposits {
  /**
   * Events this process fired for a deposit whose row the database then failed to mark (a
   * stall, a dropped connection): a later attempt marks the row without firing them again.
   */
  #announced = new Set<string>()
  #options: Required<Omit<EscrowDepositsOptions, 'connection' | 'onConfirmed' | 'onFailed'>> &
    Pick<EscrowDepositsOptions, 'connection' | 'onConfirmed' | 'onFailed'>

  constructor(options: EscrowDepositsOptions) {
    this.#options = {
      maxAttempts: 3,
      retryBackoffMs: 5 * 60_000,
      now: () => DateTime.now(),
      ...options,
      account: options.account ?? DEFAULT_ACCOUNT,
    }
  }

  /** The account whose deposits these are (the fallback job works on them). */
  get account(): string {
    return this.#options.account
  }

  /** The host app records the deposit it sent, with when it was confirmed on-chain. */
  async record(input: { quoteId: string; txHash: string; confirmedAt?: DateTime | Date | string }) {
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
    const { db, connection, account } = this.#options
    const find = () =>
      EscrowDeposit.query({ connection })
        .where('account', account)
        .where('quote_id', input.quoteId)
        .first()
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
    const own = () => sql.from(EscrowDeposit.table).where('account', account)
    let updated = await own()
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
      updated = await own()
        .where('id', deposit.id)
        .whereIn('state', ['awaiting_deposit', 'deposit_recorded'])
        .where('tx_hash', input.txHash)
        .update(recorded)
    }
    const current = (await find())!
    if (affectedRows(updated) === 1) return current
    if (current.state === 'confirm_requested' && current.txHash !== input.txHash) {
      throw new E_PAYOUTS_ESCROW_CONFIRMATION_IN_FLIGHT([input.quoteId, current.txHash ?? ''])
    }
    // Confirmed already, or the same deposit is being confirmed right now: nothing to do.
    return current
  }

  /**
   * One deposit the fallback job claimed (`confirm_requested`), as read after the claim (a
   * row read before it may carry another transaction or stale attempts): read, then (still
   * awaiting) one confirmation, then read again before deciding on a refusal. Events fire
   * before the row is marked: a crash in between fires them again after the restart (same
   * quoteId), never not at all.
   */
  async confirmClaimed(deposit: EscrowDeposit): Promise<ConfirmOutcome> {
    let detected: boolean
    try {
      detected = await this.#detected(deposit)
    } catch (error) {
      await this.#release(deposit)
      throw error
    }
    if (detected) return this.#markConfirmed(deposit, 'detected')
    // A refusal whose read-back failed: the state is known now, and the bound is reached.
    if (deposit.attempts >= this.#options.maxAttempts) return this.#giveUp(deposit)
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
        return 'waiting'
      }
      if (!isConfirmationRefused(error)) {
        await this.#release(deposit)
        throw error
      }
      return this.#refused(deposit, error)
    }
    return this.#markConfirmed(deposit, 'confirmed')
  }

  /** The service refused the confirmation: read the state again, then decide. */
  async #refused(deposit: EscrowDeposit, error: unknown): Promise<ConfirmOutcome> {
    deposit.attempts += 1
    deposit.lastErrorCode = failureCode(error)
    deposit.lastError = safeError(error).message
    let detected: boolean | null = null
    try {
      detected = await this.#detected(deposit)
    } catch {
      // Unknown: decided on the next attempt's read, never without one.
    }
    if (detected) return this.#markConfirmed(deposit, 'detected')
    if (detected === false && deposit.attempts >= this.#options.maxAttempts) {
      return this.#giveUp(deposit)
    }
    const wait = this.#options.retryBackoffMs * 2 ** Math.max(0, deposit.attempts - 1)
    deposit.nextAttemptAt = this.#options.now().plus({ milliseconds: wait })
    await this.#release(deposit)
    return 'waiting'
  }

  /**
   * Whether the service has the deposit: the local payout already out of pending (a
   * change the ledger applied while this run held the row), else the quote status.
   */
  async #detected(deposit: EscrowDeposit): Promise<boolean> {
    if (deposit.payoutUuid) {
      const payout = await Payout.query({ connection: this.#options.connection })
        .where('account', this.#options.account)
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
    how: 'confirmed' | 'detected'
  ): Promise<ConfirmOutcome> {
    await this.#announce(deposit, 'confirmed', () =>
      this.#options.onConfirmed?.({
        quoteId: deposit.quoteId,
        payoutId: deposit.payoutUuid,
        txHash: deposit.txHash,
      })
    )
    return how
  }

  /** Out of attempts: a human decides. Fired once: the row leaves the queue with it. */
  async #giveUp(deposit: EscrowDeposit): Promise<ConfirmOutcome> {
    await this.#announce(deposit, 'confirm_failed', () =>
      this.#options.onFailed?.({
        quoteId: deposit.quoteId,
        payoutId: deposit.payoutUuid,
        txHash: deposit.txHash,
        attempts: deposit.attempts,
        code: deposit.lastErrorCode ?? 'UNKNOWN',
      })
    )
    return 'failed'
  }

  /**
   * Fires the event, then moves the row to `state`. A crash in between fires it again in
   * the next process; a mark the database lost is retried by a later run of this one,
   * without firing again.
   */
  async #announce(
    deposit: EscrowDeposit,
    state: 'confirmed' | 'confirm_failed',
    fire: () => unknown
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
