import type { Database } from '@adonisjs/lucid/database'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { DateTime } from 'luxon'
import { dbDate } from '../database/dates.ts'
import { withDeadline } from '../time_bounds.ts'
import { withStatementTimeout } from '../database/deadline.ts'
import { affectedRows, asStored } from '../database/dialects.ts'
import debug from '../debug.ts'
import Payout from '../models/payout.ts'
import PayoutEvent from '../models/payout_event.ts'
import { replayChange } from './change_replay.ts'
import type { NotifyLeases } from './notify_leases.ts'
import type { PayoutChange } from './vocabulary.ts'
import { safeError } from '../safe_error.ts'

/**
 * The outbox sweep (`PayoutOutbox.renotify`): takes the changes a dead process left
 * un-notified, each by a conditional UPDATE under the outbox's lease, rebuilds each one from
 * the log and hands it to `notify`.
 */
export class OutboxSweep {
  #sweep?: Promise<number>

  constructor(
    private db: Database,
    private connection: string | undefined,
    /** Bound of the sweep and of each of its statements; 0 waits forever. */
    private timeoutMs: number,
    /** The outbox's leases: the changes it holds, and the marks it lost. */
    private leases: NotifyLeases,
    /** Notifies one change the sweep took, under its lease that ends at `until`. */
    private notify: (change: PayoutChange<Payout>, until: DateTime) => Promise<void>
  ) {}

  /** The account whose changes it takes (its leases'): another account's are never read. */
  get #account() {
    return this.leases.account
  }

  /** One sweep (see `PayoutOutbox.renotify`): how many changes it notified. */
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
    await this.leases.markAgain().catch((error) => {
      debug('outbox: marking again failed: %s', safeError(error).message)
    })
    const rows = await withStatementTimeout(
      this.#takeable(PayoutEvent.query({ client }), client, olderThanMs)
        .orderBy('id', 'asc')
        .limit(options.limit ?? 100),
      this.timeoutMs
    )
    let notified = 0
    for (const row of rows) {
      if (sweep.givenUp) break
      if (this.leases.isUnmarked(row.id)) {
        await this.leases.markAgain([row.id])
        continue
      }
      if (this.leases.holds(row.id)) continue
      // Another process may have taken it since the read: only the one UPDATE that wins goes on.
      const until = await this.#take(client, row.id, olderThanMs)
      if (!until) continue
      this.leases.hold([row.id], until)
      let change: PayoutChange<Payout> | null
      try {
        change = row.applied ? await this.#rebuild(row) : null
        if (!change) await this.leases.markNotified([row.id])
      } finally {
        this.leases.drop([row.id])
      }
      if (!change) continue
      // Checked again after the awaits above: a fresher sweep may have taken the row meanwhile.
      if (sweep.givenUp) break
      if (this.leases.holds(row.id)) continue
      await this.notify(change, until)
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
    return (query as any)
      .where('account', this.#account)
      .whereNull('notified_at')
      .where((due: any) => {
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
    const { lease } = this.leases
    const until = DateTime.utc().plus({ milliseconds: lease.ms })
    const updated = await withStatementTimeout(
      this.#takeable(client.from(PayoutEvent.table).where('id', id), client, olderThanMs),
      this.timeoutMs
    ).update({ notify_owner: lease.owner, notify_until: dbDate(client, until) })
    return affectedRows(updated) === 1 ? asStored(client, until) : null
  }

  /** The change a payout_events row applied, replayed from the payout's own rows up to it. */
  async #rebuild(row: PayoutEvent): Promise<PayoutChange<Payout> | null> {
    const client = this.db.connection(this.connection)
    const found = await withStatementTimeout(
      Payout.query({ client }).where('account', this.#account).where('payout_uuid', row.payoutUuid),
      this.timeoutMs
    ).first()
    if (!found) return null
    // Its own rows only: a merged placeholder's rows moved the placeholder, not this row.
    const history = await withStatementTimeout(
      PayoutEvent.query({ client })
        .where('account', this.#account)
        .where('payout_uuid', row.payoutUuid)
        .where('id', '<=', row.id)
        .where((own) =>
          row.mergedFrom ? own.where('merged_from', row.mergedFrom) : own.whereNull('merged_from')
        )
        .orderBy('id', 'asc'),
      this.timeoutMs
    )
    return replayChange(found, history, row)
  }
}
