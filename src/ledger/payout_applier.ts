import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { DateTime } from 'luxon'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import { dbDate } from '../database/dates.ts'
import {
  asStored,
  hasReturning,
  isMysql,
  locksRows,
  numbersConsecutively,
} from '../database/dialects.ts'
import { TURN_MS, turnsFor, type Turns } from '../database/turns.ts'
import Payout from '../models/payout.ts'
import PayoutEvent from '../models/payout_event.ts'
import { hydrateRow } from '../models/row_hydration.ts'
import { confirmDetectedDeposits } from './escrow_detection.ts'
import { saveLockedPayouts } from './saved_rows.ts'
import { insertPendingPayouts, metadataDueOf, snapshotOf } from './payout_rows.ts'
import { DEFAULT_NOTIFY_LEASE_MS, leaseOwner, type NotifyLease } from './payout_outbox.ts'
import { mergePlaceholders } from './read_id_placeholders.ts'
import { isBehind, reduce, type PayoutPosition, type ReduceResult } from './state_machine.ts'
import {
  isUuid,
  type AppliedBatch,
  type AppliedOutcome,
  type ApplyResult,
  type PayoutObservation,
} from './vocabulary.ts'

const DECIMAL_FIELDS = new Set([
  'sourceAmount',
  'payoutAmount',
  'toAmount',
  'partnerFxRate',
  'effectiveRate',
])

function toDecimalString(value: number | string): string {
  return typeof value === 'number' ? String(value) : value
}

/** What one observation did to a payout row (before anything is written). */
interface Advance {
  previous: PayoutPosition | null
  outcome: ReduceResult
  ownerAttached: boolean
}

/** The notification lease a batch's changes are written with: its holder and its end. */
interface TakenLease {
  owner: string
  until: DateTime
}

/**
 * The payout_events entry of one observation, applied or not (and why). A real change is
 * written under this process's notification lease; anything else is notified already.
 */
function logEntry(
  row: Payout,
  observation: PayoutObservation,
  { outcome }: Advance,
  observedAt: DateTime,
  lease: TakenLease
) {
  return {
    account: row.account,
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
    notifiedAt: outcome.changed ? null : DateTime.utc(),
    notifyOwner: outcome.changed ? lease.owner : null,
    notifyUntil: outcome.changed ? lease.until : null,
  }
}

/** A payout_events row for a raw multi-row INSERT (the model's columns, in SQL form). */
function toEventColumns(
  client: TransactionClientContract,
  entry: ReturnType<typeof logEntry>
): Record<string, unknown> {
  return {
    account: entry.account,
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
    notify_owner: entry.notifyOwner,
    notify_until: entry.notifyUntil ? dbDate(client, entry.notifyUntil) : null,
    created_at: dbDate(client, DateTime.utc()),
  }
}

/**
 * Applies observations inside a transaction: every payout row they name is locked
 * (PostgreSQL, MySQL) or held by SQLite's single writer, goes through the reducer, and
 * each observation is logged in payout_events whatever its outcome; an escrow deposit a
 * change shows the service detected is confirmed in the same transaction. Notifying is the
 * outbox's part, after COMMIT.
 */
export class PayoutApplier {
  /** The account whose payouts this applier reads and writes: never another's rows. */
  readonly account: string

  constructor(
    /** The notification lease this applier takes on the changes it writes (its outbox's). */
    private lease: NotifyLease = { owner: leaseOwner(), ms: DEFAULT_NOTIFY_LEASE_MS },
    options: { account?: string; turnMs?: number } = {}
  ) {
    this.account = options.account ?? DEFAULT_ACCOUNT
    this.#turnMs = options.turnMs ?? TURN_MS
  }

  /** How long a batch's synchronous work runs before the event loop takes a turn (`Turns`). */
  #turnMs: number

  /**
   * Applies a batch in the caller's transaction. Payouts are locked in id order
   * (observations of one payout keep their order), so two instances applying batches never
   * wait on each other in a cycle. Its changes are written under this process's
   * notification lease (`notifyUntil` says until when), so no other live process fires them.
   */
  async applyBatchInTransaction(
    trx: TransactionClientContract,
    observations: PayoutObservation[]
  ): Promise<AppliedBatch<Payout> & { notifyUntil: DateTime }> {
    const lease = {
      owner: this.lease.owner,
      until: DateTime.utc().plus({ milliseconds: this.lease.ms }),
    }
    const linked = await mergePlaceholders(trx, observations, this.account)
    // A merged placeholder's position goes first: its payout's own observations follow it.
    const all = [...linked.merged, ...linked.observations]
    const order = all
      .map((_, index) => index)
      .sort((a, b) => {
        const x = all[a].payoutId
        const y = all[b].payoutId
        return x < y ? -1 : x > y ? 1 : a - b
      })
    const outcomes: Array<AppliedOutcome<Payout>> = []
    if (all.length > 1 && (hasReturning(trx) || isMysql(trx))) {
      outcomes.push(
        ...(await this.#applySet(
          trx,
          order.map((i) => all[i]),
          lease
        ))
      )
    } else {
      for (const index of order) outcomes.push(await this.#applyOne(trx, all[index], lease))
    }
    const results: Array<ApplyResult<Payout>> = []
    order.forEach((index, position) => {
      if (index >= linked.merged.length)
        results[index - linked.merged.length] = outcomes[position].result
    })
    // The end as the database keeps it (whole seconds on SQLite and MySQL), never later.
    return { outcomes, results, notifyUntil: asStored(trx, lease.until) }
  }

  /** One observation on its payout's row (locked), inside the batch's transaction. */
  async #applyOne(
    trx: TransactionClientContract,
    observation: PayoutObservation,
    lease: TakenLease
  ): Promise<AppliedOutcome<Payout>> {
    const observedAt = observation.observedAt ?? DateTime.now()
    const id = observation.payoutId
    const locate = () => {
      const query = Payout.query({ client: trx }).where('account', this.account)
      if (isUuid(id)) query.where('payout_uuid', id)
      else query.where((named) => named.where('read_id', id).orWhere('payout_uuid', id))
      return locksRows(trx) ? query.forUpdate().first() : query.first()
    }
    let row = await locate()
    if (!row) {
      // Insert-or-ignore: a concurrent observation of the same new payout may win the race.
      await insertPendingPayouts(trx, [observation], this.account)
      row = await locate()
      if (!row) throw new Error(`payout ${observation.payoutId} could not be stored`)
    }
    const advance = this.#advance(trx, row, observation, observedAt)
    row.useTransaction(trx)
    await row.save()
    const logged = await PayoutEvent.create(
      logEntry(row, observation, advance, observedAt, lease),
      {
        client: trx,
      }
    )
    const outcome = this.#outcome(row, observation, advance, observedAt, logged.id)
    if (outcome.change) await confirmDetectedDeposits(trx, [outcome.change], this.account)
    return outcome
  }

  /**
   * A set of observations (sorted by payout id) in a few statements instead of a few per
   * observation: one SELECT locks every known payout (in id order, so two instances never
   * deadlock on them), one INSERT-or-ignore adds the new ones, the reducer runs in memory,
   * the payouts are saved in one UPDATE per 200 (`saveLockedPayouts`) and the log gets
   * one multi-row INSERT (MySQL: see `#log`).
   * Same result, row for row, as applying them one by one.
   */
  async #applySet(
    trx: TransactionClientContract,
    observations: PayoutObservation[],
    lease: TakenLease
  ): Promise<Array<AppliedOutcome<Payout>>> {
    // The event loop takes turns while this runs (not on SQLite): a batch's synchronous work
    // held it for 20 ms and more, and an acknowledgement waited that long.
    const turns = turnsFor(trx, this.#turnMs)
    const rows = await this.#lockPayouts(trx, observations, turns)
    const rowOf = (observation: PayoutObservation) => {
      const row = rows.get(observation.payoutId)
      if (!row) throw new Error(`payout ${observation.payoutId} could not be stored`)
      return row
    }
    const last = new Map(observations.map((observation, index) => [rowOf(observation), index]))
    const applied: Array<{
      row: Payout
      snapshot: Payout
      observation: PayoutObservation
      advance: Advance
      observedAt: DateTime
    }> = []
    for (const [index, observation] of observations.entries()) {
      const turn = turns.next()
      if (turn) await turn
      const row = rowOf(observation)
      const observedAt = observation.observedAt ?? DateTime.now()
      const advance = this.#advance(trx, row, observation, observedAt)
      // Later observations of the same payout move the row on; each outcome keeps the
      // payout as its own observation left it, as one-by-one application would.
      const snapshot = last.get(row) === index ? row : snapshotOf(row)
      applied.push({ row, snapshot, observation, advance, observedAt })
    }
    await saveLockedPayouts(trx, new Set(applied.map((a) => a.row)), turns)
    const ids = await this.#log(
      trx,
      applied.map((a) =>
        toEventColumns(trx, logEntry(a.row, a.observation, a.advance, a.observedAt, lease))
      )
    )
    if (ids.length !== applied.length) throw new Error('payout events were not all logged')
    const outcomes = applied.map((a, index) =>
      this.#outcome(a.snapshot, a.observation, a.advance, a.observedAt, ids[index])
    )
    const changes = outcomes.flatMap(({ change }) => (change ? [change] : []))
    if (changes.length > 0) await confirmDetectedDeposits(trx, changes, this.account)
    return outcomes
  }

  /**
   * Appends the log rows and answers their ids, in the order given: one multi-row INSERT
   * ... RETURNING. MySQL has no RETURNING, and a multi-row INSERT there tells only its first
   * id: one such INSERT where InnoDB numbers its rows consecutively (`numbersConsecutively`),
   * else one INSERT per row.
   */
  async #log(trx: TransactionClientContract, rows: Array<Record<string, unknown>>) {
    const table = () => trx.knexQuery().table(PayoutEvent.table)
    if (!hasReturning(trx) && rows.length > 1 && (await numbersConsecutively(trx))) {
      // One multi-row INSERT: its ids are consecutive, the first one is LAST_INSERT_ID().
      const [first] = (await table().insert(rows)) as unknown as number[]
      return rows.map((_, index) => Number(first) + index)
    }
    if (!hasReturning(trx)) {
      const ids: number[] = []
      for (const row of rows) {
        const [id] = (await table().insert(row)) as unknown as number[]
        ids.push(Number(id))
      }
      return ids
    }
    const inserted: Array<{ id: number }> = await table().insert(rows).returning('id')
    // One statement numbers its rows in VALUES order; RETURNING's own order is not promised.
    return inserted.map((r) => Number(r.id)).sort((x, y) => x - y)
  }

  /**
   * Every payout the observations name, locked, keyed by the id each observation gave;
   * missing ones are inserted first (UUIDs before read ids, so a read id carried by a new
   * UUID's observation finds that row instead of starting a second one).
   */
  async #lockPayouts(
    trx: TransactionClientContract,
    observations: PayoutObservation[],
    turns: Turns
  ) {
    const byId = new Map<string, Payout>()
    // The same database row found under two ids (UUID and read id) is one model.
    const models = new Map<number, Payout>()
    const rowFor = (row: Payout) => models.get(row.id) ?? (models.set(row.id, row), row)
    const resolve = async (ids: string[]) => {
      const others = ids.filter((id) => !isUuid(id))
      const query = Payout.query({ client: trx })
        .where('account', this.account)
        .where((where) => {
          where.whereIn('payout_uuid', ids)
          if (others.length > 0) where.orWhereIn('read_id', others)
        })
        .orderBy('id', 'asc')
      // Read as plain rows and made models here (`hydrateRow`: Lucid's model, made without
      // its Proxy per column), taking turns: Lucid makes a whole result's models at once,
      // 100 payouts' in one stretch.
      const plain = await (locksRows(trx) ? query.forUpdate() : query).pojo<
        Record<string, unknown>
      >()
      const found: Payout[] = []
      for (const raw of plain) {
        const turn = turns.next()
        if (turn) await turn
        found.push(hydrateRow(Payout, raw, trx))
      }
      // Each id's first row in id order, as a search of the list would find it: indexed
      // once, not searched per id (a batch of 100 read each model's columns 10,000 times).
      const byUuid = new Map<string, Payout>()
      const byReadId = new Map<string, Payout>()
      for (const row of found) {
        if (!byUuid.has(row.payoutUuid)) byUuid.set(row.payoutUuid, row)
        if (row.readId !== null && !byReadId.has(row.readId)) byReadId.set(row.readId, row)
      }
      for (const id of ids) {
        const row = isUuid(id) ? byUuid.get(id) : (byReadId.get(id) ?? byUuid.get(id))
        if (row) byId.set(id, byId.get(id) ?? rowFor(row))
      }
    }
    // Each payout's observations, in their order.
    const observationsOf = new Map<string, PayoutObservation[]>()
    for (const observation of observations) {
      const own = observationsOf.get(observation.payoutId)
      if (own) own.push(observation)
      else observationsOf.set(observation.payoutId, [observation])
    }
    const missing = () => [...observationsOf.keys()].filter((id) => !byId.has(id))

    // A new payout's row carries the first read id any of its observations gives.
    const firstSighting = (id: string) => {
      const own = observationsOf.get(id)!
      return { ...own[0], readId: own.find((o) => o.readId)?.readId ?? own[0].readId }
    }
    await resolve([...observationsOf.keys()])
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
      const ids = missing().filter((id) => isUuid(id) === uuids)
      if (ids.length === 0) continue
      await insertPendingPayouts(trx, ids.map(firstSighting), this.account)
      await resolve(ids)
    }
    return byId
  }

  /** Runs one observation through the reducer onto a locked row (in memory). */
  #advance(
    trx: TransactionClientContract,
    row: Payout,
    observation: PayoutObservation,
    observedAt: DateTime
  ): Advance {
    // A row no observation has reached yet (just inserted) has no position to compare.
    const previous = row.lastObservedAt === null ? null : { status: row.status, step: row.step }
    const outcome = reduce(previous, { status: observation.status, step: observation.step })
    const ownerAttached = !row.ownerId && !!observation.fields?.ownerId && previous !== null
    this.#fill(row, observation)
    const metadataBefore = row.providerMetadataAt
    this.#takeProviderMetadata(trx, row, previous, observation, observedAt)
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
    // The mark of the ended payouts whose detail is still to read (`metadataDueOf`), which the
    // reconciler reads through its index: what it depends on changes nowhere else. Written
    // only when it changes (undefined, on a row read before the column existed, as null).
    if (outcome.changed || row.providerMetadataAt !== metadataBefore) {
      const due = metadataDueOf(row, (time) => asStored(trx, time))
      if (due?.toMillis() !== row.providerMetadataDueAt?.toMillis()) {
        row.providerMetadataDueAt = due
      }
    }
    return { previous, outcome, ownerAttached }
  }

  /** The result of one applied observation, and its change when it moved the payout. */
  #outcome(
    row: Payout,
    observation: PayoutObservation,
    { previous, outcome, ownerAttached }: Advance,
    observedAt: DateTime,
    eventId: number
  ): AppliedOutcome<Payout> {
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

  /** Fills the row's empty fields (and read id) from the observation; never overwrites. */
  #fill(row: Payout, observation: PayoutObservation) {
    if (observation.readId && !row.readId) row.readId = observation.readId
    for (const [key, value] of Object.entries(observation.fields ?? {})) {
      if (value === undefined || value === null || key === 'providerMetadata') continue
      const current = (row as any)[key]
      if (current !== null && current !== undefined) continue
      ;(row as any)[key] = DECIMAL_FIELDS.has(key) ? toDecimalString(value as number) : value
    }
  }

  /**
   * Keeps the latest routing detail: an observation's `providerMetadata` replaces the row's
   * unless it is stale, that is behind the row's position (`isBehind`, before this
   * observation moved it) or observed before the stored one. Times are compared as the
   * database keeps them (whole seconds on SQLite and MySQL), so a batch decides as a reload
   * would; at the same time, the one applied later wins. An observation without it keeps
   * what is stored.
   */
  #takeProviderMetadata(
    trx: TransactionClientContract,
    row: Payout,
    previous: PayoutPosition | null,
    observation: PayoutObservation,
    observedAt: DateTime
  ) {
    const metadata = observation.fields?.providerMetadata
    if (metadata === undefined || metadata === null) return
    if (isBehind(previous, { status: observation.status, step: observation.step })) return
    const at = asStored(trx, observation.providerMetadataAt ?? observedAt)
    if (row.providerMetadataAt && at < row.providerMetadataAt) return
    row.providerMetadata = metadata
    row.providerMetadataAt = at
  }
}
