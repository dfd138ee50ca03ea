import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import debug from '../debug.ts'
import type { ReplayedRow } from '../ledger/change_replay.ts'
import type { PayoutPosition } from '../ledger/state_machine.ts'
import { Payout, PayoutEvent } from '../models/main.ts'
import type { Gap } from './relay_cursor.ts'

/**
 * Ids per statement of a read's loads, and the most log rows one read takes (see the relay's
 * `readSliceMs`).
 */
export const BATCH = 500
/** Gap ranges per statement: every gap is read back on each tick, in as many statements. */
const GAPS_PER_READ = 50
/** The newest ids read at start: a transaction still open then may commit one of their gaps. */
const START_WINDOW = 1000

/** The log columns the cursor reads (the account: only its own rows go out). */
const LOG_COLUMNS = ['id', 'account', 'payout_uuid', 'applied', 'merged_from']
/** The log columns a replay reads (`ReplayedRow`). */
const REPLAY_COLUMNS = [...LOG_COLUMNS, 'status', 'step', 'source', 'observed_at']
/** The payout columns a broadcast reads (`toChangedEvent`, the owner announcement). */
const PAYOUT_COLUMNS = [
  'id',
  'payout_uuid',
  'read_id',
  'owner_id',
  'flow',
  'status',
  'step',
  'payout_amount',
  'payout_currency',
  'completed_at',
]

/** A log row as the relay's cursor reads it. */
export type LogRow = Pick<PayoutEvent, 'id' | 'account' | 'payoutUuid' | 'applied' | 'mergedFrom'>
/** A log row as a replay reads it, with its payout. */
export type HistoryRow = ReplayedRow & { payoutUuid: string }

/** A payout's position as of its log row `id`, among the rows of one placeholder (or its own). */
export interface Relayed {
  id: number
  position: PayoutPosition
}

/** What a read loaded for its changes: their payouts now, and their logs from a bound on. */
export interface Loaded {
  rows: LogRow[]
  payouts: Map<string, Payout>
  histories: Map<string, HistoryRow[]>
  /** The relayed positions the histories start after (read before the load). */
  relayed: Map<string, Relayed>
}

/** Puts one statement under the relay's bound (and counts it). */
export type Bounded = <Query extends { timeout(ms: number): Query }>(query: Query) => Query

/**
 * What the relay's reads need: the statements' bound, the positions it relayed last, and the
 * account it follows.
 */
export interface RelayReadsOptions {
  bounded: Bounded
  /** Whose changes it loads for a broadcast (default `main`). */
  account?: string
  /** The position last relayed under a `positionKey`, if it is still remembered. */
  known: (key: string) => Relayed | undefined
}

/** Where a change's position is kept: its payout, and its placeholder when merged from one. */
export function positionKey(row: Pick<LogRow, 'payoutUuid' | 'mergedFrom'>) {
  return `${row.payoutUuid}\u0000${row.mergedFrom ?? ''}`
}

/**
 * The relay's statements on the ledger, each bounded: the newest ids at start, the rows after
 * the frontier, the rows that appeared in its gaps, and what a broadcast of some rows needs
 * (their payouts and logs). Nothing here moves the relay: it only reads.
 *
 * The cursor's reads (`newest`, `after`, `inGaps`) see the log rows of every account: the
 * log's ids are one sequence across accounts, and an id another account committed, were it
 * unseen, would be a gap read back on every tick until its wait ran out. They read the
 * account of each row, and the relay keeps its own. What a broadcast loads (`load`: payouts
 * and their logs) is of the relay's account only.
 */
export class RelayReads {
  #bounded: Bounded
  #known: (key: string) => Relayed | undefined
  readonly account: string

  constructor(options: RelayReadsOptions) {
    this.#bounded = options.bounded
    this.#known = options.known
    this.account = options.account ?? DEFAULT_ACCOUNT
  }

  /** Whether a log row is of the relay's account (the others only move its cursor). */
  owns(row: Pick<LogRow, 'account'>): boolean {
    return row.account === this.account
  }

  /** The newest ids of the log, ascending (at most `START_WINDOW`). */
  async newest(client: QueryClientContract): Promise<number[]> {
    const newest = await this.#bounded(
      PayoutEvent.query({ client })
        .select('id')
        // A primary-key range read from its end (SQLite's plan says SCAN without a bound).
        .where('id', '>', 0)
        .orderBy('id', 'desc')
        .limit(START_WINDOW)
    )
    return newest.map((row) => row.id).reverse()
  }

  /** The rows after `frontier`, in id order (at most `limit`). */
  async after(client: QueryClientContract, frontier: number, limit: number): Promise<LogRow[]> {
    return this.#bounded(
      PayoutEvent.query({ client })
        .select(LOG_COLUMNS)
        .where('id', '>', frontier)
        .orderBy('id', 'asc')
        .limit(limit)
    )
  }

  /** The rows that appeared in `gaps`, every gap read (in statements of a few ranges each). */
  async inGaps(client: QueryClientContract, gaps: readonly Gap[]): Promise<LogRow[]> {
    const found: LogRow[] = []
    for (let start = 0; start < gaps.length; start += GAPS_PER_READ) {
      const chunk = gaps.slice(start, start + GAPS_PER_READ)
      const rows: LogRow[] = await this.#bounded(
        PayoutEvent.query({ client })
          .select(LOG_COLUMNS)
          .where((ids) => {
            for (const gap of chunk) ids.orWhereBetween('id', [gap.from, gap.to])
          })
          .orderBy('id', 'asc')
      )
      found.push(...rows)
    }
    return found
  }

  /**
   * The payouts of `rows` as they are now, and their logs up to the last of `rows`: from the
   * position last relayed when it is known (the rows after it), else whole. A row whose
   * payout is gone moved meanwhile (its placeholder merged into a UUID): it is read again by
   * id and replayed under `merged_from`.
   */
  async load(client: QueryClientContract, rows: LogRow[]): Promise<Loaded> {
    const relayed = new Map<string, Relayed>()
    const last = rows[rows.length - 1].id
    const loaded = await this.#fetch(client, rows, last, relayed)
    const moved = rows.filter(
      (row) =>
        !loaded.payouts.has(row.payoutUuid) ||
        !loaded.histories.get(row.payoutUuid)?.some((event) => event.id === row.id)
    )
    if (moved.length === 0) return { rows, ...loaded, relayed }
    const now = new Map<number, LogRow>()
    for (let start = 0; start < moved.length; start += BATCH) {
      const ids = moved.slice(start, start + BATCH).map((row) => row.id)
      const found: LogRow[] = await this.#bounded(
        PayoutEvent.query({ client })
          .select(LOG_COLUMNS)
          .where('account', this.account)
          .whereIn('id', ids)
      )
      for (const row of found) now.set(row.id, row)
    }
    const again = moved.flatMap((row) => {
      const current = now.get(row.id)
      return current && current.payoutUuid !== row.payoutUuid ? [current] : []
    })
    if (again.length > 0) {
      debug('relay: %d changes read again under the payout they merged into', again.length)
      const more = await this.#fetch(client, again, last, relayed)
      for (const [uuid, payout] of more.payouts) loaded.payouts.set(uuid, payout)
      for (const [uuid, history] of more.histories) loaded.histories.set(uuid, history)
    }
    const merged = rows.map((row) =>
      now.has(row.id) && moved.includes(row) ? now.get(row.id)! : row
    )
    return { rows: merged, ...loaded, relayed }
  }

  /** The payouts of `rows` and their log rows up to `last` (the replay's columns), bounded. */
  async #fetch(
    client: QueryClientContract,
    rows: LogRow[],
    last: number,
    relayed: Map<string, Relayed>
  ) {
    // Per payout, the rows after its lowest known position; all of them when one is unknown.
    const after = new Map<string, number>()
    for (const row of rows) {
      const key = positionKey(row)
      const known = this.#known(key)
      const usable = row.applied && known && known.id < row.id ? known : null
      if (usable) relayed.set(key, usable)
      const bound = usable ? usable.id : 0
      after.set(row.payoutUuid, Math.min(after.get(row.payoutUuid) ?? bound, bound))
    }
    const payouts = new Map<string, Payout>()
    const histories = new Map<string, HistoryRow[]>()
    const uuids = [...after.keys()]
    for (let start = 0; start < uuids.length; start += BATCH) {
      const chunk = uuids.slice(start, start + BATCH)
      const whole = chunk.filter((uuid) => after.get(uuid) === 0)
      const since = chunk.filter((uuid) => after.get(uuid)! > 0)
      const [found, events] = await Promise.all([
        this.#bounded(
          Payout.query({ client })
            .select(PAYOUT_COLUMNS)
            .where('account', this.account)
            .whereIn('payout_uuid', chunk)
        ),
        this.#bounded(
          PayoutEvent.query({ client })
            .select(REPLAY_COLUMNS)
            .where('account', this.account)
            .where((own) => {
              if (whole.length > 0) own.orWhereIn('payout_uuid', whole)
              for (const uuid of since) {
                own.orWhere((one) =>
                  one.where('payout_uuid', uuid).where('id', '>', after.get(uuid)!)
                )
              }
            })
            .where('id', '<=', last)
            .orderBy('id', 'asc')
        ),
      ])
      for (const payout of found) payouts.set(payout.payoutUuid, payout)
      for (const event of events as HistoryRow[]) {
        const list = histories.get(event.payoutUuid) ?? []
        list.push(event)
        histories.set(event.payoutUuid, list)
      }
    }
    return { payouts, histories }
  }
}
