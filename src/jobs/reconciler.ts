import { DateTime } from 'luxon'
import type { PayoutsClient } from '../client/payouts_client.ts'
import { PayoutsApiError } from '../client/errors.ts'
import { dbDate } from '../database/dates.ts'
import type { Database } from '@adonisjs/lucid/database'
import Payout from '../models/payout.ts'
import PayoutEvent from '../models/payout_event.ts'
import type { PayoutStuckEvent } from '../types/events.ts'
import type { PayoutLedger } from '../ledger/payout_ledger.ts'
import { sharedAccount } from '../ledger/accounts.ts'
import { readIds } from '../ledger/vocabulary.ts'

export interface ReconcilerOptions {
  db: Database
  ledger: PayoutLedger
  client: Pick<PayoutsClient, 'getPayout' | 'rateLimit'>
  /**
   * The account whose payouts it reads (its ledger's, and its client's key; naming another
   * is refused): another account's payouts are read with that account's key, by its own.
   */
  account?: string
  connection?: string
  /** Payouts not observed for this long are read again. */
  staleAfterMs?: number
  /** At most this many reads per run. */
  batchSize?: number
  /** Share of the key's rate budget a run may spend (reads X-RateLimit-Remaining). */
  budgetShare?: number
  /** Non-terminal payouts created longer ago than this are reported once as stuck. */
  stuckAfterMs?: number
  onStuck?: (event: PayoutStuckEvent) => unknown
  now?: () => DateTime
}

export interface ReconcileSummary {
  checked: number
  changed: number
  missing: number
  /** Reads that failed for that payout alone (it is read again next run). */
  failed: number
  stuck: number
  stoppedForBudget: boolean
  /** The service, the network or the key failed: the rest waits for the next run. */
  stoppedForError: boolean
}

/** The statuses a payout can still leave. */
const NON_TERMINAL = ['pending', 'processing']

/**
 * Failures that are not about one payout, reading on would fail the same way: no answer,
 * the key refused (a wrong environment included), rate limited, the service failing.
 * Judged on the status alone: a body's code or words cannot move a read from one class
 * to the other.
 */
function isServiceWide(error: PayoutsApiError): boolean {
  const { status } = error
  return status === 0 || status === 401 || status === 403 || status === 429 || status >= 500
}

/**
 * Reads non-terminal payouts that have gone quiet and applies what the service says, as
 * a `poll` observation. Oldest observation first, so a run cut short by its budget
 * resumes where it stopped (each read moves the payout to the back of the line).
 */
export class Reconciler {
  #options: Required<Omit<ReconcilerOptions, 'connection' | 'onStuck'>> &
    Pick<ReconcilerOptions, 'connection' | 'onStuck'>

  constructor(options: ReconcilerOptions) {
    this.#options = {
      staleAfterMs: 5 * 60_000,
      batchSize: 50,
      budgetShare: 0.5,
      stuckAfterMs: 24 * 3600_000,
      now: () => DateTime.now(),
      ...options,
      account: sharedAccount(options.account, options.ledger, 'a reconciler'),
    }
  }

  /** The account's payouts, on the job's connection. */
  #payouts() {
    const { connection, account } = this.#options
    return Payout.query({ connection }).where('account', account)
  }

  async run(overrides: { staleAfterMs?: number } = {}): Promise<ReconcileSummary> {
    const { ledger, client, batchSize, budgetShare } = this.#options
    const staleAfterMs = overrides.staleAfterMs ?? this.#options.staleAfterMs
    const cutoff = this.#options.now().minus({ milliseconds: staleAfterMs })
    const payouts = await this.#stale(cutoff, batchSize)
    const summary: ReconcileSummary = {
      checked: 0,
      changed: 0,
      missing: 0,
      failed: 0,
      stuck: 0,
      stoppedForBudget: false,
      stoppedForError: false,
    }
    for (const payout of payouts) {
      // Headers from an earlier run may be stale (the bucket refills): the first read of
      // a run refreshes them, the budget governs the rest.
      const budget = summary.checked > 0 ? client.rateLimit : null
      if (budget && budget.remaining <= Math.floor(budget.limit * (1 - budgetShare))) {
        summary.stoppedForBudget = true
        break
      }
      summary.checked++
      try {
        const remote = await client.getPayout(payout.payoutUuid)
        const result = await ledger.apply({
          // A payout first seen by its read id learns its UUID here, if the read gives it.
          ...readIds(payout.payoutUuid, remote),
          status: remote.status,
          step: remote.step ?? null,
          completedAt: remote.completedAt ?? null,
          source: 'poll',
          eventType: 'reconcile',
        })
        if (result.changed) summary.changed++
        if (await this.#reportIfStuck(result.payout)) summary.stuck++
      } catch (error) {
        if (!(error instanceof PayoutsApiError)) throw error
        if (isServiceWide(error)) {
          summary.stoppedForError = true
          break
        }
        // One payout the service answers badly must not block the ones behind it.
        if (error.status === 404) summary.missing++
        else summary.failed++
      }
    }
    return summary
  }

  /**
   * Up to `limit` non-terminal payouts not observed since `cutoff`: never observed first,
   * then oldest observation first. One query per status, each a range of the (status,
   * last_observed_at) index read in its order: a single query with an OR or an IN would
   * read and sort every non-terminal payout, however recently observed, on each run.
   */
  async #stale(cutoff: DateTime, limit: number): Promise<Payout[]> {
    const { db, connection } = this.#options
    const never = await this.#payouts()
      .whereIn('status', NON_TERMINAL)
      .whereNull('last_observed_at')
      .orderBy('id', 'asc')
      .limit(limit)
    if (never.length >= limit) return never
    const before = dbDate(db.connection(connection), cutoff)
    const byStatus = await Promise.all(
      NON_TERMINAL.map((status) =>
        this.#payouts()
          .where('status', status)
          .where('last_observed_at', '<=', before)
          .orderBy('last_observed_at', 'asc')
          .limit(limit - never.length)
      )
    )
    const stale = byStatus
      .flat()
      .sort((a, b) => a.lastObservedAt!.toMillis() - b.lastObservedAt!.toMillis())
    return [...never, ...stale].slice(0, limit)
  }

  /** Raises payouts:stuck once per payout (remembered as a payout_events row). */
  async #reportIfStuck(payout: Payout): Promise<boolean> {
    if (!['pending', 'processing'].includes(payout.status)) return false
    const age = this.#options.now().diff(payout.createdAt).toMillis()
    if (age < this.#options.stuckAfterMs) return false
    const { connection, account } = this.#options
    const known = await PayoutEvent.query({ connection })
      .where('account', account)
      .where('payout_uuid', payout.payoutUuid)
      .where('event_type', 'stuck')
      .first()
    if (known) return false
    await PayoutEvent.create(
      {
        account,
        payoutUuid: payout.payoutUuid,
        source: 'poll',
        eventType: 'stuck',
        status: payout.status,
        step: payout.step,
        applied: false,
        reason: 'stuck',
        observedAt: this.#options.now(),
      },
      { connection }
    )
    await this.#options.onStuck?.({
      payoutId: payout.payoutUuid,
      status: payout.status,
      step: payout.step,
      since: payout.createdAt.toISO()!,
    })
    return true
  }
}
