import type { Database } from '@adonisjs/lucid/database'
import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { DateTime } from 'luxon'
import { dbDate } from '../database/dates.ts'
import { boundedTransaction, withDeadline, withStatementTimeout } from '../database/deadline.ts'
import { locksRows, RETURNING_DIALECTS } from '../database/dialects.ts'
import Payout from '../models/payout.ts'
import PayoutEvent from '../models/payout_event.ts'
import type { EscrowEvent, ObservationSource, PayoutChangedEvent } from '../types/events.ts'
import type { PayoutStatus, PayoutStep } from '../schemas/common.ts'
import {
  reduce,
  type PayoutPosition,
  type ReduceReason,
  type ReduceResult,
} from './state_machine.ts'

/** Descriptive fields an observation may carry; they fill gaps, they never move state. */
export interface PayoutFields {
  ownerId?: string | null
  flow?: string | null
  transactionType?: string | null
  quoteId?: string | null
  sourceAmount?: number | string | null
  sourceCurrency?: string | null
  payoutAmount?: number | string | null
  payoutCurrency?: string | null
  toAmount?: number | string | null
  fees?: Record<string, unknown> | null
  partnerFxRate?: number | string | null
  effectiveRate?: number | string | null
  recipientId?: string | null
  recipientPaymentMethodId?: string | null
  paymentMethod?: string | null
  paymentPurpose?: string | null
  reference?: string | null
  providerMetadata?: Record<string, unknown> | null
  instructions?: Record<string, unknown> | null
}

/** One sighting of a payout, from any source. */
export interface PayoutObservation {
  /** The execute UUID, or a prefixed read id when that is all the source gives. */
  payoutId: string
  readId?: string | null
  status?: string | null
  step?: string | null
  completedAt?: string | null
  source: ObservationSource
  eventType?: string
  deliveryId?: string
  observedAt?: DateTime
  fields?: PayoutFields
}

/** A committed change of a payout's position. */
export interface PayoutChange {
  payout: Payout
  previous: { status: PayoutStatus; step: PayoutStep | null } | null
  current: { status: PayoutStatus; step: PayoutStep | null }
  source: ObservationSource
  created: boolean
  /** The payout_events row that records the change (the outbox entry). */
  eventId: number
  observedAt: DateTime
  /**
   * The escrow deposit this change showed detected (set by the `inTransaction` hook); null
   * when the hook found none; absent when not known (a change rebuilt after a crash).
   */
  escrowConfirmed?: EscrowEvent | null
}

export interface ApplyResult {
  payout: Payout
  changed: boolean
  reason: ReduceReason
  /** This observation gave an owner to a payout whose earlier changes went out without one. */
  ownerAttached: boolean
}

export interface LedgerHooks {
  /** Runs after COMMIT, once per real change; never for duplicates or stale events. */
  onChange?: (change: PayoutChange) => void | Promise<void>
  /**
   * Runs after COMMIT when an observation that changes nothing gives the payout its owner
   * (the service's payout.created can arrive before the execute response): the owner's
   * listeners have not heard of the payout yet.
   */
  onOwnerAttached?: (change: PayoutChange) => void | Promise<void>
  /**
   * Runs inside the applying transaction once its changes are logged (their eventIds
   * known), before COMMIT: for mirrors that move with the payout (escrow deposits).
   */
  inTransaction?: (trx: TransactionClientContract, changes: PayoutChange[]) => Promise<void>
}

/**
 * Every descriptive field, as a merged placeholder hands its own on. A record, so a field
 * added to PayoutFields and not here fails to compile.
 */
const FIELD_KEYS = Object.keys({
  ownerId: true,
  flow: true,
  transactionType: true,
  quoteId: true,
  sourceAmount: true,
  sourceCurrency: true,
  payoutAmount: true,
  payoutCurrency: true,
  toAmount: true,
  fees: true,
  partnerFxRate: true,
  effectiveRate: true,
  recipientId: true,
  recipientPaymentMethodId: true,
  paymentMethod: true,
  paymentPurpose: true,
  reference: true,
  providerMetadata: true,
  instructions: true,
} satisfies Record<keyof PayoutFields, true>) as Array<keyof PayoutFields>

const DECIMAL_FIELDS = new Set([
  'sourceAmount',
  'payoutAmount',
  'toAmount',
  'partnerFxRate',
  'effectiveRate',
])
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/**
 * A payout's two ids as a read gave them: the execute UUID (when any id is one, the local
 * one first) to apply on, and the prefixed read id beside it.
 */
export function readIds(
  local: string,
  remote: { id: string; payoutId?: string }
): { payoutId: string; readId: string | null } {
  const payoutId = [local, remote.payoutId, remote.id].find((id) => id && UUID.test(id)) ?? local
  const readId = [remote.id, local].find((id) => id !== payoutId && !UUID.test(id)) ?? null
  return { payoutId, readId }
}

function toDecimalString(value: number | string): string {
  return typeof value === 'number' ? String(value) : value
}

/** What one observation did to a payout row (before anything is written). */
interface Advance {
  previous: PayoutPosition | null
  outcome: ReduceResult
  ownerAttached: boolean
}

/** A detached copy of a payout's attributes as they are now (never saved). */
function snapshotOf(row: Payout): Payout {
  const copy = new Payout()
  Object.assign(copy.$attributes, row.$attributes)
  copy.$isPersisted = true
  copy.$hydrateOriginals()
  return copy
}

/** A payout_events row for a raw multi-row INSERT (the model's columns, in SQL form). */
function toEventColumns(
  client: TransactionClientContract,
  entry: ReturnType<typeof logEntry>
): Record<string, unknown> {
  return {
    payout_uuid: entry.payoutUuid,
    source: entry.source,
    event_type: entry.eventType,
    status: entry.status,
    step: entry.step,
    applied: entry.applied,
    reason: entry.reason,
    delivery_id: entry.deliveryId,
    observed_at: dbDate(client, entry.observedAt),
    notified_at: entry.notifiedAt ? dbDate(client, entry.notifiedAt) : null,
    created_at: dbDate(client),
  }
}

/** The payout_events entry of one observation, applied or not (and why). */
function logEntry(
  row: Payout,
  observation: PayoutObservation,
  { outcome }: Advance,
  observedAt: DateTime
) {
  return {
    payoutUuid: row.payoutUuid,
    source: observation.source,
    eventType: observation.eventType ?? null,
    status: observation.status ?? null,
    step: observation.step ?? null,
    applied: outcome.changed,
    reason: outcome.reason,
    deliveryId: observation.deliveryId ?? null,
    observedAt,
    // Only a real change has events to fire.
    notifiedAt: outcome.changed ? null : DateTime.now(),
  }
}

/** Projects a change onto the public event payload (no instructions, no secrets). */
export function toChangedEvent(change: PayoutChange): PayoutChangedEvent {
  const p = change.payout
  return {
    eventId: String(change.eventId),
    payoutId: p.payoutUuid,
    readId: p.readId,
    ownerId: p.ownerId,
    flow: p.flow,
    status: change.current.status,
    step: change.current.step,
    previousStatus: change.previous?.status ?? null,
    previousStep: change.previous?.step ?? null,
    source: change.source,
    payoutAmount: p.payoutAmount,
    payoutCurrency: p.payoutCurrency,
    completedAt: change.current.status === 'completed' ? (p.completedAt?.toISO() ?? null) : null,
    changedAt: change.observedAt.toISO()!,
  }
}

/** A batch applied in a transaction: changes in apply order, results in input order. */
export interface AppliedBatch {
  outcomes: Array<{ result: ApplyResult; change: PayoutChange | null }>
  results: ApplyResult[]
}

/**
 * The one place payout state changes. Every observation runs in a transaction that locks
 * the row (PostgreSQL, MySQL) or holds SQLite's single writer, goes through the reducer,
 * is logged in payout_events whatever the outcome, and notifies after COMMIT. The log is
 * also the outbox: an applied change stays un-notified until its hook has run, so a change
 * whose process died between COMMIT and the hook is notified by `renotify` later.
 */
export class PayoutLedger {
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
    private hooks: LedgerHooks = {},
    private connection?: string,
    /** Bound of `applyBatch`'s transaction (see `boundedTransaction`); 0 waits forever. */
    private transactionTimeoutMs = 0
  ) {}

  async apply(observation: PayoutObservation): Promise<ApplyResult> {
    const [result] = await this.applyBatch([observation])
    return result
  }

  /**
   * Applies several observations in one transaction: one commit for a batch of inbox rows
   * instead of one per row. Payouts are locked in id order (observations of one payout keep
   * their order), so two instances applying batches never wait on each other in a cycle.
   * If any observation fails, nothing is applied and this throws; the caller then applies
   * them one by one, each with its own retries. Changes are notified after COMMIT.
   */
  async applyBatch(observations: PayoutObservation[]): Promise<ApplyResult[]> {
    if (observations.length === 0) return []
    const batch = await boundedTransaction(
      this.db.connection(this.connection),
      this.transactionTimeoutMs,
      'ledger transaction',
      (trx) => this.applyBatchInTransaction(trx, observations)
    )
    await this.notifyBatch(batch)
    return batch.results
  }

  /**
   * `applyBatch` inside a caller's transaction (the inbox marks its rows processed in the
   * same one). The caller must call `notifyBatch` after its COMMIT.
   */
  async applyBatchInTransaction(
    trx: TransactionClientContract,
    observations: PayoutObservation[]
  ): Promise<AppliedBatch> {
    const linked = await this.#linkPlaceholders(trx, observations)
    // A merged placeholder's position goes first: its payout's own observations follow it.
    const all = [...linked.folds, ...linked.observations]
    const order = all
      .map((_, index) => index)
      .sort((a, b) => {
        const x = all[a].payoutId
        const y = all[b].payoutId
        return x < y ? -1 : x > y ? 1 : a - b
      })
    const outcomes: AppliedBatch['outcomes'] = []
    if (all.length > 1 && RETURNING_DIALECTS.has(trx.dialect.name)) {
      outcomes.push(
        ...(await this.#applySetInTransaction(
          trx,
          order.map((i) => all[i])
        ))
      )
    } else {
      for (const index of order) outcomes.push(await this.#applyOne(trx, all[index]))
    }
    const results: ApplyResult[] = []
    order.forEach((index, position) => {
      if (index >= linked.folds.length)
        results[index - linked.folds.length] = outcomes[position].result
    })
    return { outcomes, results }
  }

  /**
   * A payout first seen by its read id alone has a placeholder row keyed by that read id.
   * The first observation carrying both ids merges it into the UUID's row (created if the
   * UUID has none yet): the placeholder's log moves over as a line of its own (marked
   * `merged_from`, so a change of it is still told under the read id), the placeholder
   * goes, and its position comes back as a fold, an observation applied first, so the
   * UUID's listeners hear what only the read id's had heard. A read id the service gives
   * to two UUIDs is not filled in (the observation still applies). Costs nothing when no
   * observation carries a read id.
   */
  async #linkPlaceholders(
    trx: TransactionClientContract,
    observations: PayoutObservation[]
  ): Promise<{ folds: PayoutObservation[]; observations: PayoutObservation[] }> {
    const links = new Map<string, string>()
    for (const o of observations) {
      if (o.readId && o.readId !== o.payoutId && UUID.test(o.payoutId) && !UUID.test(o.readId))
        if (!links.has(o.readId)) links.set(o.readId, o.payoutId)
    }
    if (links.size === 0) return { folds: [], observations }
    // Every row the batch names, locked here in one statement in id order: the locks taken
    // later are then all held already, and two instances still never wait in a cycle.
    const named = observations.map((o) => o.payoutId)
    const query = Payout.query({ client: trx })
      .where((where) => {
        where.whereIn('payout_uuid', [...new Set([...named, ...links.keys()])])
        where.orWhereIn('read_id', [
          ...new Set([...named.filter((id) => !UUID.test(id)), ...links.keys()]),
        ])
      })
      .orderBy('id', 'asc')
    const rows = await (locksRows(trx) ? query.forUpdate() : query)
    const taken = new Set<string>()
    const folds: PayoutObservation[] = []
    for (const [readId, uuid] of links) {
      const holder = rows.find((r) => r.readId === readId)
      const target = rows.find((r) => r.payoutUuid === uuid)
      if (!holder || holder === target) continue
      if (holder.payoutUuid !== readId || (target?.readId && target.readId !== readId)) {
        // Another UUID's read id, or a UUID that has one already: the service contradicts
        // itself; neither row is touched.
        taken.add(readId)
        continue
      }
      const fold = await this.#foldOf(trx, holder, uuid)
      await trx
        .from(PayoutEvent.table)
        .where('payout_uuid', readId)
        .update({ payout_uuid: uuid, merged_from: readId })
      await trx.from(Payout.table).where('id', holder.id).delete()
      if (target) await trx.from(Payout.table).where('id', target.id).update({ read_id: readId })
      else
        await this.#insertPending(trx, [
          { payoutId: uuid, readId, source: 'poll', observedAt: holder.createdAt },
        ])
      if (fold) folds.push(fold)
    }
    return {
      folds,
      observations:
        taken.size === 0
          ? observations
          : observations.map((o) => (o.readId && taken.has(o.readId) ? { ...o, readId: null } : o)),
    }
  }

  /** A placeholder's position and fields, as an observation of the UUID it turned out to be. */
  async #foldOf(
    trx: TransactionClientContract,
    placeholder: Payout,
    uuid: string
  ): Promise<PayoutObservation | null> {
    if (placeholder.lastObservedAt === null) return null
    const last = await PayoutEvent.query({ client: trx })
      .where('payout_uuid', placeholder.payoutUuid)
      .where('applied', true)
      .orderBy('id', 'desc')
      .first()
    const fields: PayoutFields = {}
    for (const key of FIELD_KEYS) {
      const value = (placeholder as any)[key]
      if (value !== null && value !== undefined) (fields as any)[key] = value
    }
    return {
      payoutId: uuid,
      readId: placeholder.payoutUuid,
      status: placeholder.status,
      step: placeholder.step,
      completedAt: placeholder.completedAt?.toISO() ?? null,
      source: (last?.source as ObservationSource | undefined) ?? 'poll',
      eventType: 'merge',
      observedAt: placeholder.statusChangedAt ?? DateTime.now(),
      fields,
    }
  }

  /**
   * Runs the change hook of each change, in order, then marks them notified with one
   * statement; for callers of `applyBatchInTransaction`, after their COMMIT. A hook that
   * throws leaves its change to `renotify`. An outcome without a change may still announce
   * an owner attached to its payout.
   */
  async notifyBatch({
    outcomes,
  }: {
    outcomes: Array<{ change: PayoutChange | null; result?: ApplyResult }>
  }) {
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

  /** One observation on its payout's row (locked), inside the batch's transaction. */
  async #applyOne(
    trx: TransactionClientContract,
    observation: PayoutObservation
  ): Promise<{ result: ApplyResult; change: PayoutChange | null }> {
    const observedAt = observation.observedAt ?? DateTime.now()
    const locate = () => {
      const query = Payout.query({ client: trx })
      if (UUID.test(observation.payoutId)) query.where('payout_uuid', observation.payoutId)
      else query.where('read_id', observation.payoutId).orWhere('payout_uuid', observation.payoutId)
      return locksRows(trx) ? query.forUpdate().first() : query.first()
    }
    let row = await locate()
    if (!row) {
      // Insert-or-ignore: a concurrent observation of the same new payout may win the race.
      await this.#insertPending(trx, [observation])
      row = await locate()
      if (!row) throw new Error(`payout ${observation.payoutId} could not be stored`)
    }
    const step = this.#advance(row, observation, observedAt)
    row.useTransaction(trx)
    await row.save()
    const logged = await PayoutEvent.create(logEntry(row, observation, step, observedAt), {
      client: trx,
    })
    const outcome = this.#outcome(row, observation, step, observedAt, logged.id)
    if (outcome.change) await this.hooks.inTransaction?.(trx, [outcome.change])
    return outcome
  }

  /**
   * A set of observations (sorted by payout id) in a few statements instead of a few per
   * observation: one SELECT locks every known payout (in id order, so two instances never
   * deadlock on them), one INSERT-or-ignore adds the new ones, the reducer runs in memory,
   * each payout is saved once and the log gets one multi-row INSERT. Same result, row for
   * row, as applying them one by one.
   */
  async #applySetInTransaction(
    trx: TransactionClientContract,
    observations: PayoutObservation[]
  ): Promise<AppliedBatch['outcomes']> {
    const rows = await this.#lockPayouts(trx, observations)
    const rowOf = (observation: PayoutObservation) => {
      const row = rows.get(observation.payoutId)
      if (!row) throw new Error(`payout ${observation.payoutId} could not be stored`)
      return row
    }
    const last = new Map(observations.map((observation, index) => [rowOf(observation), index]))
    const applied = observations.map((observation, index) => {
      const row = rowOf(observation)
      const observedAt = observation.observedAt ?? DateTime.now()
      const step = this.#advance(row, observation, observedAt)
      // Later observations of the same payout move the row on; each outcome keeps the
      // payout as its own observation left it, as one-by-one application would.
      const snapshot = last.get(row) === index ? row : snapshotOf(row)
      return { row, snapshot, observation, step, observedAt }
    })
    for (const row of new Set(applied.map((a) => a.row))) {
      row.useTransaction(trx)
      await row.save()
    }
    const inserted: Array<{ id: number }> = await trx
      .knexQuery()
      .table(PayoutEvent.table)
      .insert(
        applied.map((a) =>
          toEventColumns(trx, logEntry(a.row, a.observation, a.step, a.observedAt))
        )
      )
      .returning('id')
    // One statement numbers its rows in VALUES order; RETURNING's own order is not promised.
    const ids = inserted.map((r) => Number(r.id)).sort((x, y) => x - y)
    if (ids.length !== applied.length) throw new Error('payout events were not all logged')
    const outcomes = applied.map((a, index) =>
      this.#outcome(a.snapshot, a.observation, a.step, a.observedAt, ids[index])
    )
    const changes = outcomes.flatMap(({ change }) => (change ? [change] : []))
    if (changes.length > 0) await this.hooks.inTransaction?.(trx, changes)
    return outcomes
  }

  /**
   * Every payout the observations name, locked, keyed by the id each observation gave;
   * missing ones are inserted first (UUIDs before read ids, so a read id carried by a new
   * UUID's observation finds that row instead of starting a second one).
   */
  async #lockPayouts(trx: TransactionClientContract, observations: PayoutObservation[]) {
    const byId = new Map<string, Payout>()
    // The same database row found under two ids (UUID and read id) is one model.
    const models = new Map<number, Payout>()
    const rowFor = (row: Payout) => models.get(row.id) ?? (models.set(row.id, row), row)
    const resolve = async (ids: string[]) => {
      const others = ids.filter((id) => !UUID.test(id))
      const query = Payout.query({ client: trx })
        .where((where) => {
          where.whereIn('payout_uuid', ids)
          if (others.length > 0) where.orWhereIn('read_id', others)
        })
        .orderBy('id', 'asc')
      const found = await (locksRows(trx) ? query.forUpdate() : query)
      for (const id of ids) {
        const row = UUID.test(id)
          ? found.find((r) => r.payoutUuid === id)
          : (found.find((r) => r.readId === id) ?? found.find((r) => r.payoutUuid === id))
        if (row) byId.set(id, byId.get(id) ?? rowFor(row))
      }
    }
    const missing = () =>
      [...new Set(observations.map((o) => o.payoutId))].filter((id) => !byId.has(id))

    // A new payout's row carries the first read id any of its observations gives.
    const firstSighting = (id: string) => {
      const own = observations.filter((o) => o.payoutId === id)
      return { ...own[0], readId: own.find((o) => o.readId)?.readId ?? own[0].readId }
    }
    await resolve([...new Set(observations.map((o) => o.payoutId))])
    for (const uuids of [true, false]) {
      if (!uuids) {
        // A read id that another observation in the set gives to a row it names: that
        // row, as one-by-one application would have found it once the read id was filled.
        for (const id of missing()) {
          const carrier = observations.find((o) => o.readId === id && byId.has(o.payoutId))
          const row = carrier && byId.get(carrier.payoutId)!
          if (row && (row.readId === null || row.readId === id)) byId.set(id, row)
        }
      }
      const ids = missing().filter((id) => UUID.test(id) === uuids)
      if (ids.length === 0) continue
      await this.#insertPending(trx, ids.map(firstSighting))
      await resolve(ids)
    }
    return byId
  }

  /** New payouts as pending rows, insert-or-ignore (another observer may win the race). */
  async #insertPending(trx: TransactionClientContract, observations: PayoutObservation[]) {
    await trx
      .knexQuery()
      .table(Payout.table)
      .insert(
        observations.map((observation) => {
          const now = dbDate(trx, observation.observedAt ?? DateTime.now())
          return {
            payout_uuid: observation.payoutId,
            read_id:
              observation.readId ?? (UUID.test(observation.payoutId) ? null : observation.payoutId),
            status: 'pending',
            step: null,
            created_at: now,
            updated_at: now,
          }
        })
      )
      // Either key: a read id may belong, by the time this runs, to a row a concurrent
      // merge just gave it; the caller then finds that row.
      .onConflict()
      .ignore()
  }

  /** Runs one observation through the reducer onto a locked row (in memory). */
  #advance(row: Payout, observation: PayoutObservation, observedAt: DateTime): Advance {
    // A row no observation has reached yet (just inserted) has no position to compare.
    const previous = row.lastObservedAt === null ? null : { status: row.status, step: row.step }
    const outcome = reduce(previous, { status: observation.status, step: observation.step })
    const ownerAttached = !row.ownerId && !!observation.fields?.ownerId && previous !== null
    this.#fill(row, observation)
    // When we last heard, on our clock (the event time is kept in payout_events).
    row.lastObservedAt = DateTime.now()
    if (outcome.changed) {
      row.status = outcome.next.status
      row.step = outcome.next.step
      row.statusChangedAt = observedAt
      if (row.status === 'completed' && !row.completedAt) {
        row.completedAt = observation.completedAt
          ? DateTime.fromISO(observation.completedAt)
          : observedAt
      }
    }
    return { previous, outcome, ownerAttached }
  }

  #outcome(
    row: Payout,
    observation: PayoutObservation,
    { previous, outcome, ownerAttached }: Advance,
    observedAt: DateTime,
    eventId: number
  ): { result: ApplyResult; change: PayoutChange | null } {
    const result = {
      payout: row,
      changed: outcome.changed,
      reason: outcome.reason,
      ownerAttached: ownerAttached && !outcome.changed,
    }
    const change = outcome.changed
      ? {
          payout: row,
          previous,
          current: outcome.next,
          source: observation.source,
          created: previous === null,
          eventId,
          observedAt,
        }
      : null
    return { result, change }
  }

  /** An owner given to a payout whose changes went out without one: its position now. */
  async #announceOwner(result?: ApplyResult) {
    if (!result?.ownerAttached || !this.hooks.onOwnerAttached) return
    const latest = await this.#latestChange(result.payout)
    if (latest) await this.hooks.onOwnerAttached(latest)
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
        this.transactionTimeoutMs,
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

  /** The payout's last applied change, as the position it holds now. */
  async #latestChange(payout: Payout): Promise<PayoutChange | null> {
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
  async #rebuild(row: PayoutEvent): Promise<PayoutChange | null> {
    const client = this.db.connection(this.connection)
    const found = await this.#bounded(
      Payout.query({ client }).where('payout_uuid', row.payoutUuid)
    ).first()
    if (!found) return null
    // A change of a placeholder since merged is told as it would have been: under its read
    // id, without the UUID's owner.
    const payout = row.mergedFrom ? snapshotOf(found) : found
    if (row.mergedFrom) Object.assign(payout, { payoutUuid: row.mergedFrom, ownerId: null })
    // Its own line only: a merged placeholder's rows moved the placeholder, not this row.
    const history = await this.#bounded(
      PayoutEvent.query({ client })
        .where('payout_uuid', row.payoutUuid)
        .where('id', '<=', row.id)
        .where((line) =>
          row.mergedFrom ? line.where('merged_from', row.mergedFrom) : line.whereNull('merged_from')
        )
        .orderBy('id', 'asc')
    )
    // Positions as #applyOne saw them: null until a first observation reached
    // the row, then moved by the applied rows only.
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
    return withStatementTimeout(query, this.transactionTimeoutMs)
  }

  #fill(row: Payout, observation: PayoutObservation) {
    if (observation.readId && !row.readId) row.readId = observation.readId
    for (const [key, value] of Object.entries(observation.fields ?? {})) {
      if (value === undefined || value === null) continue
      const current = (row as any)[key]
      if (current !== null && current !== undefined) continue
      ;(row as any)[key] = DECIMAL_FIELDS.has(key) ? toDecimalString(value as number) : value
    }
  }
}
