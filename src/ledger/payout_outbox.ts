import { randomBytes } from 'node:crypto'
import { hostname } from 'node:os'
import type { Logger } from '@adonisjs/core/logger'
import type { Database } from '@adonisjs/lucid/database'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { DateTime } from 'luxon'
import { dbDate } from '../database/dates.ts'
import { withDeadline } from '../time_bounds.ts'
import { dropIdleConnections, withStatementTimeout } from '../database/deadline.ts'
import { affectedRows, asStored } from '../database/dialects.ts'
import debug from '../debug.ts'
import Payout from '../models/payout.ts'
import PayoutEvent from '../models/payout_event.ts'
import type { EscrowEvent, ObservationSource } from '../types/events.ts'
import { depositConfirmedBy } from './escrow_detection.ts'
import { replayChange } from './change_replay.ts'
import type { ApplyResult, PayoutChange } from './vocabulary.ts'

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
 * A fresh name for the notification leases of one ledger (`payout_events.notify_owner`): its
 * host, its pid and a random part. Each ledger of a process takes its own, so two of them
 * (the parts `payouts.fake()` rebuilds) fence each other as two processes do.
 */
export function leaseOwner() {
  return `${hostname().slice(0, 40)}:${process.pid}:${randomBytes(4).toString('hex')}`
}

/** The lease on a change's notification: who holds it and for how long between renewals. */
export interface NotifyLease {
  owner: string
  ms: number
}

/** The default lease: 30 s, renewed every 10 s while the change's listeners run. */
export const DEFAULT_NOTIFY_LEASE_MS = 30_000

/** Ids per statement of a renewal or a mark. */
const ID_CHUNK = 500

/** The name knex gives a statement past its timeout. */
const KNEX_TIMEOUT = 'KnexTimeoutError'

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
  /**
   * Changes this instance notifies, with how many holders (a batch, a sweep, a mark to
   * retry): its sweeps leave them alone while any holds them.
   */
  #notifying = new Map<number, number>()
  /**
   * The leases this instance still needs (held, neither marked nor given up), with their
   * end as last written (null when not known): renewed every third of `lease.ms`.
   */
  #leased = new Map<number, DateTime | null>()
  /**
   * Changes whose hook ran in this process but whose mark the database lost (a stall, a
   * dropped connection): held, their lease renewed, their mark retried at each renewal
   * until it lands. Only a successor of this process (it died first) fires them again.
   */
  #unmarked = new Set<number>()
  #sweep?: Promise<number>
  #renewal?: NodeJS.Timeout
  /** A renewal under way: the next one waits for its turn rather than piling up. */
  #renewing = false
  /** Changes whose hook ended, waiting for their mark; one statement marks those queued. */
  #toMark: number[] = []
  #marking?: Promise<void>

  constructor(
    private db: Database,
    private listener: ChangeListener = {},
    private connection?: string,
    /** Bound of the sweep and of each statement outside a transaction; 0 waits forever. */
    private timeoutMs = 0,
    /** The lease this instance holds on the changes it notifies (its applier's). */
    private lease: NotifyLease = { owner: leaseOwner(), ms: DEFAULT_NOTIFY_LEASE_MS },
    /** Where a failure with nobody to throw to is logged (the app's logger). */
    private logger?: Pick<Logger, 'error'>
  ) {}

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
  async notifyBatch({ outcomes, notifyUntil }: NotifiedOutcomes) {
    const client = this.db.connection(this.connection)
    const payoutOf = new Map<number, string>()
    for (const { change } of outcomes)
      if (change) payoutOf.set(change.eventId, change.payout.payoutUuid)
    const ids = [...payoutOf.keys()]
    this.#hold(ids, notifyUntil ? asStored(client, notifyUntil) : null)
    const left = new Set(ids)
    /** Payouts whose changes stop here: a lease taken, or one that could not be checked. */
    const stopped = new Set<string>()
    try {
      for (const { change, result } of outcomes) {
        if (!change) {
          await this.#announceOwner(result)
          continue
        }
        if (stopped.has(change.payout.payoutUuid)) continue
        const waiting = [...left].filter((id) => !stopped.has(payoutOf.get(id)!))
        const lease = await this.#stillHeld(change.eventId, waiting)
        if (lease !== 'held') {
          stopped.add(change.payout.payoutUuid)
          // Taken: another process's now. Unknown: let go below with the payout's later ones.
          if (lease === 'taken') {
            left.delete(change.eventId)
            this.#leased.delete(change.eventId)
          }
          continue
        }
        await this.#tell(change)
        left.delete(change.eventId)
        // Not marked (database away): kept leased, the mark retried at each renewal. Only a
        // successor of this process (it died before the mark) runs their hook again.
        this.#markSoon(change.eventId)
      }
    } finally {
      await this.#marking
      // A hook threw, or a lease was lost or not known: the changes left are let go, together,
      // for `renotify` (in id order, so a payout's changes keep theirs).
      if (left.size > 0) await this.#letGo([...left]).catch(() => {})
      this.#drop(ids)
    }
  }

  /**
   * Whether this instance still holds the lease on a change about to fire. A lease known to
   * have two thirds or more left costs no statement: the renewal every third of the lease
   * renews it, with a third still left, before it ends. Otherwise it is renewed by a
   * conditional UPDATE (those of `waiting` together, the change alone if one of them was
   * lost): none matched, another process took it. A database that does not answer (within
   * the renewal's bound) leaves it `unknown`: not fired.
   */
  async #stillHeld(id: number, waiting: number[]): Promise<'held' | 'taken' | 'unknown'> {
    const known = this.#leased.get(id)
    if (known && known.diffNow().toMillis() >= (this.lease.ms * 2) / 3) return 'held'
    try {
      if (waiting.length > 1 && (await this.#renew(waiting)) === waiting.length) return 'held'
      return (await this.#renew([id])) === 1 ? 'held' : 'taken'
    } catch (error) {
      debug('outbox: lease check of change %d failed: %s', id, (error as Error).message)
      this.#stalled(error)
      return 'unknown'
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
    // One sweep at a time, and never one that hangs (a dead connection, a listener that
    // never ends): at its deadline it is given up, fires nothing more if it ever resumes,
    // and the next call starts a fresh one.
    if (!this.#sweep) {
      const sweep = { givenUp: false }
      this.#sweep = withDeadline(
        this.#renotify(options, sweep),
        this.timeoutMs,
        'outbox sweep',
        () => (sweep.givenUp = true)
      ).finally(() => (this.#sweep = undefined))
    }
    return this.#sweep
  }

  async #renotify(
    options: { olderThanMs?: number; limit?: number },
    sweep: { givenUp: boolean }
  ): Promise<number> {
    const client = this.db.connection(this.connection)
    const olderThanMs = options.olderThanMs ?? 10_000
    // Changes this instance fired whose mark was lost: still leased by it, so never takeable.
    await this.#markAgain([...this.#unmarked]).catch((error) => {
      debug('outbox: marking again failed: %s', (error as Error).message)
    })
    const rows = await this.#bounded(
      this.#takeable(PayoutEvent.query({ client }), client, olderThanMs)
        .orderBy('id', 'asc')
        .limit(options.limit ?? 100)
    )
    let notified = 0
    for (const row of rows) {
      if (sweep.givenUp) break
      if (this.#unmarked.has(row.id)) {
        await this.#markAgain([row.id])
        continue
      }
      if (this.#notifying.has(row.id)) continue
      // Another process may have taken it since the read: only the one UPDATE that wins goes on.
      const until = await this.#take(client, row.id, olderThanMs)
      if (!until) continue
      this.#hold([row.id], until)
      let change: PayoutChange<Payout> | null
      try {
        change = row.applied ? await this.#rebuild(row) : null
        if (!change) await this.#markNotified([row.id])
      } finally {
        this.#drop([row.id])
      }
      if (!change) continue
      // Checked again after the awaits above: a fresher sweep may have taken the row meanwhile.
      if (sweep.givenUp) break
      if (this.#notifying.has(row.id)) continue
      await this.notifyBatch({ outcomes: [{ change }], notifyUntil: until })
      notified++
    }
    return notified
  }

  /**
   * Un-notified changes another process may fire now: a lease that expired; or past
   * `olderThanMs`, no lease at all (a writer from before leases, a change let go).
   */
  #takeable<Query>(query: Query, client: QueryClientContract, olderThanMs: number): Query {
    const now = DateTime.utc()
    const before = dbDate(client, now.minus({ milliseconds: olderThanMs }))
    return (query as any).whereNull('notified_at').where((due: any) => {
      due
        .where((expired: any) =>
          expired.whereNotNull('notify_until').where('notify_until', '<', dbDate(client, now))
        )
        .orWhere((old: any) => old.where('created_at', '<=', before).whereNull('notify_until'))
    })
  }

  /**
   * Takes the lease on one change if it is still takeable: its end when this process won it,
   * null when another one did.
   */
  async #take(client: QueryClientContract, id: number, olderThanMs: number) {
    const until = DateTime.utc().plus({ milliseconds: this.lease.ms })
    const updated = await this.#bounded(
      this.#takeable(client.from(PayoutEvent.table).where('id', id), client, olderThanMs)
    ).update({ notify_owner: this.lease.owner, notify_until: dbDate(client, until) })
    return affectedRows(updated) === 1 ? asStored(client, until) : null
  }

  /**
   * Changes this instance notifies from now (`until`: their lease's end, if known): left
   * alone by its sweeps while held, their leases renewed.
   */
  #hold(ids: number[], until: DateTime | null = null) {
    for (const id of ids) {
      this.#notifying.set(id, (this.#notifying.get(id) ?? 0) + 1)
      const known = this.#leased.get(id)
      if (!known || (until && until > known)) this.#leased.set(id, until ?? known ?? null)
    }
    if (this.#renewal || this.#notifying.size === 0) return
    this.#renewal = setInterval(
      () => void this.#renewLeases(),
      Math.max(1, Math.floor(this.lease.ms / 3))
    )
    this.#renewal.unref()
  }

  /** A holder is done with these changes; the renewal stops with the last one. */
  #drop(ids: number[]) {
    for (const id of ids) {
      const holders = (this.#notifying.get(id) ?? 0) - 1
      if (holders > 0) {
        this.#notifying.set(id, holders)
        continue
      }
      this.#notifying.delete(id)
      this.#leased.delete(id)
    }
    if (this.#notifying.size > 0 || !this.#renewal) return
    clearInterval(this.#renewal)
    this.#renewal = undefined
  }

  /**
   * Every third of the lease: extends the leases still needed, then marks the changes whose
   * mark was lost (and lets them go). One at a time, each statement bounded to a sixth of the
   * lease (`#leaseBoundMs`), so one stuck on a dead connection fails in time for the next
   * renewal to run on a fresh one; a failure is only logged (past the lease another process
   * may take the change, as from a process that stalled).
   */
  async #renewLeases() {
    const name = this.connection ?? this.db.primaryConnectionName
    // The app closed its database (terminating): nothing to renew, and no pool to reopen.
    if (this.#renewing || !this.db.manager.isConnected(name)) return
    this.#renewing = true
    try {
      await this.#renew([...this.#leased.keys()]).catch((error) => {
        debug('outbox: lease renewal failed: %s', (error as Error).message)
        this.#stalled(error)
      })
      await this.#markAgain([...this.#unmarked]).catch((error) => {
        debug('outbox: marking again failed: %s', (error as Error).message)
        this.#stalled(error)
      })
    } finally {
      this.#renewing = false
    }
  }

  /** Marks changes whose mark was lost, chunk by chunk, letting go of each chunk marked. */
  async #markAgain(ids: number[]) {
    for (let start = 0; start < ids.length; start += ID_CHUNK) {
      const chunk = ids.slice(start, start + ID_CHUNK)
      await this.#markNotified(chunk, this.#leaseBoundMs)
      // A sweep and a renewal may both have marked one: it is let go once.
      const marked = chunk.filter((id) => this.#unmarked.delete(id))
      for (const id of marked) this.#leased.delete(id)
      this.#drop(marked)
    }
  }

  /**
   * The bound of a lease statement (a renewal, a lease check, a mark retried at a renewal):
   * a sixth of the lease, well under the third between renewals, or the outbox's own bound
   * if shorter.
   */
  get #leaseBoundMs() {
    const bound = Math.max(1, Math.floor(this.lease.ms / 6))
    return this.timeoutMs > 0 ? Math.min(this.timeoutMs, bound) : bound
  }

  /**
   * A lease statement that timed out: the pool's idle connections most likely share its
   * connection's fate (see `dropIdleConnections`), so the next renewal opens a fresh one.
   */
  #stalled(error: unknown) {
    if ((error as Error)?.name !== KNEX_TIMEOUT) return
    dropIdleConnections(this.db.connection(this.connection), error as Error)
  }

  /**
   * Extends this process's leases on changes not marked yet, by conditional UPDATEs; the
   * ends of a chunk whose every lease matched are known from then. Returns how many matched.
   */
  async #renew(ids: number[]) {
    const client = this.db.connection(this.connection)
    let matched = 0
    for (let start = 0; start < ids.length; start += ID_CHUNK) {
      const chunk = ids.slice(start, start + ID_CHUNK)
      const until = DateTime.utc().plus({ milliseconds: this.lease.ms })
      const updated = await this.#bounded(
        client
          .from(PayoutEvent.table)
          .whereIn('id', chunk)
          .where('notify_owner', this.lease.owner)
          .whereNull('notified_at'),
        this.#leaseBoundMs
      ).update({ notify_until: dbDate(client, until) })
      matched += affectedRows(updated)
      if (affectedRows(updated) !== chunk.length) continue
      for (const id of chunk)
        if (this.#leased.has(id)) this.#leased.set(id, asStored(client, until))
    }
    return matched
  }

  /** Ends this process's lease on changes it will not fire (a hook threw, a lease was lost). */
  async #letGo(ids: number[]) {
    for (const id of ids) this.#leased.delete(id)
    const client = this.db.connection(this.connection)
    await this.#bounded(
      client
        .from(PayoutEvent.table)
        .whereIn('id', ids)
        .where('notify_owner', this.lease.owner)
        .whereNull('notified_at')
    ).update({ notify_owner: null, notify_until: null })
  }

  /** Queues a change's mark: one statement marks every change whose hook ended meanwhile. */
  #markSoon(id: number) {
    this.#toMark.push(id)
    this.#marking ??= this.#flushMarks()
  }

  async #flushMarks() {
    while (this.#toMark.length > 0) {
      const ids = this.#toMark.splice(0)
      try {
        await this.#markNotified(ids)
        for (const id of ids) this.#leased.delete(id)
      } catch (error) {
        // Held on and still leased: the renewal retries the mark until it lands.
        debug('outbox: marking %d changes failed: %s', ids.length, (error as Error).message)
        for (const id of ids) {
          if (this.#unmarked.has(id)) continue
          this.#unmarked.add(id)
          this.#hold([id])
        }
      }
    }
    this.#marking = undefined
  }

  /** An owner given to a payout whose changes went out without one: its position now. */
  async #announceOwner(result?: ApplyResult<Payout>) {
    if (!result?.ownerAttached || !this.listener.onOwnerAttached) return
    const latest = await this.#latestChange(result.payout)
    if (latest) await this.listener.onOwnerAttached(latest)
  }

  /**
   * One change told to the listener, with the deposit it confirmed; a deposit that cannot be
   * read (the database away) is logged, and the change still goes out without it.
   */
  async #tell(change: PayoutChange<Payout>) {
    if (!this.listener.onChange) return
    const deposit = await depositConfirmedBy(change, this.connection).catch((error) => {
      this.logger?.error({ err: error }, 'payouts escrow detection not read')
      return null
    })
    await this.listener.onChange(change, deposit)
  }

  /** The payout's last applied change, as the position it holds now. */
  async #latestChange(payout: Payout): Promise<PayoutChange<Payout> | null> {
    const client = this.db.connection(this.connection)
    const last = await this.#bounded(
      PayoutEvent.query({ client })
        .where('payout_uuid', payout.payoutUuid)
        .where('applied', true)
        .orderBy('id', 'desc')
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

  /** The change a payout_events row applied, replayed from the payout's own rows up to it. */
  async #rebuild(row: PayoutEvent): Promise<PayoutChange<Payout> | null> {
    const client = this.db.connection(this.connection)
    const found = await this.#bounded(
      Payout.query({ client }).where('payout_uuid', row.payoutUuid)
    ).first()
    if (!found) return null
    // Its own rows only: a merged placeholder's rows moved the placeholder, not this row.
    const history = await this.#bounded(
      PayoutEvent.query({ client })
        .where('payout_uuid', row.payoutUuid)
        .where('id', '<=', row.id)
        .where((own) =>
          row.mergedFrom ? own.where('merged_from', row.mergedFrom) : own.whereNull('merged_from')
        )
        .orderBy('id', 'asc')
    )
    return replayChange(found, history, row)
  }

  /** Marks changes notified, `ID_CHUNK` ids per statement, each bounded by `ms`. */
  async #markNotified(ids: number[], ms = this.timeoutMs) {
    const client = this.db.connection(this.connection)
    for (let start = 0; start < ids.length; start += ID_CHUNK) {
      await this.#bounded(
        client
          .from(PayoutEvent.table)
          .whereIn('id', ids.slice(start, start + ID_CHUNK))
          .update({ notified_at: dbDate(client, DateTime.utc()), notify_until: null }),
        ms
      )
    }
  }

  /** A statement outside a bounded transaction, under the same bound (or `ms`). */
  #bounded<Query extends { timeout(ms: number): Query }>(query: Query, ms = this.timeoutMs): Query {
    return withStatementTimeout(query, ms)
  }
}
