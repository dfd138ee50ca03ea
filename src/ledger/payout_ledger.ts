import type { Database } from '@adonisjs/lucid/database'
import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { DateTime } from 'luxon'
import { dbDate } from '../database/dates.ts'
import Payout from '../models/payout.ts'
import PayoutEvent from '../models/payout_event.ts'
import type { ObservationSource, PayoutChangedEvent } from '../types/events.ts'
import type { PayoutStatus, PayoutStep } from '../schemas/common.ts'
import { reduce, type PayoutPosition, type ReduceReason } from './state_machine.ts'

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
}

const DECIMAL_FIELDS = new Set([
  'sourceAmount',
  'payoutAmount',
  'toAmount',
  'partnerFxRate',
  'effectiveRate',
])
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

function toDecimalString(value: number | string): string {
  return typeof value === 'number' ? String(value) : value
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
  #sweep?: Promise<number>

  constructor(
    private db: Database,
    private hooks: LedgerHooks = {},
    private connection?: string
  ) {}

  async apply(observation: PayoutObservation): Promise<ApplyResult> {
    const { result, change } = await this.db
      .connection(this.connection)
      .transaction((trx) => this.applyInTransaction(trx, observation))
    await this.notify(change, result)
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
    if (observations.length === 1) return [await this.apply(observations[0])]
    const batch = await this.db
      .connection(this.connection)
      .transaction((trx) => this.applyBatchInTransaction(trx, observations))
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
    const order = observations
      .map((_, index) => index)
      .sort((a, b) => {
        const x = observations[a].payoutId
        const y = observations[b].payoutId
        return x < y ? -1 : x > y ? 1 : a - b
      })
    const outcomes: AppliedBatch['outcomes'] = []
    for (const index of order)
      outcomes.push(await this.applyInTransaction(trx, observations[index]))
    const results: ApplyResult[] = []
    order.forEach((index, position) => (results[index] = outcomes[position].result))
    return { outcomes, results }
  }

  /** `notify` for a batch, in order, with one statement marking every notified change. */
  async notifyBatch({ outcomes }: AppliedBatch) {
    const ids = outcomes.flatMap(({ change }) => (change ? [change.eventId] : []))
    for (const id of ids) this.#notifying.add(id)
    const notified: number[] = []
    try {
      for (const { change, result } of outcomes) {
        if (!change) {
          await this.notify(null, result)
          continue
        }
        if (this.hooks.onChange) await this.hooks.onChange(change)
        notified.push(change.eventId)
      }
    } finally {
      // Not marked (database away): renotify fires them again later, with their eventId.
      await this.#markNotified(notified).catch(() => {})
      for (const id of ids) this.#notifying.delete(id)
    }
  }

  /**
   * The same inside a caller's transaction (execute stores the intent and the payout in
   * one). The caller must call `notify(change)` after its COMMIT.
   */
  async applyInTransaction(
    trx: TransactionClientContract,
    observation: PayoutObservation
  ): Promise<{ result: ApplyResult; change: PayoutChange | null }> {
    const observedAt = observation.observedAt ?? DateTime.now()
    const lockable = !['sqlite3', 'better-sqlite3', 'libsql'].includes(trx.dialect.name)
    const locate = () => {
      const query = Payout.query({ client: trx })
      if (UUID.test(observation.payoutId)) query.where('payout_uuid', observation.payoutId)
      else query.where('read_id', observation.payoutId).orWhere('payout_uuid', observation.payoutId)
      return lockable ? query.forUpdate().first() : query.first()
    }
    let row = await locate()
    if (!row) {
      // Insert-or-ignore: a concurrent observation of the same new payout may win the race.
      const now = dbDate(trx, observedAt)
      await trx
        .knexQuery()
        .table(Payout.table)
        .insert({
          payout_uuid: observation.payoutId,
          read_id:
            observation.readId ?? (UUID.test(observation.payoutId) ? null : observation.payoutId),
          status: 'pending',
          step: null,
          created_at: now,
          updated_at: now,
        })
        .onConflict('payout_uuid')
        .ignore()
      row = await locate()
      if (!row) throw new Error(`payout ${observation.payoutId} could not be stored`)
    }
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
    row.useTransaction(trx)
    await row.save()

    const logged = await PayoutEvent.create(
      {
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
      },
      { client: trx }
    )

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
          eventId: logged.id,
          observedAt,
        }
      : null
    return { result, change }
  }

  /**
   * Runs the change hook, then marks the change notified; for callers of
   * `applyInTransaction`, after their COMMIT. A hook that throws leaves it to `renotify`.
   * Without a change, `result` may still announce an owner attached to the payout.
   */
  async notify(change: PayoutChange | null, result?: ApplyResult) {
    if (!change) {
      if (result?.ownerAttached && this.hooks.onOwnerAttached) {
        const latest = await this.#latestChange(result.payout)
        if (latest) await this.hooks.onOwnerAttached(latest)
      }
      return
    }
    this.#notifying.add(change.eventId)
    try {
      if (this.hooks.onChange) await this.hooks.onChange(change)
      // Not marked (database away): renotify fires it again later, with the same eventId.
      await this.#markNotified([change.eventId]).catch(() => {})
    } finally {
      this.#notifying.delete(change.eventId)
    }
  }

  /**
   * The outbox sweep: runs the hook, oldest first, for applied changes that were never
   * notified because their process died between COMMIT and the hook. Rows younger than
   * `olderThanMs` are left to the live process that wrote them (another instance may still
   * be notifying them). Returns how many changes were notified.
   */
  renotify(options: { olderThanMs?: number; limit?: number } = {}): Promise<number> {
    this.#sweep ??= this.#renotify(options).finally(() => (this.#sweep = undefined))
    return this.#sweep
  }

  async #renotify(options: { olderThanMs?: number; limit?: number }): Promise<number> {
    const client = this.db.connection(this.connection)
    const before = DateTime.now().minus({ milliseconds: options.olderThanMs ?? 10_000 })
    const rows = await PayoutEvent.query({ client })
      .whereNull('notified_at')
      .where('created_at', '<=', dbDate(client, before))
      .orderBy('id', 'asc')
      .limit(options.limit ?? 100)
    let notified = 0
    for (const row of rows) {
      if (this.#notifying.has(row.id)) continue
      const change = row.applied ? await this.#rebuild(row) : null
      if (!change) {
        await this.#markNotified([row.id])
        continue
      }
      await this.notify(change)
      notified++
    }
    return notified
  }

  /** The payout's last applied change, as the position it holds now. */
  async #latestChange(payout: Payout): Promise<PayoutChange | null> {
    const client = this.db.connection(this.connection)
    const last = await PayoutEvent.query({ client })
      .where('payout_uuid', payout.payoutUuid)
      .where('applied', true)
      .orderBy('id', 'desc')
      .first()
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
    const payout = await Payout.query({ client }).where('payout_uuid', row.payoutUuid).first()
    if (!payout) return null
    const history = await PayoutEvent.query({ client })
      .where('payout_uuid', row.payoutUuid)
      .where('id', '<=', row.id)
      .orderBy('id', 'asc')
    // Positions as applyInTransaction saw them: null until a first observation reached
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
    await client
      .from(PayoutEvent.table)
      .whereIn('id', ids)
      .update({ notified_at: dbDate(client) })
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
