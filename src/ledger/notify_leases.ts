import { randomBytes } from 'node:crypto'
import { hostname } from 'node:os'
import type { Database } from '@adonisjs/lucid/database'
import { DateTime } from 'luxon'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import { dbDate } from '../database/dates.ts'
import { dropIdleConnections, withStatementTimeout } from '../database/deadline.ts'
import { affectedRows, asStored } from '../database/dialects.ts'
import debug from '../debug.ts'
import PayoutEvent from '../models/payout_event.ts'
import { safeError } from '../safe_error.ts'

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
 * The leases one outbox holds on the changes it notifies (see `PayoutOutbox`): which changes
 * it holds and until when, their renewal every third of `lease.ms` while any is held, and the
 * marks that end them, queued so one statement marks the changes whose hook ended meanwhile,
 * and retried at each renewal while the database loses them.
 */
export class NotifyLeases {
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
  #renewal?: NodeJS.Timeout
  /** A renewal under way: the next one waits for its turn rather than piling up. */
  #renewing = false
  /** Changes whose hook ended, waiting for their mark; one statement marks those queued. */
  #toMark: number[] = []
  #marking?: Promise<void>

  /** The account whose changes these are: each statement touches its rows only. */
  readonly account: string

  constructor(
    private db: Database,
    private connection: string | undefined,
    /** Bound of each statement outside a transaction; 0 waits forever. */
    private timeoutMs: number,
    /** The lease this instance holds on the changes it notifies (its applier's). */
    readonly lease: NotifyLease,
    options: { account?: string } = {}
  ) {
    this.account = options.account ?? DEFAULT_ACCOUNT
  }

  /** The account's log rows, on the outbox's connection. */
  #events() {
    return this.db
      .connection(this.connection)
      .from(PayoutEvent.table)
      .where('account', this.account)
  }

  /** Whether this instance notifies the change now: its sweeps leave it alone. */
  holds(id: number) {
    return this.#notifying.has(id)
  }

  /** Whether the change's hook ran here but its mark was lost (see `markAgain`). */
  isUnmarked(id: number) {
    return this.#unmarked.has(id)
  }

  /** The marks under way, if any: settled once every change queued so far was marked. */
  get marking(): Promise<void> | undefined {
    return this.#marking
  }

  /**
   * Whether this instance still holds the lease on a change about to fire. A lease known to
   * have two thirds or more left costs no statement: the renewal every third of the lease
   * renews it, with a third still left, before it ends. Otherwise it is renewed by a
   * conditional UPDATE (the changes `waitingOnes` lists together, the change alone if one was
   * lost): none matched, another process took it. A database that does not answer (within
   * the renewal's bound) leaves it `unknown`: not fired.
   */
  async stillHeld(id: number, waitingOnes: () => number[]): Promise<'held' | 'taken' | 'unknown'> {
    const known = this.#leased.get(id)
    if (known && known.toMillis() - Date.now() >= (this.lease.ms * 2) / 3) return 'held'
    try {
      // Listed only when a renewal is due: once per change, a batch's list was quadratic.
      const waiting = waitingOnes()
      if (waiting.length > 1 && (await this.#renew(waiting)) === waiting.length) return 'held'
      return (await this.#renew([id])) === 1 ? 'held' : 'taken'
    } catch (error) {
      debug('outbox: lease check of change %d failed: %s', id, safeError(error).message)
      this.#stalled(error)
      return 'unknown'
    }
  }

  /**
   * Changes this instance notifies from now (`until`: their lease's end, if known): left
   * alone by its sweeps while held, their leases renewed.
   */
  hold(ids: number[], until: DateTime | null = null) {
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
  drop(ids: number[]) {
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

  /** A lease another process took: no longer this instance's to renew. */
  lost(id: number) {
    this.#leased.delete(id)
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
        debug('outbox: lease renewal failed: %s', safeError(error).message)
        this.#stalled(error)
      })
      await this.markAgain().catch((error) => {
        debug('outbox: marking again failed: %s', safeError(error).message)
        this.#stalled(error)
      })
    } finally {
      this.#renewing = false
    }
  }

  /**
   * Marks changes whose mark was lost (all of them by default), chunk by chunk, letting go of
   * each chunk marked.
   */
  async markAgain(ids: number[] = [...this.#unmarked]) {
    for (let start = 0; start < ids.length; start += ID_CHUNK) {
      const chunk = ids.slice(start, start + ID_CHUNK)
      await this.markNotified(chunk, this.#leaseBoundMs)
      // A sweep and a renewal may both have marked one: it is let go once.
      const marked = chunk.filter((id) => this.#unmarked.delete(id))
      for (const id of marked) this.#leased.delete(id)
      this.drop(marked)
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
      const updated = await withStatementTimeout(
        this.#events()
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
  async letGo(ids: number[]) {
    for (const id of ids) this.#leased.delete(id)
    await withStatementTimeout(
      this.#events()
        .whereIn('id', ids)
        .where('notify_owner', this.lease.owner)
        .whereNull('notified_at'),
      this.timeoutMs
    ).update({ notify_owner: null, notify_until: null })
  }

  /**
   * Queues a change's mark: one statement marks every change whose hook ended meanwhile. The
   * first waits for the end of this turn of the event loop, so the changes of a batch whose
   * hooks end in it (synchronous listeners, a broadcast) share one statement: on SQLite each
   * mark is a commit of its own, and marking as each hook ended took one commit for every
   * second change (336 for 600). A hook that awaits I/O ends the turn, so a mark waits at
   * most for the hooks that end in the same turn as its own.
   */
  markSoon(id: number) {
    this.#toMark.push(id)
    this.#marking ??= this.#flushMarks()
  }

  async #flushMarks() {
    await new Promise<void>((resolve) => setImmediate(resolve))
    while (this.#toMark.length > 0) {
      const ids = this.#toMark.splice(0)
      try {
        await this.markNotified(ids)
        for (const id of ids) this.#leased.delete(id)
      } catch (error) {
        // Held on and still leased: the renewal retries the mark until it lands.
        debug('outbox: marking %d changes failed: %s', ids.length, safeError(error).message)
        for (const id of ids) {
          if (this.#unmarked.has(id)) continue
          this.#unmarked.add(id)
          this.hold([id])
        }
      }
    }
    this.#marking = undefined
  }

  /** Marks changes notified, `ID_CHUNK` ids per statement, each bounded by `ms`. */
  async markNotified(ids: number[], ms = this.timeoutMs) {
    const client = this.db.connection(this.connection)
    for (let start = 0; start < ids.length; start += ID_CHUNK) {
      await withStatementTimeout(
        this.#events()
          .whereIn('id', ids.slice(start, start + ID_CHUNK))
          .update({ notified_at: dbDate(client, DateTime.utc()), notify_until: null }),
        ms
      )
    }
  }
}
