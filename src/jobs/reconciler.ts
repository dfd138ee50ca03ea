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
import { isTerminal } from '../ledger/state_machine.ts'
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
  /** At most this many reads per run (unfinished and ended payouts together). */
  batchSize?: number
  /**
   * Payouts that ended within this long (by `status_changed_at`) and whose routing detail
   * was not read since are read once more, for their final `providerMetadata` (24 h).
   */
  endedWithinMs?: number
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
  /**
   * Of `checked`: payouts that had ended (by a webhook, say) read once for their final
   * routing detail. Such a read moves no status and fires no event.
   */
  ended: number
  stoppedForBudget: boolean
  /** The service, the network or the key failed: the rest waits for the next run. */
  stoppedForError: boolean
}

/** The statuses a payout can still leave. */
const NON_TERMINAL = ['pending', 'processing']

/**
 * Ended payouts are read for their final routing detail within this long of their end: the
 * bound on how often one the service cannot answer (a 404) is tried, and on the rows the
 * query goes through.
 */
const ENDED_WITHIN_MS = 24 * 3600_000

/** The later of two instants. */
function later(a: DateTime, b: DateTime): DateTime {
  return a.toMillis() >= b.toMillis() ? a : b
}

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
 *
 * It also reads, once, payouts that ended recently (within `endedWithinMs`) after the last
 * read of their routing detail: only a read (`GET /payouts/{id}`) carries `providerMetadata`,
 * so a payout that ended by a webhook would otherwise keep the detail of a read from before
 * its end (a failed leg's status missing). Such a read leaves the status where it is (a
 * terminal status is never left) and fires no event; its detail is dated no earlier than the
 * end, so the payout is not read again. Unfinished payouts come first: the ended ones take
 * the room they leave in the batch and the budget (a missed status change matters more than
 * a leg's detail, which waits for a quieter run).
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
      endedWithinMs: ENDED_WITHIN_MS,
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
    const { ledger, client, batchSize, budgetShare, endedWithinMs } = this.#options
    const staleAfterMs = overrides.staleAfterMs ?? this.#options.staleAfterMs
    const now = this.#options.now()
    const stale = await this.#stale(now.minus({ milliseconds: staleAfterMs }), batchSize)
    // The room the unfinished ones leave: a missed status change comes before a leg's detail.
    const ended =
      stale.length < batchSize
        ? await this.#endedUnread(
            now.minus({ milliseconds: endedWithinMs }),
            batchSize - stale.length
          )
        : []
    const payouts = [...stale, ...ended]
    const summary: ReconcileSummary = {
      checked: 0,
      changed: 0,
      missing: 0,
      failed: 0,
      stuck: 0,
      ended: 0,
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
      const hadEnded = isTerminal(payout.status)
      if (hadEnded) summary.ended++
      try {
        const remote = await client.getPayout(payout.payoutUuid)
        // When the service answered: what the routing detail is ordered by.
        const observedAt = DateTime.now()
        const result = await ledger.apply({
          // A payout first seen by its read id learns its UUID here, if the read gives it.
          ...readIds(payout.payoutUuid, remote),
          status: remote.status,
          step: remote.step ?? null,
          completedAt: remote.completedAt ?? null,
          source: 'poll',
          eventType: 'reconcile',
          observedAt,
          fields: { providerMetadata: remote.providerMetadata ?? null },
          // A read that shows the status a payout ended in was taken after its end, whatever
          // the clocks say (the end's time is the service's, from its event): dated no
          // earlier, so the payout is not picked again.
          ...(hadEnded &&
            remote.status === payout.status &&
            payout.statusChangedAt && {
              providerMetadataAt: later(observedAt, payout.statusChangedAt),
            }),
        })
        if (result.changed) summary.changed++
        // The row the read applied to (a payout read by its read id may have been merged).
        if (hadEnded && result.payout.providerMetadataDueAt) {
          await this.#readAgainLater(result.payout)
        }
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
        if (hadEnded) await this.#readAgainLater(payout)
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

  /**
   * Up to `limit` payouts that ended since `since` and whose routing detail was not read
   * since their end, longest due first: a range of the `(account, provider_metadata_due_at)`
   * index, which the ledger keeps to the payouts still to read (the seventh migration), in
   * its order. A read that gives the detail of the end takes a payout out of it; one that
   * does not (the service not yet showing the end, no detail, no answer) dates it anew
   * (`#readAgainLater`), so it goes behind the others, and the end's time bounds how long it
   * is read again. In a running app the range holds the payouts that ended since the last
   * runs.
   */
  async #endedUnread(since: DateTime, limit: number): Promise<Payout[]> {
    if (limit <= 0) return []
    const { db, connection } = this.#options
    const from = dbDate(db.connection(connection), since)
    return this.#payouts()
      .where('provider_metadata_due_at', '>=', from)
      .where('status_changed_at', '>=', from)
      .orderBy('provider_metadata_due_at', 'asc')
      .limit(limit)
  }

  /**
   * An ended payout whose read did not give the detail of its end: still due, behind the
   * payouts due now (a few that the service answers that way must not take every run's room
   * from those that ended after them).
   */
  async #readAgainLater(payout: Pick<Payout, 'id'>) {
    const { db, connection } = this.#options
    await this.#payouts()
      .where('id', payout.id)
      .whereNotNull('provider_metadata_due_at')
      .update({ provider_metadata_due_at: dbDate(db.connection(connection), this.#options.now()) })
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
