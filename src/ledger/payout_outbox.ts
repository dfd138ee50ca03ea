import type { Logger } from '@adonisjs/core/logger'
import type { Database } from '@adonisjs/lucid/database'
import type { DateTime } from 'luxon'
import { withStatementTimeout } from '../database/deadline.ts'
import { asStored } from '../database/dialects.ts'
import type Payout from '../models/payout.ts'
import PayoutEvent from '../models/payout_event.ts'
import type { EscrowEvent, ObservationSource } from '../types/events.ts'
import { depositConfirmedBy } from './escrow_detection.ts'
import { tellingOrder, type Turn } from './telling_order.ts'
import {
  DEFAULT_NOTIFY_LEASE_MS,
  leaseOwner,
  NotifyLeases,
  type NotifyLease,
} from './notify_leases.ts'
import { OutboxSweep } from './outbox_sweep.ts'
import type { ApplyResult, PayoutChange } from './vocabulary.ts'
import { safeError } from '../safe_error.ts'

export { DEFAULT_NOTIFY_LEASE_MS, leaseOwner, type NotifyLease } from './notify_leases.ts'

/**
 * Who hears what the ledger committed (the plugin's notifier; a test's recorder): given to
 * the ledger when it is built, called by its outbox after COMMIT.
 */
export interface ChangeListener {
  /**
   * Once per real change, never for duplicates or stale events, with the escrow deposit the
   * change confirmed (the service detected it), if any.
   */
  onChange?: (change: PayoutChange<Payout>, deposit: EscrowEvent | null) => void | Promise<void>
  /**
   * When an observation that changes nothing gives the payout its owner (the service's
   * payout.created can arrive before the execute response): the owner's listeners have not
   * heard of the payout yet.
   */
  onOwnerAttached?: (change: PayoutChange<Payout>) => void | Promise<void>
}

/** What the outbox notifies: outcomes of applied observations, with or without a change. */
export interface NotifiedOutcomes {
  outcomes: Array<{ change: PayoutChange<Payout> | null; result?: ApplyResult<Payout> }>
  /** When the lease the applying transaction took on these changes ends (see `NotifyLease`). */
  notifyUntil?: DateTime | null
}

/**
 * The payout_events log read as an outbox: an applied change stays un-notified
 * (`notified_at` null) until its hook has run, so a change whose process died between
 * COMMIT and the hook is notified by `renotify` later, with the same eventId.
 *
 * One live process notifies a change: the transaction that writes it gives it a lease
 * (`notify_owner`, `notify_until`) held by the applying process, renewed every third of
 * `lease.ms` while its hook runs, and ended when the change is marked notified, change by
 * change. Another process takes a change only once its lease expired (its process died, or
 * stalled past the lease), by a conditional UPDATE only one of them wins. Before a change's
 * hook runs, a lease with less than two thirds left is renewed by a conditional UPDATE too,
 * and a change another process took meanwhile is left to it. Each renewal statement is
 * bounded to a sixth of the lease, so one that hangs fails before the next renewal is due.
 */
export class PayoutOutbox {
  /** The leases this instance holds on the changes it notifies: their renewal, their marks. */
  #leases: NotifyLeases
  #sweep: OutboxSweep

  constructor(
    private db: Database,
    private listener: ChangeListener = {},
    private connection?: string,
    /** Bound of the sweep and of each statement outside a transaction; 0 waits forever. */
    private timeoutMs = 0,
    /** The lease this instance holds on the changes it notifies (its applier's). */
    lease: NotifyLease = { owner: leaseOwner(), ms: DEFAULT_NOTIFY_LEASE_MS },
    /** Where a failure with nobody to throw to is logged (the app's logger). */
    private logger?: Pick<Logger, 'error'>,
    /** `account`: whose changes it notifies and sweeps (its applier's). */
    options: { account?: string } = {}
  ) {
    this.#leases = new NotifyLeases(db, connection, timeoutMs, lease, options)
    this.#sweep = new OutboxSweep(db, connection, timeoutMs, this.#leases, (change, until) =>
      this.notifyBatch({ outcomes: [{ change }], notifyUntil: until })
    )
  }

  /**
   * Runs the change hook of each change, in order, and marks each one notified as soon as
   * its hook has run (its lease ends there); for callers of `applyBatchInTransaction`, after
   * their COMMIT. The leases of the changes still waiting are renewed meanwhile. A hook that
   * throws leaves its change, and the ones after it, to `renotify`. A change whose lease
   * another process took (this one stalled past it: a long transaction, a pause) is left to
   * it, and its payout's later changes let go, so they go out in order. A change whose lease
   * could not be checked (the database did not answer) is let go with its payout's later
   * changes, as if its hook threw. An outcome without a change may still announce an owner
   * attached to its payout.
   */
  async notifyBatch(
    { outcomes, notifyUntil }: NotifiedOutcomes,
    turns: ReadonlyArray<Turn | undefined> = []
  ) {
    const client = this.db.connection(this.connection)
    const payoutOf = new Map<number, string>()
    for (const { change } of outcomes)
      if (change) payoutOf.set(change.eventId, change.payout.payoutUuid)
    const ids = [...payoutOf.keys()]
    this.#leases.hold(ids, notifyUntil ? asStored(client, notifyUntil) : null)
    const left = new Set(ids)
    /** Payouts whose changes stop here: a lease taken, or one that could not be checked. */
    const stopped = new Set<string>()
    try {
      for (const [index, { change, result }] of outcomes.entries()) {
        const turn = turns[index]
        if (!change) {
          await this.#announceOwner(result, turn)
          continue
        }
        if (stopped.has(change.payout.payoutUuid)) {
          turn?.go()
          continue
        }
        const lease = await this.#leases.stillHeld(change.eventId, () =>
          [...left].filter((id) => !stopped.has(payoutOf.get(id)!))
        )
        if (lease !== 'held') {
          turn?.go()
          stopped.add(change.payout.payoutUuid)
          // Taken: another process's now. Unknown: let go below with the payout's later ones.
          if (lease === 'taken') {
            left.delete(change.eventId)
            this.#leases.lost(change.eventId)
          }
          continue
        }
        await this.#tell(change, turn)
        left.delete(change.eventId)
        // Not marked (database away): kept leased, the mark retried at each renewal. Only a
        // successor of this process (it died before the mark) runs their hook again.
        this.#leases.markSoon(change.eventId)
      }
    } finally {
      for (const turn of turns) turn?.go()
      await this.#leases.marking
      // A hook threw, or a lease was lost or not known: the changes left are let go, together,
      // for `renotify` (in id order, so a payout's changes keep theirs).
      if (left.size > 0) await this.#leases.letGo([...left]).catch(() => {})
      this.#leases.drop(ids)
    }
  }

  /**
   * The outbox sweep: runs the hook, oldest first, for applied changes that were never
   * notified because their process died between COMMIT and the hook. A change whose lease
   * expired is taken at once; one without a lease (written before leases, or let go by a
   * hook that threw) once it is `olderThanMs` old. Each is taken by a conditional UPDATE, so
   * one process fires it. A lease of another instance of this process is no different from
   * another process's. Changes this instance fired whose mark was lost are marked first.
   * Returns how many changes were notified.
   */
  renotify(options: { olderThanMs?: number; limit?: number } = {}): Promise<number> {
    return this.#sweep.renotify(options)
  }

  /** The account whose changes this outbox notifies. */
  get account(): string {
    return this.#leases.account
  }

  /** An owner given to a payout whose changes went out without one: its position now. */
  async #announceOwner(result?: ApplyResult<Payout>, turn?: Turn) {
    const listener = this.listener
    if (!result?.ownerAttached || !listener.onOwnerAttached) return turn?.go()
    const latest = await this.#latestChange(result.payout)
    await turn?.ready()
    turn?.go()
    if (latest) await tellingOrder.listening(turn?.batch, () => listener.onOwnerAttached!(latest))
  }

  /**
   * One change told to the listener, with the deposit it confirmed; a deposit that cannot be
   * read (the database away) is logged, and the change still goes out without it.
   */
  async #tell(change: PayoutChange<Payout>, turn?: Turn) {
    const listener = this.listener
    if (!listener.onChange) return turn?.go()
    const deposit = await depositConfirmedBy(change, this.connection, this.account).catch(
      (error) => {
        this.logger?.error({ err: safeError(error) }, 'payouts escrow detection not read')
        return null
      }
    )
    // Its payout's change committed before it reached the listener first (`TellingOrder`).
    await turn?.ready()
    turn?.go()
    await tellingOrder.listening(turn?.batch, () => listener.onChange!(change, deposit))
  }

  /** The payout's last applied change, as the position it holds now. */
  async #latestChange(payout: Payout): Promise<PayoutChange<Payout> | null> {
    const client = this.db.connection(this.connection)
    const last = await withStatementTimeout(
      PayoutEvent.query({ client })
        .where('account', this.account)
        .where('payout_uuid', payout.payoutUuid)
        .where('applied', true)
        .orderBy('id', 'desc'),
      this.timeoutMs
    ).first()
    if (!last) return null
    return {
      payout,
      previous: null,
      current: { status: payout.status, step: payout.step },
      source: last.source as ObservationSource,
      created: false,
      eventId: last.id,
      observedAt: last.observedAt,
    }
  }
}
