import type { Logger } from '@adonisjs/core/logger'
import type { Database } from '@adonisjs/lucid/database'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { CommitListener, isPostgres } from '../database/change_notices.ts'
import { withDeadline } from '../time_bounds.ts'
import { withStatementTimeout } from '../database/deadline.ts'
import debug from '../debug.ts'
import { replayChange, type ReplayedRow } from '../ledger/change_replay.ts'
import type { PayoutPosition } from '../ledger/state_machine.ts'
import { toChangedEvent, type PayoutChange } from '../ledger/vocabulary.ts'
import { Payout, PayoutEvent } from '../models/main.ts'
import type { PayoutsNotifier } from './notifier.ts'

/** Log rows read per statement; a full read is followed by the next one at once. */
const BATCH = 500
/** Gap ranges per statement: every gap is read back on each tick, in as many statements. */
const GAPS_PER_READ = 50
/** The newest ids read at start: a transaction still open then may commit one of their gaps. */
const START_WINDOW = 1000
/** Payouts remembered as broadcast without an owner, for the owner's late arrival. */
const OWNERLESS_KEPT = 10_000
/** Positions remembered as relayed last (per payout and placeholder): later reads start there. */
const POSITIONS_KEPT = 10_000
/** The poll's interval at the least while LISTEN is up (PostgreSQL): a safety net then. */
const LISTENING_POLL_MS = 1000
/** Each statement's bound (at most `gapWaitMs`): a stalled database fails a read, not the relay. */
const STATEMENT_MS = 5000
/** How long `stop()` waits for the read in hand; that read then ends on its own, sending nothing. */
const STOP_MS = 2000

/** The log columns the cursor reads. */
const LOG_COLUMNS = ['id', 'payout_uuid', 'applied', 'merged_from']
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

/** What the relay needs: the database, where to broadcast, its interval and bounds. */
export interface BroadcastRelayOptions {
  db: Database
  connection?: string
  /** Where its changes go: to this process's subscribers only (`local`), never to a transport. */
  notifier: Pick<PayoutsNotifier, 'broadcast'>
  logger: Logger
  /** How often it reads the log (`transmit.relayIntervalMs`). */
  intervalMs: number
  /**
   * The channel the committing processes NOTIFY (`changesChannel`): on PostgreSQL the relay
   * LISTENs on it and reads at once on a notice; its poll goes on, every second at the least.
   */
  channel?: string
  /**
   * How long a missing id is waited for: the longest a transaction may stay open
   * (`ledger.transactionTimeoutMs`) and a margin. A gap is given up only once a read that
   * started after it still missed it.
   */
  gapWaitMs: number
  /** Tests: runs after the log was read, before the payouts of its changes are. */
  afterRead?: () => Promise<void>
}

/** Ids not seen yet below the frontier: a transaction that took them may still commit. */
interface Gap {
  from: number
  to: number
  /** When the read that found it missing returned. */
  since: number
}

type LogRow = Pick<PayoutEvent, 'id' | 'payoutUuid' | 'applied' | 'mergedFrom'>
type HistoryRow = ReplayedRow & { payoutUuid: string }

/** A payout's position as of its log row `id`, among the rows of one placeholder (or its own). */
interface Relayed {
  id: number
  position: PayoutPosition
}

/** What a read loaded for its changes: their payouts now, and their logs from a bound on. */
interface Loaded {
  rows: LogRow[]
  payouts: Map<string, Payout>
  histories: Map<string, HistoryRow[]>
  /** The relayed positions the histories start after (read before the load). */
  relayed: Map<string, Relayed>
}

/**
 * Follows the ledger's applied changes (`payout_events`, in commit order) and broadcasts
 * each on the plugin's Transmit channels of this process, whichever process applied it: the
 * web processes of a deployment hear what the worker applies without a Transmit transport.
 *
 * It reads `id > frontier ORDER BY id LIMIT n` every `intervalMs` (a primary-key range, one
 * statement when idle). On PostgreSQL and MySQL an id can commit after a higher one: an id
 * missing below the frontier is a gap, read back on each tick until it appears or a read
 * started `gapWaitMs` after it was found missing still misses it (its transaction rolled
 * back), so no change is skipped and none is sent twice. A read moves the cursor only once
 * everything it needs was read. It starts at the newest change: what was applied before it
 * started is not sent. On PostgreSQL, with a `channel`, a NOTIFY after each commit wakes it.
 */
export class BroadcastRelay {
  /** Statements the relays of this process ran (diagnostics: the bench's relay cost). */
  static statements = 0
  #options: BroadcastRelayOptions
  #frontier: number | null = null
  #gaps: Gap[] = []
  /** Payouts whose last change went out without an owner (insertion order, bounded). */
  #ownerless = new Set<string>()
  /** The last position relayed per payout and placeholder (least recently used first). */
  #relayed = new Map<string, Relayed>()
  #timer?: NodeJS.Timeout
  #tick?: Promise<void>
  /** The read in hand: a tick's or `readOnce`'s, one at a time. */
  #reading: Promise<unknown> = Promise.resolve()
  #stopped = false
  #failing = false
  #listener?: CommitListener
  /** A notice came during a read: another read follows it at once. */
  #woken = false

  constructor(options: BroadcastRelayOptions) {
    this.#options = options
    const { channel, logger } = options
    if (channel && isPostgres(this.#client())) {
      this.#listener = new CommitListener({
        client: () => this.#client(),
        channel,
        logger,
        onNotice: () => this.#wake(),
      })
    }
  }

  /** Whether a LISTEN connection wakes it now (PostgreSQL). */
  get listening() {
    return this.#listener?.listening ?? false
  }

  /** Whether its cursor is set: every change committed from then on goes out. */
  get started() {
    return this.#frontier !== null
  }

  /** Starts following the log from its newest change (its first read at once). */
  start() {
    this.#stopped = false
    if (!this.#timer && !this.#tick) this.#schedule(0)
    this.#listener?.start()
  }

  /**
   * Stops the timer and the LISTEN connection, waiting a short while for the read in hand
   * (a stalled database does not hold a shutdown); that read still ending sends nothing.
   */
  async stop() {
    this.#stopped = true
    clearTimeout(this.#timer)
    this.#timer = undefined
    const stopping = Promise.all([this.#tick, this.#listener?.close()])
    await withDeadline(stopping, STOP_MS, 'the payouts relay stopping').catch(() => {
      debug('relay: stopped with a read still in hand')
    })
  }

  /** One read now, after the read in hand (tests); answers how many log rows it went through. */
  readOnce(): Promise<number> {
    return this.#exclusive(() => this.#read())
  }

  /** The ids it still waits for, as ranges (tests, diagnostics). */
  pendingGaps(): Array<[number, number]> {
    return this.#gaps.map((gap) => [gap.from, gap.to])
  }

  /** Runs `work` once the read in hand ended: reads never overlap (nothing sent twice). */
  #exclusive<T>(work: () => Promise<T>): Promise<T> {
    const result = this.#reading.then(work)
    this.#reading = result.catch(() => {})
    return result
  }

  #schedule(ms: number) {
    this.#timer = setTimeout(() => {
      this.#timer = undefined
      this.#tick = this.#run().finally(() => {
        this.#tick = undefined
        if (this.#woken) this.#wake()
      })
    }, ms)
    this.#timer.unref()
  }

  /** A commit was announced: read now, or right after the read in hand. */
  #wake() {
    if (this.#stopped) return
    if (this.#tick) {
      this.#woken = true
      return
    }
    clearTimeout(this.#timer)
    this.#schedule(0)
  }

  async #run() {
    this.#woken = false
    let read = 0
    try {
      read = await this.#exclusive(() => this.#read())
      if (this.#failing) this.#options.logger.info('payouts relay reads the ledger again')
      this.#failing = false
    } catch (error) {
      // Logged once per outage; the next tick reads from the same frontier.
      if (!this.#failing) this.#options.logger.warn({ err: error }, 'payouts relay read failed')
      this.#failing = true
    }
    if (this.#stopped) return
    const { intervalMs } = this.#options
    const poll = this.listening ? Math.max(intervalMs, LISTENING_POLL_MS) : intervalMs
    this.#schedule(read >= BATCH ? 0 : poll)
  }

  #client(): QueryClientContract {
    return this.#options.db.connection(this.#options.connection)
  }

  #bounded<Query extends { timeout(ms: number): Query }>(query: Query): Query {
    BroadcastRelay.statements++
    return withStatementTimeout(query, Math.min(STATEMENT_MS, this.#options.gapWaitMs))
  }

  /**
   * Reads what committed since the last read and broadcasts the changes among it. Nothing
   * moves (cursor, gaps) until all of it was read: a read failing halfway is read again.
   */
  async #read(): Promise<number> {
    if (this.#frontier === null) return this.#begin()
    const client = this.#client()
    const frontier = this.#frontier
    const fresh: LogRow[] = await this.#bounded(
      PayoutEvent.query({ client })
        .select(LOG_COLUMNS)
        .where('id', '>', frontier)
        .orderBy('id', 'asc')
        .limit(BATCH)
    )
    const seen = Date.now()
    const { gapWaitMs } = this.#options
    // The gaps as they were before this read: each is read back below, from `started` on.
    const started = Date.now()
    const filled = await this.#readGaps(client, this.#gaps)
    let gaps = this.#gaps
    for (const row of filled) gaps = fill(gaps, row.id)
    // Given up: still missing in a read that started once its wait was over.
    const expired = gaps.filter((gap) => started - gap.since >= gapWaitMs)
    if (expired.length > 0) debug('relay: %d gaps given up', expired.length)
    gaps = gaps.filter((gap) => started - gap.since < gapWaitMs)
    let expected = frontier + 1
    for (const row of fresh) {
      if (row.id > expected) gaps.push({ from: expected, to: row.id - 1, since: seen })
      expected = row.id + 1
    }
    // Rows of one payout commit in id order (its row is locked): id order keeps its order.
    const rows = [...filled, ...fresh].sort((a, b) => a.id - b.id)
    const relevant = rows.filter((row) => row.applied || this.#ownerless.has(row.payoutUuid))
    await this.#options.afterRead?.()
    const loaded = relevant.length === 0 ? null : await this.#load(relevant)
    this.#frontier = fresh.at(-1)?.id ?? frontier
    this.#gaps = gaps
    if (loaded && !this.#stopped) this.#broadcast(loaded)
    return fresh.length
  }

  /** The rows that appeared in `gaps`, every gap read (in statements of a few ranges each). */
  async #readGaps(client: QueryClientContract, gaps: Gap[]): Promise<LogRow[]> {
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

  /** The frontier at the newest change, and the gaps among the newest ids still open. */
  async #begin(): Promise<number> {
    const newest = await this.#bounded(
      PayoutEvent.query({ client: this.#client() })
        .select('id')
        // A primary-key range read from its end (SQLite's plan says SCAN without a bound).
        .where('id', '>', 0)
        .orderBy('id', 'desc')
        .limit(START_WINDOW)
    )
    const ids = newest.map((row) => row.id).reverse()
    const now = Date.now()
    for (let i = 1; i < ids.length; i++) {
      if (ids[i] > ids[i - 1] + 1)
        this.#gaps.push({ from: ids[i - 1] + 1, to: ids[i] - 1, since: now })
    }
    this.#frontier = ids.at(-1) ?? 0
    debug('relay: from change %d', this.#frontier)
    return 0
  }

  /**
   * The changes among the loaded rows, as the applying process would have broadcast them;
   * and for a payout that went out without an owner and has one now (the execute response
   * came after its `payout.created`), its position once on the owner's channel.
   */
  #broadcast({ rows, payouts, histories, relayed }: Loaded) {
    const { notifier } = this.#options
    for (const row of rows) {
      const found = payouts.get(row.payoutUuid)
      const history = histories.get(row.payoutUuid) ?? []
      if (!found) continue
      if (!row.applied) {
        // Announced once: a later row of the payout in this same read finds it gone.
        if (!found.ownerId || row.mergedFrom || !this.#ownerless.has(row.payoutUuid)) continue
        const change = latestBefore(found, history, row.id)
        this.#ownerless.delete(row.payoutUuid)
        if (change) notifier.broadcast(toChangedEvent(change), { ownerOnly: true, local: true })
        continue
      }
      const key = positionKey(row)
      const known = relayed.get(key)
      const after = known && known.id < row.id ? known : null
      const own = after ? history.filter((event) => event.id > after.id) : history
      const change = replayChange(found, own, row, after?.position ?? null)
      if (!change) continue
      relayed.set(key, { id: row.id, position: change.current })
      if ((this.#relayed.get(key)?.id ?? 0) < row.id) {
        this.#keep(key, { id: row.id, position: change.current })
      }
      if (!row.mergedFrom) this.#remember(row.payoutUuid, change.payout.ownerId)
      notifier.broadcast(toChangedEvent(change), { local: true })
    }
  }

  #remember(payoutUuid: string, ownerId: string | null) {
    this.#ownerless.delete(payoutUuid)
    if (ownerId) return
    this.#ownerless.add(payoutUuid)
    if (this.#ownerless.size > OWNERLESS_KEPT) {
      this.#ownerless.delete(this.#ownerless.values().next().value!)
    }
  }

  #keep(key: string, relayed: Relayed) {
    this.#relayed.delete(key)
    this.#relayed.set(key, relayed)
    if (this.#relayed.size > POSITIONS_KEPT) {
      this.#relayed.delete(this.#relayed.keys().next().value!)
    }
  }

  /**
   * The payouts of `rows` as they are now, and their logs up to the last of `rows`: from the
   * position last relayed when it is known (the rows after it), else whole. A row whose
   * payout is gone moved meanwhile (its placeholder merged into a UUID): it is read again by
   * id and replayed under `merged_from`.
   */
  async #load(rows: LogRow[]): Promise<Loaded> {
    const client = this.#client()
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
        PayoutEvent.query({ client }).select(LOG_COLUMNS).whereIn('id', ids)
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
      const known = this.#relayed.get(key)
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
          Payout.query({ client }).select(PAYOUT_COLUMNS).whereIn('payout_uuid', chunk)
        ),
        this.#bounded(
          PayoutEvent.query({ client })
            .select(REPLAY_COLUMNS)
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

/** Where a change's position is kept: its payout, and its placeholder when merged from one. */
function positionKey(row: Pick<LogRow, 'payoutUuid' | 'mergedFrom'>) {
  return `${row.payoutUuid}\u0000${row.mergedFrom ?? ''}`
}

/** `gaps` with the id that appeared taken out: its gap shrinks or splits. */
function fill(gaps: Gap[], id: number): Gap[] {
  const at = gaps.findIndex((gap) => gap.from <= id && id <= gap.to)
  if (at === -1) return gaps
  const gap = gaps[at]
  const parts = [
    { ...gap, to: id - 1 },
    { ...gap, from: id + 1 },
  ].filter((part) => part.from <= part.to)
  return [...gaps.slice(0, at), ...parts, ...gaps.slice(at + 1)]
}

/**
 * The position a payout held when its owner arrived (the log row `beforeId`): its last
 * applied change before it, as the notifier's owner announcement carries it.
 */
function latestBefore(
  found: Payout,
  history: HistoryRow[],
  beforeId: number
): PayoutChange<Payout> | null {
  const own = history.filter((event) => !event.mergedFrom && event.id < beforeId)
  const last = own.filter((event) => event.applied).at(-1)
  const change = last ? replayChange(found, own, last) : null
  return change && { ...change, previous: null }
}
