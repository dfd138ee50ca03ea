import { AsyncResource } from 'node:async_hooks'
import type { Logger } from '@adonisjs/core/logger'
import type { Database } from '@adonisjs/lucid/database'
import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import { boundedTransaction, commitConfirmed, retryingDeadlocks } from '../database/deadline.ts'
import debug from '../debug.ts'
import Payout from '../models/payout.ts'
import { PayoutApplier } from './payout_applier.ts'
import {
  DEFAULT_NOTIFY_LEASE_MS,
  leaseOwner,
  PayoutOutbox,
  type ChangeListener,
  type NotifiedOutcomes,
} from './payout_outbox.ts'
import type { AppliedBatch, ApplyResult, PayoutObservation } from './vocabulary.ts'
import { safeError } from '../safe_error.ts'
import { tellingOrder, type Turn } from './telling_order.ts'

export type { ChangeListener } from './payout_outbox.ts'

/** How a ledger is bound: its connection, its time bounds, and who is told of its commits. */
export interface PayoutLedgerOptions {
  /**
   * The account whose payouts this ledger applies and notifies (`main` when absent): every
   * row it reads or writes is that account's, so ledgers of two accounts share the tables.
   */
  account?: string
  /** The Lucid connection (the app's default when absent). */
  connection?: string
  /** Bound of `applyBatch`'s transaction (see `boundedTransaction`); 0 waits forever. */
  transactionTimeoutMs?: number
  /** The notification lease on each change this ledger writes (`events.notifyLeaseMs`). */
  notifyLeaseMs?: number
  /**
   * Told once after each COMMIT that logged a change or gave a payout its owner, before the
   * changes are told (PostgreSQL with the relay on: a NOTIFY that wakes the relays).
   */
  notices?: { committed(): void } | null
  /** Where a failure after COMMIT is logged: nobody is left to throw it to. */
  logger?: Pick<Logger, 'error'>
  /**
   * How long a batch's synchronous work (its models made, reduced, compared) runs inside its
   * transaction before the event loop takes a turn, ms (`TURN_MS`, 3); not on SQLite.
   */
  turnMs?: number
}

/** A batch applied inside a caller's transaction, and when its changes were told. */
export type AppliedInTransaction = AppliedBatch<Payout> & {
  /**
   * Settles once the batch's changes were told to the listener after the transaction's
   * COMMIT (at once when it changed nothing; never rejects). A caller awaits it only to
   * return after the events, never to make them happen: the ledger registered them on the
   * transaction. Left pending when the transaction never commits.
   */
  notified: Promise<void>
}

/**
 * The one place payout state changes. Every observation runs in a transaction that locks
 * the row (PostgreSQL, MySQL) or holds SQLite's single writer, goes through the reducer,
 * is logged in payout_events whatever the outcome, and is told to the listener after
 * COMMIT: the ledger registers that on the transaction itself (`trx.after('commit')`), so
 * no caller pairs it by hand. The log is also the outbox: an applied change stays
 * un-notified until the listener has heard it, so a change whose process died between
 * COMMIT and the listener is notified by `renotify` later. A change is written under this
 * ledger's notification lease (`notifyLeaseMs`, renewed while its listener runs), so no
 * other live process fires it: only a process that died leaves its changes to another one,
 * once their lease expired.
 *
 * Applying lives in `PayoutApplier` (with the read-id placeholders it merges first and the
 * escrow deposits it confirms), the notifying in `PayoutOutbox`; this class puts them
 * together.
 */
export class PayoutLedger {
  #db: Database
  #applier: PayoutApplier
  #outbox: PayoutOutbox
  #options: PayoutLedgerOptions
  #leaseMs: number

  constructor(db: Database, listener: ChangeListener = {}, options: PayoutLedgerOptions = {}) {
    this.#db = db
    this.#options = options
    // Its own owner: another ledger of this process fences its changes as another process does.
    const lease = { owner: leaseOwner(), ms: options.notifyLeaseMs ?? DEFAULT_NOTIFY_LEASE_MS }
    this.#leaseMs = lease.ms
    const account = { account: options.account ?? DEFAULT_ACCOUNT }
    this.#applier = new PayoutApplier(lease, { ...account, turnMs: options.turnMs })
    this.#outbox = new PayoutOutbox(
      db,
      listener,
      options.connection,
      options.transactionTimeoutMs ?? 0,
      lease,
      options.logger,
      account
    )
  }

  /** The account whose payouts this ledger holds (the executor and the jobs share it). */
  get account(): string {
    return this.#applier.account
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
   * Returns once the changes were told.
   */
  async applyBatch(observations: PayoutObservation[]): Promise<Array<ApplyResult<Payout>>> {
    if (observations.length === 0) return []
    const batch = await this.#applyRetryingDeadlocks(observations)
    await batch.notified
    return batch.results
  }

  #applyRetryingDeadlocks(observations: PayoutObservation[]) {
    const { connection, transactionTimeoutMs = 0 } = this.#options
    const client = this.#db.connection(connection)
    return retryingDeadlocks(client, 'ledger transaction', () =>
      boundedTransaction(
        client,
        { timeoutMs: transactionTimeoutMs, what: 'ledger transaction', writes: Payout.table },
        (trx) => this.applyBatchInTransaction(trx, observations)
      )
    )
  }

  /**
   * `applyBatch` inside a caller's transaction (the inbox marks its rows processed in the
   * same one, the executor its intent). Its changes are told after that transaction's
   * COMMIT, and not at all if it rolls back (see `notified`). Lucid runs a savepoint's
   * `after('commit')` when the savepoint is released: inside a nested transaction (a host
   * test's global transaction) they are told then, before the outer COMMIT.
   */
  async applyBatchInTransaction(
    trx: TransactionClientContract,
    observations: PayoutObservation[]
  ): Promise<AppliedInTransaction> {
    const batch = await this.#applier.applyBatchInTransaction(trx, observations)
    return { ...batch, notified: this.#tellAfterCommit(trx, batch) }
  }

  /**
   * Registers the batch's telling on the transaction: after its COMMIT, the commit notice,
   * then the outbox. The hook takes the changes' turns (`TellingOrder`): a change reaches the
   * listener once its payout's change committed before it in this process did (telling may
   * ask the database first, and a later commit's telling must not overtake it). Lucid
   * swallows what an `after` hook throws, so the hook only starts the work, which records its
   * own failure (the outbox leaves a change it could not tell to `renotify`).
   */
  #tellAfterCommit(trx: TransactionClientContract, batch: NotifiedOutcomes): Promise<void> {
    const keys = batch.outcomes.map(({ change, result }) =>
      change || result?.ownerAttached ? this.#payoutKey((change ?? result)!.payout) : null
    )
    if (keys.every((key) => key === null)) return Promise.resolve()
    return new Promise<void>((resolve) => {
      // Bound to where it was registered (the apply, inside its caller's trace): the changes
      // are told in that context, not in whatever context the COMMIT ends in.
      // Lucid runs this hook when COMMIT failed too: only a confirmed COMMIT is told. One that
      // did commit unconfirmed is told by the outbox sweep once its lease ends, once.
      trx.after(
        'commit',
        AsyncResource.bind(() => {
          const turns = tellingOrder.take(keys, this.#leaseMs / 3)
          resolve(
            commitConfirmed(trx, 'ledger transaction')
              .then(
                () => this.#tell(batch, turns),
                (error) => debug('ledger: changes not told: %s', safeError(error).message)
              )
              .finally(() => turns.forEach((turn) => turn?.go()))
          )
        })
      )
      trx.after('rollback', () => resolve())
    })
  }

  /** A payout as the order of telling knows it: its connection, account and UUID. */
  #payoutKey(payout: Payout): string {
    const connection = this.#options.connection ?? this.#db.primaryConnectionName
    return `${connection}\0${this.account}\0${payout.payoutUuid}`
  }

  async #tell(batch: NotifiedOutcomes, turns: Array<Turn | undefined>): Promise<void> {
    try {
      this.#options.notices?.committed()
    } catch (error) {
      debug('ledger: commit notice failed: %s', safeError(error).message)
    }
    await this.#outbox.notifyBatch(batch, turns).catch((error) => {
      this.#options.logger?.error(
        { err: safeError(error) },
        'payouts change listeners failed after commit'
      )
    })
  }

  /** The outbox sweep: notifies the changes a dead process left un-notified, after their lease. */
  renotify(options: { olderThanMs?: number; limit?: number } = {}): Promise<number> {
    return this.#outbox.renotify(options)
  }
}
