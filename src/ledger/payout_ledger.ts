import type { Database } from '@adonisjs/lucid/database'
import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { boundedTransaction } from '../database/deadline.ts'
import { isDeadlock } from '../database/dialects.ts'
import debug from '../debug.ts'
import Payout from '../models/payout.ts'
import { PayoutApplier, type ApplyHooks } from './payout_applier.ts'
import {
  DEFAULT_NOTIFY_LEASE_MS,
  leaseOwner,
  PayoutOutbox,
  type NotifiedOutcomes,
  type OutboxHooks,
} from './payout_outbox.ts'
import type { AppliedBatch, ApplyResult, PayoutObservation } from './vocabulary.ts'

/** Runs of one batch when the database picks it as a deadlock's victim (see `applyBatch`). */
const DEADLOCK_ATTEMPTS = 3

/** What the ledger's owner runs around a change: inside its transaction and after COMMIT. */
export type LedgerHooks = ApplyHooks &
  OutboxHooks & {
    /**
     * Runs after the COMMIT of a batch that logged a change or gave a payout its owner, once
     * per batch and before the change hooks: the relays are told to read (a NOTIFY).
     */
    onCommitted?: () => void
  }

/**
 * The one place payout state changes. Every observation runs in a transaction that locks
 * the row (PostgreSQL, MySQL) or holds SQLite's single writer, goes through the reducer,
 * is logged in payout_events whatever the outcome, and notifies after COMMIT. The log is
 * also the outbox: an applied change stays un-notified until its hook has run, so a change
 * whose process died between COMMIT and the hook is notified by `renotify` later. A change
 * is written under this process's notification lease (`notifyLeaseMs`, renewed while its
 * hook runs), so no other live process fires it: only a process that died leaves its
 * changes to another one, once their lease expired.
 *
 * Applying lives in `PayoutApplier` (with the read-id placeholders it merges first), the
 * notifying in `PayoutOutbox`; this class puts them together.
 */
export class PayoutLedger {
  #applier: PayoutApplier
  #outbox: PayoutOutbox
  #onCommitted?: () => void

  constructor(
    private db: Database,
    hooks: LedgerHooks = {},
    private connection?: string,
    /** Bound of `applyBatch`'s transaction (see `boundedTransaction`); 0 waits forever. */
    private transactionTimeoutMs = 0,
    /** The notification lease on each change this process writes (`events.notifyLeaseMs`). */
    notifyLeaseMs = DEFAULT_NOTIFY_LEASE_MS
  ) {
    // Its own owner: another ledger of this process fences its changes as another process does.
    const lease = { owner: leaseOwner(), ms: notifyLeaseMs }
    this.#applier = new PayoutApplier(hooks, lease)
    this.#outbox = new PayoutOutbox(db, hooks, connection, transactionTimeoutMs, lease)
    this.#onCommitted = hooks.onCommitted
  }

  /** Applies one observation (see `applyBatch`). */
  async apply(observation: PayoutObservation): Promise<ApplyResult<Payout>> {
    const [result] = await this.applyBatch([observation])
    return result
  }

  /**
   * Applies several observations in one transaction: one commit for a batch of inbox rows
   * instead of one per row. Payouts are locked in id order (observations of one payout keep
   * their order), so two instances applying batches never wait on each other in a cycle.
   * If any observation fails, nothing is applied and this throws; the caller then applies
   * them one by one, each with its own retries. A transaction the database rolled back as a
   * deadlock's victim (MySQL's locking of new rows can make one between two instances
   * inserting payouts side by side) is run again, up to `DEADLOCK_ATTEMPTS` times in all.
   * Changes are notified after COMMIT.
   */
  async applyBatch(observations: PayoutObservation[]): Promise<Array<ApplyResult<Payout>>> {
    if (observations.length === 0) return []
    const batch = await this.#applyRetryingDeadlocks(observations)
    await this.notifyBatch(batch)
    return batch.results
  }

  async #applyRetryingDeadlocks(observations: PayoutObservation[]) {
    for (let attempt = 1; ; attempt++) {
      try {
        return await boundedTransaction(
          this.db.connection(this.connection),
          {
            timeoutMs: this.transactionTimeoutMs,
            what: 'ledger transaction',
            writes: Payout.table,
          },
          (trx) => this.applyBatchInTransaction(trx, observations)
        )
      } catch (error) {
        if (!isDeadlock(error) || attempt >= DEADLOCK_ATTEMPTS) throw error
        debug('ledger: a deadlock rolled the batch back, attempt %d', attempt + 1)
      }
    }
  }

  /**
   * `applyBatch` inside a caller's transaction (the inbox marks its rows processed in the
   * same one). The caller must call `notifyBatch` after its COMMIT.
   */
  applyBatchInTransaction(
    trx: TransactionClientContract,
    observations: PayoutObservation[]
  ): Promise<AppliedBatch<Payout> & NotifiedOutcomes> {
    return this.#applier.applyBatchInTransaction(trx, observations)
  }

  /** Runs the change hooks of an applied batch, after its COMMIT (see `PayoutOutbox`). */
  notifyBatch(batch: NotifiedOutcomes): Promise<void> {
    if (batch.outcomes.some(({ change, result }) => change || result?.ownerAttached)) {
      this.#onCommitted?.()
    }
    return this.#outbox.notifyBatch(batch)
  }

  /** The outbox sweep: notifies the changes a dead process left un-notified, after their lease. */
  renotify(options: { olderThanMs?: number; limit?: number } = {}): Promise<number> {
    return this.#outbox.renotify(options)
  }
}
