import type { Logger } from '@adonisjs/core/logger'
import type { Database } from '@adonisjs/lucid/database'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { CommitListener, isPostgres } from '../database/change_notices.ts'
import { withDeadline } from '../time_bounds.ts'
import { isSqlite } from '../database/dialects.ts'
import { withStatementTimeout } from '../database/deadline.ts'
import debug from '../debug.ts'
import { replayChange } from '../ledger/change_replay.ts'
import { toChangedEvent, type PayoutChange } from '../ledger/vocabulary.ts'
import type { Payout } from '../models/main.ts'
import type { PayoutsNotifier } from './notifier.ts'
import { RelayCursor } from './relay_cursor.ts'
import {
  BATCH,
  positionKey,
  RelayReads,
  type HistoryRow,
  type Loaded,
  type Relayed,
} from './relay_reads.ts'
import { safeError } from '../safe_error.ts'

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
/** The log rows of a read before its pace is known, and the fewest a read takes. */
const FIRST_READ_ROWS = 32
const MIN_READ_ROWS = 16

/** What the relay needs: the database, its account, where to broadcast, its interval, bounds. */
export interface BroadcastRelayOptions {
  db: Database
  connection?: string
  /**
   * The account whose changes it broadcasts (`config.account`, default `main`): each
   * account's service runs a relay of its own, and hears nothing of the others.
   */
  account?: string
  /** Where its changes go: to this process's subscribers only (`local`), never to a transport. */
  notifier: Pick<PayoutsNotifier, 'broadcast'>
  logger: Logger
  /** How often it reads the log (`transmit.relayIntervalMs`). */
  intervalMs: number
  /**
   * The channel the committing processes NOTIFY (`changesChannel`): on PostgreSQL the relay
   * LISTENs on it and reads at once on a notice; its poll goes on, every second at the least.
   * The accounts share it: a notice wakes every account's relay, each reads its own changes.
   */
  channel?: string
  /**
   * How long a missing id is waited for: the longest a transaction may stay open
   * (`ledger.transactionTimeoutMs`) and a margin. A gap is given up only once a read that
   * started after it still missed it.
   */
  gapWaitMs: number
  /**
   * About how long one read may take, from its first statement to its last broadcast: the
   * rows of the next read are sized from the pace of the last one, and a backlog is read in
   * such reads, the event loop free between them. Default 5 ms on SQLite, whose statements
   * run on the event loop (better-sqlite3 is synchronous): a read of 500 changes held the
   * web process's event loop, and its acknowledgements, for 40-70 ms. 0 (the default
   * elsewhere) reads 500 at a time: there a read waits for its statements with the event
   * loop free, and sized by its time it shrank under load to a few rows per read, three
   * statements each.
   */
  readSliceMs?: number
  /** Tests: runs after the log was read, before the payouts of its changes are. */
  afterRead?: () => Promise<void>
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
 * It broadcasts the changes of its account only (`account`); its cursor moves over every
 * account's ids, so another account's commits leave no gap to wait for.
 */
export class BroadcastRelay {
  /** Statements the relays of this process ran (diagnostics: the bench's relay cost). */
  static statements = 0
  #options: BroadcastRelayOptions
  /** The frontier and the gaps below it (moved only once a read was all read). */
  #cursor: RelayCursor
  #reads: RelayReads
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
  /** The log rows the next read takes (see `readSliceMs`). */
  #readRows: number
  #readSliceMs: number
  /** Whether the last read took as many rows as it asked for: the next one follows at once. */
  #full = false

  constructor(options: BroadcastRelayOptions) {
    this.#options = options
    this.#cursor = new RelayCursor(options.gapWaitMs)
    this.#reads = new RelayReads({
      account: options.account,
      bounded: (query) => this.#bounded(query),
      known: (key) => this.#relayed.get(key),
    })
    this.#readSliceMs = options.readSliceMs ?? (isSqlite(this.#client()) ? 5 : 0)
    this.#readRows = this.#readSliceMs > 0 ? FIRST_READ_ROWS : BATCH
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
    return this.#cursor.started
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
    return this.#cursor.pendingGaps()
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
      if (!this.#failing)
        this.#options.logger.warn({ err: safeError(error) }, 'payouts relay read failed')
      this.#failing = true
    }
    if (this.#stopped) return
    const { intervalMs } = this.#options
    const poll = this.listening ? Math.max(intervalMs, LISTENING_POLL_MS) : intervalMs
    this.#schedule(read > 0 && this.#full ? 0 : poll)
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
    const cursor = this.#cursor
    if (cursor.frontier === null) return this.#begin()
    const client = this.#client()
    const startedAt = performance.now()
    const limit = this.#readRows
    const fresh = await this.#reads.after(client, cursor.frontier, limit)
    const seenAt = Date.now()
    // The gaps as they were before this read: each is read back below, from `gapsReadAt` on.
    const gapsReadAt = Date.now()
    const filled = await this.#reads.inGaps(client, cursor.gaps)
    const step = cursor.step({
      fresh: fresh.map((row) => row.id),
      seenAt,
      found: filled.map((row) => row.id),
      startedAt: gapsReadAt,
    })
    if (step.expired.length > 0) debug('relay: %d gaps given up', step.expired.length)
    // Rows of one payout commit in id order (its row is locked): id order keeps its order.
    const rows = [...filled, ...fresh].sort((a, b) => a.id - b.id)
    const relevant = rows.filter(
      (row) => this.#reads.owns(row) && (row.applied || this.#ownerless.has(row.payoutUuid))
    )
    await this.#options.afterRead?.()
    const loaded = relevant.length === 0 ? null : await this.#reads.load(this.#client(), relevant)
    cursor.commit(step)
    if (loaded && !this.#stopped) this.#broadcast(loaded)
    this.#full = fresh.length >= limit
    // A read that found nothing says nothing of the pace of a backlog.
    if (fresh.length > 0) {
      this.#pace(fresh.length, relevant.length, limit, performance.now() - startedAt)
    }
    return fresh.length
  }

  /**
   * Sizes the next read from this one (see `readSliceMs`): fewer rows when it took longer than
   * the slice, at most twice as many when a full read took less, between `MIN_READ_ROWS` and
   * `BATCH`. The time is the read's wall time, which on SQLite is time the event loop is
   * held (see `readSliceMs`). Only a read whose rows were mostly changes to send (`sent`:
   * loaded and broadcast) grows the next: a stretch of rows that cost little (another
   * account's, observations that changed nothing) would grow it to 500, and the changes
   * after that stretch would be read 500 at once.
   */
  #pace(rows: number, sent: number, limit: number, ms: number) {
    const sliceMs = this.#readSliceMs
    if (sliceMs <= 0) return
    if (ms > sliceMs) {
      this.#readRows = Math.max(MIN_READ_ROWS, Math.floor((rows * sliceMs) / ms))
    } else if (rows >= limit && sent * 2 >= limit) {
      this.#readRows = Math.min(BATCH, limit * 2)
    }
  }

  /** The frontier at the newest change, and the gaps among the newest ids still open. */
  async #begin(): Promise<number> {
    const ids = await this.#reads.newest(this.#client())
    const frontier = this.#cursor.begin(ids, Date.now())
    debug('relay: from change %d', frontier)
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
