import type { Logger } from '@adonisjs/core/logger'
import type { Database } from '@adonisjs/lucid/database'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { CommitListener, isPostgres } from '../database/change_notices.ts'
import { withStatementTimeout } from '../database/deadline.ts'
import debug from '../debug.ts'
import { replayChange } from '../ledger/change_replay.ts'
import { toChangedEvent, type PayoutChange } from '../ledger/vocabulary.ts'
import { Payout, PayoutEvent } from '../models/main.ts'
import type { PayoutsNotifier } from './notifier.ts'

/** Log rows read per statement; a full read is followed by the next one at once. */
const BATCH = 500
/** Gaps read back per statement (the lowest first). */
const GAPS_PER_READ = 50
/** The newest ids read at start: a transaction still open then may commit one of their gaps. */
const START_WINDOW = 1000
/** Payouts remembered as broadcast without an owner, for the owner's late arrival. */
const OWNERLESS_KEPT = 10_000
/** The poll's interval at the least while LISTEN is up (PostgreSQL): a safety net then. */
const LISTENING_POLL_MS = 1000

/** What the relay needs: the database, where to broadcast, its interval and bounds. */
export interface BroadcastRelayOptions {
  db: Database
  connection?: string
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
   * (`ledger.transactionTimeoutMs`) and a margin. It also bounds each statement.
   */
  gapWaitMs: number
}

/** Ids not seen yet below the frontier: a transaction that took them may still commit. */
interface Gap {
  from: number
  to: number
  since: number
}

type LogRow = Pick<PayoutEvent, 'id' | 'payoutUuid' | 'applied' | 'mergedFrom'>

/**
 * Follows the ledger's applied changes (`payout_events`, in commit order) and broadcasts
 * each on the plugin's Transmit channels of this process, whichever process applied it: the
 * web processes of a deployment hear what the worker applies without a Transmit transport.
 *
 * It reads `id > frontier ORDER BY id LIMIT n` every `intervalMs` (a primary-key range, one
 * statement when idle). On PostgreSQL and MySQL an id can commit after a higher one: an id
 * missing below the frontier is a gap, read back on each tick until it appears or
 * `gapWaitMs` has passed (its transaction rolled back), so no change is skipped and none is
 * sent twice. It starts at the newest change: what was applied before it started is not sent.
 * On PostgreSQL, with a `channel`, a NOTIFY after each commit wakes it (`CommitListener`).
 */
export class BroadcastRelay {
  /** Statements the relays of this process ran (diagnostics: the bench's relay cost). */
  static statements = 0
  #options: BroadcastRelayOptions
  #frontier: number | null = null
  #gaps: Gap[] = []
  /** Payouts whose last change went out without an owner (insertion order, bounded). */
  #ownerless = new Set<string>()
  #timer?: NodeJS.Timeout
  #tick?: Promise<void>
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

  /** Starts following the log from its newest change. */
  start() {
    this.#stopped = false
    if (!this.#timer && !this.#tick) this.#schedule(0)
    this.#listener?.start()
  }

  /** Stops the timer and the LISTEN connection; the read in hand ends first. */
  async stop() {
    this.#stopped = true
    clearTimeout(this.#timer)
    this.#timer = undefined
    await Promise.all([this.#tick, this.#listener?.close()])
  }

  /** One read now (tests); answers how many log rows it went through. */
  async readOnce(): Promise<number> {
    await this.#tick
    return this.#read()
  }

  /** The ids it still waits for, as ranges (tests, diagnostics). */
  pendingGaps(): Array<[number, number]> {
    return this.#gaps.map((gap) => [gap.from, gap.to])
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
      read = await this.#read()
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
    return withStatementTimeout(query, this.#options.gapWaitMs)
  }

  /** Reads what committed since the last read, and broadcasts the changes among it. */
  async #read(): Promise<number> {
    if (this.#frontier === null) return this.#begin()
    const now = Date.now()
    const expired = this.#gaps.filter((gap) => now - gap.since >= this.#options.gapWaitMs)
    if (expired.length > 0) debug('relay: %d gaps given up', expired.length)
    this.#gaps = this.#gaps.filter((gap) => now - gap.since < this.#options.gapWaitMs)

    const client = this.#client()
    const fresh: LogRow[] = await this.#bounded(
      PayoutEvent.query({ client })
        .select('id', 'payout_uuid', 'applied', 'merged_from')
        .where('id', '>', this.#frontier)
        .orderBy('id', 'asc')
        .limit(BATCH)
    )
    const wanted = this.#gaps.slice(0, GAPS_PER_READ)
    const filled: LogRow[] =
      wanted.length === 0
        ? []
        : await this.#bounded(
            PayoutEvent.query({ client })
              .select('id', 'payout_uuid', 'applied', 'merged_from')
              .where((ids) => {
                for (const gap of wanted) ids.orWhereBetween('id', [gap.from, gap.to])
              })
              .orderBy('id', 'asc')
          )
    for (const row of filled) this.#fill(row.id)
    let expected = this.#frontier + 1
    for (const row of fresh) {
      if (row.id > expected) this.#gaps.push({ from: expected, to: row.id - 1, since: now })
      expected = row.id + 1
    }
    if (fresh.length > 0) this.#frontier = fresh[fresh.length - 1].id
    // Rows of one payout commit in id order (its row is locked): id order keeps its order.
    const rows = [...filled, ...fresh].sort((a, b) => a.id - b.id)
    await this.#broadcast(rows)
    return fresh.length
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

  /** An id that appeared: its gap shrinks or splits. */
  #fill(id: number) {
    const at = this.#gaps.findIndex((gap) => gap.from <= id && id <= gap.to)
    if (at === -1) return
    const gap = this.#gaps[at]
    const parts = [
      { ...gap, to: id - 1 },
      { ...gap, from: id + 1 },
    ].filter((part) => part.from <= part.to)
    this.#gaps.splice(at, 1, ...parts)
  }

  /**
   * The changes among `rows`, as the applying process would have broadcast them; and for a
   * payout that went out without an owner and has one now (the execute response came after
   * its `payout.created`), its position once on the owner's channel.
   */
  async #broadcast(rows: LogRow[]) {
    const relevant = rows.filter((row) => row.applied || this.#ownerless.has(row.payoutUuid))
    if (relevant.length === 0) return
    const { payouts, histories } = await this.#load(relevant)
    for (const row of relevant) {
      const found = payouts.get(row.payoutUuid)
      const history = histories.get(row.payoutUuid) ?? []
      if (!found) continue
      if (!row.applied) {
        // Announced once: a later row of the payout in this same read finds it gone.
        if (!found.ownerId || row.mergedFrom || !this.#ownerless.has(row.payoutUuid)) continue
        const change = latestBefore(found, history, row.id)
        this.#ownerless.delete(row.payoutUuid)
        if (change) this.#options.notifier.broadcast(toChangedEvent(change), { ownerOnly: true })
        continue
      }
      const change = replayChange(found, history, row)
      if (!change) continue
      if (!row.mergedFrom) this.#remember(row.payoutUuid, change.payout.ownerId)
      this.#options.notifier.broadcast(toChangedEvent(change))
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

  /** The payouts of `rows` as they are now, and their logs up to the last of `rows`. */
  async #load(rows: LogRow[]) {
    const client = this.#client()
    const uuids = [...new Set(rows.map((row) => row.payoutUuid))]
    const last = rows[rows.length - 1].id
    const payouts = new Map<string, Payout>()
    const histories = new Map<string, PayoutEvent[]>()
    for (let start = 0; start < uuids.length; start += BATCH) {
      const chunk = uuids.slice(start, start + BATCH)
      const [found, events] = await Promise.all([
        this.#bounded(Payout.query({ client }).whereIn('payout_uuid', chunk)),
        this.#bounded(
          PayoutEvent.query({ client })
            .whereIn('payout_uuid', chunk)
            .where('id', '<=', last)
            .orderBy('id', 'asc')
        ),
      ])
      for (const payout of found) payouts.set(payout.payoutUuid, payout)
      for (const event of events) {
        const list = histories.get(event.payoutUuid) ?? []
        list.push(event)
        histories.set(event.payoutUuid, list)
      }
    }
    return { payouts, histories }
  }
}

/**
 * The position a payout held when its owner arrived (the log row `beforeId`): its last
 * applied change before it, as the notifier's owner announcement carries it.
 */
function latestBefore(
  found: Payout,
  history: PayoutEvent[],
  beforeId: number
): PayoutChange<Payout> | null {
  const own = history.filter((event) => !event.mergedFrom && event.id < beforeId)
  const last = own.filter((event) => event.applied).at(-1)
  const change = last ? replayChange(found, own, last) : null
  return change && { ...change, previous: null }
}
