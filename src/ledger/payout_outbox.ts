import type { Database } from '@adonisjs/lucid/database'
import { DateTime } from 'luxon'
import { dbDate } from '../database/dates.ts'
import { withDeadline, withStatementTimeout } from '../database/deadline.ts'
import Payout from '../models/payout.ts'
import PayoutEvent from '../models/payout_event.ts'
import type { ObservationSource } from '../types/events.ts'
import { snapshotOf } from './payout_rows.ts'
import { reduce, type PayoutPosition } from './state_machine.ts'
import type { ApplyResult, PayoutChange } from './vocabulary.ts'

/** The hooks the outbox runs after COMMIT. */
export interface OutboxHooks {
  /** Runs after COMMIT, once per real change; never for duplicates or stale events. */
  onChange?: (change: PayoutChange<Payout>) => void | Promise<void>
  /**
   * Runs after COMMIT when an observation that changes nothing gives the payout its owner
   * (the service's payout.created can arrive before the execute response): the owner's
   * listeners have not heard of the payout yet.
   */
  onOwnerAttached?: (change: PayoutChange<Payout>) => void | Promise<void>
}

/** What the outbox notifies: outcomes of applied observations, with or without a change. */
export interface NotifiedOutcomes {
  outcomes: Array<{ change: PayoutChange<Payout> | null; result?: ApplyResult<Payout> }>
}

/**
 * The payout_events log read as an outbox: an applied change stays un-notified
 * (`notified_at` null) until its hook has run, so a change whose process died between
 * COMMIT and the hook is notified by `renotify` later, with the same eventId.
 */
export class PayoutOutbox {
  /** Changes whose hook is running in this process (renotify leaves them alone). */
  #notifying = new Set<number>()
  /**
   * Changes whose hook ran in this process but whose mark the database lost (a stall, a
   * dropped connection): renotify marks them without running the hook again.
   */
  #unmarked = new Set<number>()
  #sweep?: Promise<number>

  constructor(
    private db: Database,
    private hooks: OutboxHooks = {},
    private connection?: string,
    /** Bound of the sweep and of each statement outside a transaction; 0 waits forever. */
    private timeoutMs = 0
  ) {}

  /**
   * Runs the change hook of each change, in order, then marks them notified with one
   * statement; for callers of `applyBatchInTransaction`, after their COMMIT. A hook that
   * throws leaves its change to `renotify`. An outcome without a change may still announce
   * an owner attached to its payout.
   */
  async notifyBatch({ outcomes }: NotifiedOutcomes) {
    const ids = outcomes.flatMap(({ change }) => (change ? [change.eventId] : []))
    for (const id of ids) this.#notifying.add(id)
    const notified: number[] = []
    try {
      for (const { change, result } of outcomes) {
        if (!change) {
          await this.#announceOwner(result)
          continue
        }
        if (this.hooks.onChange) await this.hooks.onChange(change)
        notified.push(change.eventId)
      }
    } finally {
      // Not marked (database away): renotify marks them later. Only a successor of this
      // process (it died before the mark) runs their hook again, with their eventId.
      await this.#markNotified(notified).catch(() => {
        for (const id of notified) this.#unmarked.add(id)
      })
      for (const id of ids) this.#notifying.delete(id)
    }
  }

  /**
   * The outbox sweep: runs the hook, oldest first, for applied changes that were never
   * notified because their process died between COMMIT and the hook. Rows younger than
   * `olderThanMs` are left to the live process that wrote them (another instance may still
   * be notifying them). Returns how many changes were notified.
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
    const before = DateTime.now().minus({ milliseconds: options.olderThanMs ?? 10_000 })
    const rows = await this.#bounded(
      PayoutEvent.query({ client })
        .whereNull('notified_at')
        .where('created_at', '<=', dbDate(client, before))
        .orderBy('id', 'asc')
        .limit(options.limit ?? 100)
    )
    let notified = 0
    for (const row of rows) {
      if (sweep.givenUp) break
      if (this.#notifying.has(row.id)) continue
      if (this.#unmarked.has(row.id)) {
        await this.#markNotified([row.id])
        this.#unmarked.delete(row.id)
        continue
      }
      const change = row.applied ? await this.#rebuild(row) : null
      if (!change) {
        await this.#markNotified([row.id])
        continue
      }
      // Checked again after the awaits above: a fresher sweep may have taken the row meanwhile.
      if (sweep.givenUp) break
      if (this.#notifying.has(row.id)) continue
      await this.notifyBatch({ outcomes: [{ change }] })
      notified++
    }
    return notified
  }

  /** An owner given to a payout whose changes went out without one: its position now. */
  async #announceOwner(result?: ApplyResult<Payout>) {
    if (!result?.ownerAttached || !this.hooks.onOwnerAttached) return
    const latest = await this.#latestChange(result.payout)
    if (latest) await this.hooks.onOwnerAttached(latest)
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

  /** The change a payout_events row applied, replayed from the payout's log up to it. */
  async #rebuild(row: PayoutEvent): Promise<PayoutChange<Payout> | null> {
    const client = this.db.connection(this.connection)
    const found = await this.#bounded(
      Payout.query({ client }).where('payout_uuid', row.payoutUuid)
    ).first()
    if (!found) return null
    // A change of a placeholder since merged goes out as it would have before the merge:
    // with the read id as its payoutId, and without the UUID's owner.
    const payout = row.mergedFrom ? snapshotOf(found) : found
    if (row.mergedFrom) Object.assign(payout, { payoutUuid: row.mergedFrom, ownerId: null })
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
    // Positions as applying saw them: null until a first observation reached the row,
    // then moved by the applied rows only.
    let position: PayoutPosition | null = null
    for (const event of history) {
      const previous: PayoutPosition | null = position
      const current: PayoutPosition = event.applied
        ? reduce(previous, { status: event.status, step: event.step }).next
        : (previous ?? { status: 'pending', step: null })
      position = current
      if (event.id !== row.id) continue
      return {
        payout,
        previous,
        current,
        source: row.source as ObservationSource,
        created: previous === null,
        eventId: row.id,
        observedAt: row.observedAt,
      }
    }
    return null
  }

  async #markNotified(ids: number[]) {
    if (ids.length === 0) return
    const client = this.db.connection(this.connection)
    await this.#bounded(
      client
        .from(PayoutEvent.table)
        .whereIn('id', ids)
        .update({ notified_at: dbDate(client) })
    )
  }

  /** A statement outside a bounded transaction, under the same bound. */
  #bounded<Query extends { timeout(ms: number): Query }>(query: Query): Query {
    return withStatementTimeout(query, this.timeoutMs)
  }
}
