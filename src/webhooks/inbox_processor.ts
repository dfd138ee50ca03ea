import { setImmediate as nextTurn } from 'node:timers/promises'
import type { Logger } from '@adonisjs/core/logger'
import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { isDeadlineError, withDeadline } from '../time_bounds.ts'
import { channels, traced } from '../tracing/channels.ts'
import debug from '../debug.ts'
import { eventEnvelopeSchema, parseJsonBytes, type EventEnvelope } from '../schemas/events.ts'
import type { InboxRow, InboxStore, InboxVerdict } from './inbox_store.ts'
import { PermanentEventError } from './event_mapper.ts'
import { safeError } from '../safe_error.ts'

const UNPARSABLE = 'unparsable event body'
/** How one leased row ended: applied, dead-lettered, failed (retried later), taken by another. */
type RowOutcome = 'applied' | 'dead' | 'failed' | 'taken'
/** What the one-transaction path returns when the batch must go row by row instead. */
const GO_ROW_BY_ROW = Symbol('go row by row')

/** What applying a row did: why it was skipped (`note`), when its changes were told. */
export interface HandledRow {
  note?: string | null
  /** Settles once the changes the row carried were told, after COMMIT (see the ledger). */
  notified?: Promise<void>
}

/**
 * What applies the stored events: the ledger's (`LedgerEventApplier`), built once and given
 * to the processor. Each method runs inside the transaction that marks its rows, so a row is
 * done exactly when its event's effects commit; throwing rolls both back.
 */
export interface InboxApplier {
  /**
   * Applies one stored event in the transaction that marks its row. A string answered is
   * the note of a row kept but not applied. Throwing leaves the row to be retried (a
   * `PermanentEventError`: dead-lettered at once).
   */
  applyOne(
    envelope: EventEnvelope,
    row: InboxRow,
    trx: TransactionClientContract
  ): Promise<string | void | HandledRow>
  /**
   * Applies a batch in the transaction that claimed it, with a verdict per item. Throwing
   * rolls the whole batch back: its rows then go to `applyOne` one by one. Without it, rows
   * always go one by one.
   */
  applyBatch?(
    trx: TransactionClientContract,
    items: Array<{ envelope: EventEnvelope; row: InboxRow }>
  ): Promise<{ verdicts: InboxVerdict[]; notified?: Promise<void> }>
}

/** The inbox, the applier of its events, and the retry and batch bounds. */
export interface InboxProcessorOptions {
  store: Pick<
    InboxStore,
    | 'claimDue'
    | 'markFailed'
    | 'processClaimed'
    | 'renewLeases'
    | 'processDueInTransaction'
    | 'claimsInTransaction'
  >
  applier: InboxApplier
  logger: Logger
  /** Attempts before a row is dead-lettered. */
  maxAttempts?: number
  /** First backoff; doubles per attempt. */
  baseBackoffMs?: number
  /**
   * How long a row claimed on the row-by-row path is held before another process may take
   * it over (renewed every third of it while the batch runs): about how long a killed
   * process's rows wait. Default 15 s (`webhook.processingLeaseMs`).
   */
  leaseMs?: number
  batchSize?: number
  /**
   * Bound of every step of the row-by-row path (a claim, an apply, a mark); the batch
   * path's transaction is bounded by the store. A stalled step fails the drain, which is
   * logged, and the next kick starts afresh; 0 waits forever.
   */
  stepTimeoutMs?: number
  /**
   * What one slice of an inline drain (`kick()`, in the process that acknowledges) may take:
   * the rows of the next batch are sized from the pace of the last one so that its
   * transaction lasts about this long, and the drain yields to the event loop between
   * batches, so an acknowledgement waits for one short slice at most, never for a backlog.
   * Default 5 ms; 0 drains whole batches (`batchSize`). The worker's drains are not sliced.
   * A slice also waits, up to four times `sliceMs`, while acknowledgements of this process
   * are in flight (`acknowledging()`), so processing takes the time the acknowledgements
   * leave, and always some.
   */
  sliceMs?: number
  now?: () => Date
}

/** The rows of an inline drain's first slice, before its pace is known. */
const FIRST_SLICE_ROWS = 8

/**
 * Drains the inbox after acknowledgements: claims due rows, parses them, hands them to
 * the applier. Failures back off exponentially and end in the dead-letter state, where
 * `payouts:replay` finds them. Unknown event types are kept and marked processed.
 */
export class InboxProcessor {
  #running?: Promise<number>
  #again = false
  /** A kick scheduled by `kickAfterPoll`, until it runs. */
  #scheduled?: Promise<void>
  /** The rows of the next slice of an inline drain (see `sliceMs`). */
  #sliceRows: number
  /**
   * How long the last batch held the database: on the one-transaction path, from its rows
   * being claimed to COMMIT (the claim's own statements left out), not the wait for a
   * connection or for SQLite's write lock before the claim (counted, a batch that waited
   * for the web process's inserts sized the next to a row, and the worker drained 60-100
   * rows/s); row by row, the whole batch. Never the telling of its changes after COMMIT (an
   * app's listener awaiting its own I/O holds nothing).
   */
  #heldMs = 0
  /** How long the last batch took, its waits for a connection and for the lock included. */
  #spanMs = 0
  /** Acknowledgements in flight in this process, and the slices waiting for them to end. */
  #acknowledging = 0
  /** Acknowledgements begun since an inline drain last sized its next slice. */
  #arrived = 0
  #waitingForAcks: Array<() => void> = []
  /** The time budget of each batch of the drains that are not sliced (see `budgetBatches`). */
  #batchBudgetMs = 0
  #options: Required<Omit<InboxProcessorOptions, 'now'>> & { now: () => Date }

  constructor(options: InboxProcessorOptions) {
    this.#options = {
      maxAttempts: 8,
      baseBackoffMs: 1000,
      leaseMs: 15_000,
      batchSize: 100,
      stepTimeoutMs: 0,
      sliceMs: 5,
      now: () => new Date(),
      ...options,
    }
    this.#sliceRows = Math.min(FIRST_SLICE_ROWS, this.#options.batchSize)
  }

  /**
   * Sizes the batches of the drains that are not sliced (the worker's) from the pace of the
   * last one so that each transaction lasts about `ms`, as an inline drain's slices are sized
   * to `sliceMs`; the first such batch is whole (`batchSize`), its pace sizes the next. The
   * worker sets it on SQLite, where the web process's insert waits while a batch holds the
   * file's write lock (see `PayoutsWorker`); 0 (the default) takes whole batches.
   */
  budgetBatches(ms: number): void {
    this.#batchBudgetMs = ms
    this.#sliceRows = this.#options.batchSize
  }

  /** How long the last batch held the database (its transaction), ms. */
  get lastBatchMs(): number {
    return this.#heldMs
  }

  /**
   * How long the last batch took, ms: its hold (`lastBatchMs`) and, before it, its waits for
   * a connection and for SQLite's write lock. The worker leaves the lock free after a batch
   * for about this long (`sqliteHandoverMs`): a writer waiting in SQLite's busy handler may
   * have waited that long, and polls about as rarely.
   */
  get lastBatchSpanMs(): number {
    return this.#spanMs
  }

  /** Starts a drain unless one is running; a kick during a drain runs one more pass. */
  kick(): void {
    if (this.#running) {
      this.#again = true
      return
    }
    this.#running = this.drain({ sliced: this.#options.sliceMs > 0 }).finally(() => {
      this.#running = undefined
      if (this.#again) {
        this.#again = false
        this.kick()
      }
    })
    this.#running.catch((error) =>
      this.#options.logger.error({ err: safeError(error) }, 'payouts inbox drain failed')
    )
  }

  /**
   * Marks an acknowledgement in flight (the webhook route, from a request's arrival to its
   * answer) until the function returned is called: an inline drain takes no slice
   * meanwhile, for at most four times `sliceMs`.
   */
  acknowledging(): () => void {
    this.#acknowledging++
    this.#arrived++
    let ended = false
    return () => {
      if (ended) return
      ended = true
      if (--this.#acknowledging > 0) return
      const waiting = this.#waitingForAcks
      this.#waitingForAcks = []
      for (const resume of waiting) resume()
    }
  }

  /** Resolves once no acknowledgement is in flight, or after `maxMs`. */
  #acknowledgementsAnswered(maxMs: number): Promise<void> | undefined {
    if (this.#acknowledging === 0) return undefined
    return new Promise((resolve) => {
      const resume = () => {
        clearTimeout(timer)
        resolve()
      }
      const timer = setTimeout(() => {
        this.#waitingForAcks = this.#waitingForAcks.filter((waiting) => waiting !== resume)
        resolve()
      }, maxMs)
      this.#waitingForAcks.push(resume)
    })
  }

  /**
   * `kick()` once the event loop has polled its sockets once more (the route, after its
   * answer is written: the requests that arrived meanwhile are read first). `idle()` waits
   * for it, so a caller that drains after an answer never runs beside the drain it starts.
   */
  kickAfterPoll(): void {
    if (this.#scheduled) return
    this.#scheduled = new Promise<void>((resolve) =>
      // An immediate set from an immediate runs in the next turn's check phase, after its poll.
      setImmediate(() =>
        setImmediate(() => {
          this.#scheduled = undefined
          this.kick()
          resolve()
        })
      )
    )
  }

  /** Waits for the drain in progress and a kick scheduled, if any (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.#running || this.#scheduled) {
      await this.#scheduled
      await this.#running?.catch(() => {})
    }
  }

  /**
   * Processes every due row, or at most `maxBatches` batches (the worker takes one at a
   * time, so a stop waits for one batch only); returns how many were handled. `sliced`
   * (the inline drains of `kick()`): batches sized to `sliceMs`, with a turn of the event
   * loop between them.
   */
  async drain(options: { maxBatches?: number; sliced?: boolean } = {}): Promise<number> {
    let handled = 0
    for (let batches = 0; batches < (options.maxBatches ?? Infinity); batches++) {
      // The acknowledgements that arrived meanwhile go first.
      if (options.sliced) {
        if (batches > 0) await nextTurn()
        await this.#acknowledgementsAnswered(this.#options.sliceMs * 4)
      }
      const budgetMs = options.sliced ? this.#options.sliceMs : this.#batchBudgetMs
      const size = budgetMs > 0 ? this.#sliceRows : this.#options.batchSize
      const rows = await this.#batch(size)
      if (rows === 0) return handled
      handled += rows
      // A slice that took fewer rows than it asked for left none due: the backlog is gone.
      const behind = options.sliced && rows >= size
      // The acknowledgements begun since the last slice was sized: while this one waited and ran.
      const arrived = this.#arrived
      this.#arrived = 0
      if (budgetMs > 0) this.#paceSlices(rows, this.#heldMs, budgetMs, behind ? arrived : null)
    }
    return handled
  }

  /** One batch of at most `size` rows; the rows handled (0: nothing was due). */
  async #batch(size: number): Promise<number> {
    const inTransaction = await this.#drainInTransaction(size)
    if (inTransaction !== GO_ROW_BY_ROW) return inTransaction
    // Not available here, or the batch failed and rolled back: one batch with leases,
    // row by row, each row with its own retries.
    return this.#drainWithLeases(size)
  }

  /**
   * Sizes the next slice from this one's pace: the rows that fit in `budgetMs` (`sliceMs`,
   * or the worker's budget) at it, at most twice as many as this one and at least one,
   * never more than `batchSize`. An inline drain with a backlog (`arrived`: the
   * acknowledgements this process began since the last slice was sized; null when the last
   * slice left no row due) also keeps up with the arrivals: a slice has a cost
   * of its own whatever its rows (its claim, its commit), and on SQLite one row alone takes
   * about the 5 ms, so sized to the budget alone slices of one row drained 170 rows/s while
   * 500 arrived. The next slice takes at least a quarter more rows than arrived meanwhile,
   * so the backlog shrinks; with no arrival it takes what fits in four times the budget,
   * and never fewer rows than this one (a backlog with nobody waiting on an answer).
   */
  #paceSlices(rows: number, ms: number, budgetMs: number, arrived: number | null = null) {
    const { batchSize } = this.#options
    const pace = rows / Math.max(ms, 0.05)
    const fits = Math.floor(pace * budgetMs)
    let next = Math.min(fits, rows * 2)
    if (arrived !== null) {
      next =
        arrived === 0
          ? Math.max(rows, Math.min(Math.floor(pace * budgetMs * 4), rows * 2))
          : Math.max(next, Math.ceil(arrived * 1.25))
    }
    this.#sliceRows = Math.max(1, Math.min(next, batchSize))
  }

  /**
   * One batch claimed, applied and marked in a single transaction: one commit for the
   * lot, and rows are done exactly when their effects are. Returns the rows handled (0
   * when nothing is due), or `GO_ROW_BY_ROW` when this path is unavailable on the
   * database or the batch rolled back.
   */
  async #drainInTransaction(size: number): Promise<number | typeof GO_ROW_BY_ROW> {
    const { store, applier, logger } = this.#options
    if (!applier.applyBatch || !store.claimsInTransaction) return GO_ROW_BY_ROW
    let notified: Promise<void> | undefined
    let outcome: { rows: InboxRow[]; verdicts: InboxVerdict[] } | null
    const calledAt = performance.now()
    let startedAt = calledAt
    try {
      outcome = await store.processDueInTransaction(this.#options.now(), size, (trx, rows) => {
        // The rows are claimed: the transaction holds the database from here. The time it
        // waited for it (the pool, SQLite's write lock) is not the batch's own.
        startedAt = performance.now()
        // Traced once rows are claimed: a poll that finds nothing makes no trace.
        return traced(
          channels.inboxBatch,
          () => ({
            path: 'transaction' as const,
            deliveryIds: rows.map((row) => row.deliveryId),
            traceParents: rows.map((row) => row.traceParent),
          }),
          async (trace) => {
            const verdicts: InboxVerdict[] = []
            const parsed: Array<{ envelope: EventEnvelope; row: InboxRow; index: number }> = []
            for (const [index, row] of rows.entries()) {
              const envelope = this.#parseEnvelope(row)
              if (envelope) parsed.push({ envelope, row, index })
              else verdicts[index] = { state: 'dead', note: UNPARSABLE }
            }
            const handled = await applier.applyBatch!(trx, parsed)
            parsed.forEach((item, position) => (verdicts[item.index] = handled.verdicts[position]))
            notified = handled.notified
            if (trace) {
              trace.rows = rows.length
              trace.dead = verdicts.filter((verdict) => verdict.state === 'dead').length
            }
            return verdicts
          }
        )
      })
    } catch (error) {
      // A stalled database fails the drain; row by row would only stall again.
      if (isDeadlineError(error)) throw error
      logger.debug({ err: safeError(error).message }, 'payouts inbox: batch goes row by row')
      return GO_ROW_BY_ROW
    }
    this.#heldMs = performance.now() - startedAt
    this.#spanMs = performance.now() - calledAt
    if (!outcome) return 0
    debug('inbox: %d deliveries processed in one transaction', outcome.rows.length)
    for (const [index, verdict] of outcome.verdicts.entries()) {
      if (verdict.state === 'dead') {
        logger.warn(
          { deliveryId: outcome.rows[index].deliveryId, reason: verdict.note },
          'payouts inbox: event kept as a dead letter'
        )
      }
    }
    // Told after the COMMIT (never rejects: a listener that fails leaves its change to renotify).
    await notified
    return outcome.rows.length
  }

  /**
   * One batch claimed with a lease, then processed row by row, each row marked in the
   * transaction that applies it; the lease of the rows still waiting is renewed every third
   * of it. Returns the rows handled.
   */
  async #drainWithLeases(size: number): Promise<number> {
    const { store, leaseMs, now } = this.#options
    const startedAt = performance.now()
    const rows = await this.#step(store.claimDue(now(), size, leaseMs), 'inbox claim')
    if (rows.length === 0) return 0
    // Row by row each row has its own transaction and telling: the whole batch is counted.
    const handled = await traced(
      channels.inboxBatch,
      () => ({
        path: 'row_by_row' as const,
        deliveryIds: rows.map((row) => row.deliveryId),
        traceParents: rows.map((row) => row.traceParent),
      }),
      async (trace) => {
        const outcomes = await this.#processLeased(rows)
        if (trace) {
          trace.rows = rows.length
          trace.dead = outcomes.filter((outcome) => outcome === 'dead').length
          trace.failed = outcomes.filter((outcome) => outcome === 'failed').length
        }
        return rows.length
      }
    )
    this.#heldMs = performance.now() - startedAt
    this.#spanMs = this.#heldMs
    return handled
  }

  /** The claimed rows one by one, their lease renewed every third of it meanwhile. */
  async #processLeased(rows: InboxRow[]): Promise<RowOutcome[]> {
    const outcomes: RowOutcome[] = []
    const { store, leaseMs, now } = this.#options
    const waiting = new Set(rows)
    const renewal = setInterval(
      () =>
        void store
          .renewLeases([...waiting], new Date(now().getTime() + leaseMs))
          .catch((error) => debug('inbox: lease renewal failed: %s', error.message)),
      Math.max(1, Math.floor(leaseMs / 3))
    )
    renewal.unref()
    try {
      for (const row of rows) {
        const envelope = await this.#parse(row)
        outcomes.push(envelope ? await this.#process(envelope, row) : 'dead')
        waiting.delete(row)
      }
    } finally {
      clearInterval(renewal)
    }
    return outcomes
  }

  #step<T>(work: Promise<T>, what: string): Promise<T> {
    return withDeadline(work, this.#options.stepTimeoutMs, what)
  }

  #parseEnvelope(row: InboxRow): EventEnvelope | null {
    try {
      return eventEnvelopeSchema.parse(parseJsonBytes(row.rawBody))
    } catch {
      return null
    }
  }

  /** The row's envelope, or null when it is unusable (then kept as a dead letter). */
  async #parse(row: InboxRow): Promise<EventEnvelope | null> {
    const envelope = this.#parseEnvelope(row)
    if (envelope) return envelope
    // Authentic (it was verified) but unusable: keep it, never retry it.
    this.#options.logger.warn(
      { deliveryId: row.deliveryId },
      'payouts inbox: unparsable event kept'
    )
    await this.#step(this.#options.store.markFailed(row.id, UNPARSABLE, null, row), 'inbox mark')
    return null
  }

  /**
   * Applies one claimed row in the transaction that marks it, then waits for its changes to
   * be told after COMMIT; a failure is recorded with its backoff (or as a dead letter).
   */
  async #process(envelope: EventEnvelope, row: InboxRow): Promise<RowOutcome> {
    const { store, logger, applier } = this.#options
    let notified: Promise<void> | undefined
    try {
      const done = await this.#step(
        store.processClaimed(row, this.#options.now(), async (trx) => {
          const handled = await applier.applyOne(envelope, row, trx)
          const { note = null, notified: told } =
            typeof handled === 'string' ? { note: handled } : (handled ?? {})
          return { note, value: told }
        }),
        'inbox event'
      )
      if (!done) {
        debug('inbox: delivery %s was taken by another process', row.deliveryId)
        return 'taken'
      }
      notified = done.value
      debug('inbox: delivery %s processed', row.deliveryId)
    } catch (error) {
      const message = safeError(error).message
      const retryAt =
        error instanceof PermanentEventError || row.attempts >= this.#options.maxAttempts
          ? null
          : new Date(
              this.#options.now().getTime() + this.#options.baseBackoffMs * 2 ** (row.attempts - 1)
            )
      logger.warn(
        { deliveryId: row.deliveryId, attempts: row.attempts, dead: retryAt === null },
        'payouts inbox: event processing failed'
      )
      await this.#step(store.markFailed(row.id, message, retryAt, row), 'inbox mark')
      return retryAt === null ? 'dead' : 'failed'
    }
    // Told after the COMMIT (never rejects: a listener that fails leaves its change to renotify).
    await notified
    return 'applied'
  }
}
