import { setTimeout as sleep } from 'node:timers/promises'
import type { Logger } from '@adonisjs/core/logger'
import { withDeadline } from '../time_bounds.ts'
import { WORKER_BEAT_EVERY_MS } from '../health/heartbeats.ts'
import { PayoutsService, partsOf } from './payouts_service.ts'
import type { InboxProcessor } from '../webhooks/inbox_processor.ts'
import { isSqlite, sqliteHandoverMs } from '../database/dialects.ts'
import { safeError } from '../safe_error.ts'

/**
 * On SQLite, about how long each of the worker's batches holds the file's write lock (see
 * `PayoutsWorker`). Each batch is followed by a pause about as long, so the drain runs at
 * most half its pace: at 20 ms a batch is 25-30 rows on a quiet machine (0.4-0.7 ms a row,
 * a few ms a transaction), about 600 rows/s, above a sustained 500 deliveries/s; an
 * acknowledgement behind it waits at most about 45 ms. 10 ms drained 375-800 rows/s under
 * the bench's 500/s, and 6 ms 354-570: too close (docs/benchmarks.md, 2026-11-28).
 */
const SQLITE_BATCH_MS = 20

/** What the worker drives: the service of the app it runs in, through its public methods. */
export type WorkerService = Pick<
  PayoutsService,
  'config' | 'drainInbox' | 'renotify' | 'heartbeat' | 'startJobs' | 'startStream' | 'close'
>

/** The service, where to log, and the worker's bounds. */
export interface PayoutsWorkerOptions {
  service: WorkerService
  logger: Logger
  /** How long an empty inbox is left before it is read again. Default: webhook.retryIntervalMs, or 1 s. */
  pollIntervalMs?: number
  /**
   * How long a stop may take (the batch in hand, the jobs running, the stream): past it,
   * `stop` gives up and reports it. Default: ledger.transactionTimeoutMs + 10 s.
   */
  stopTimeoutMs?: number
}

/**
 * The process `node ace payouts:work` runs: a loop that processes the inbox one batch at a
 * time and fires the events a killed process left unfired, the jobs on their intervals and
 * the WebSocket source when configured. Several workers may share one database: each batch
 * is claimed by one of them (on PostgreSQL with `SKIP LOCKED`), each job run by one of them.
 *
 * On SQLite the web process's inserts wait for the file's one write lock, synchronously
 * (better-sqlite3), in SQLite's busy handler, which polls instead of queueing: a worker that
 * began its next batch at once would keep the lock, batch after batch, while a backlog lasts
 * (acknowledgements waited 0.2-1 s). There the worker's batches are sized to last about
 * `SQLITE_BATCH_MS`, and after each one that wrote the worker leaves the lock free long
 * enough for a waiter's next poll (`sqliteHandoverMs`: the batch's time plus a few ms, at
 * most about 100 ms). PostgreSQL and MySQL lock rows: there batches are whole and back to back.
 */
export class PayoutsWorker {
  #options: PayoutsWorkerOptions
  #stopping = false
  #stopped?: Promise<boolean>
  #loop?: Promise<void>
  #wake?: () => void
  /** Set when something was stored while the loop was busy: the next pause is skipped. */
  #woken = false
  /** On SQLite: the processor, whose batches are then timed (see the class). */
  #sqlite?: InboxProcessor

  constructor(options: PayoutsWorkerOptions) {
    this.#options = options
  }

  /** Starts the jobs (when enabled), the stream (when configured) and the inbox loop. */
  async start() {
    const { service, logger } = this.#options
    const { config } = service
    // The parts built now (no query): an app without a ledger fails here, not in its loop.
    await service.drainInbox({ maxBatches: 0 })
    if (service instanceof PayoutsService) {
      const { db, processor } = await partsOf(service)
      if (isSqlite(db.connection(config.ledger.connection))) {
        processor.budgetBatches(SQLITE_BATCH_MS)
        this.#sqlite = processor
      }
    }
    if (config.jobs.enabled) await service.startJobs()
    // A stream message wakes the loop, which processes it in its next batch.
    if (config.events.sources !== 'webhooks') {
      await service.startStream({ onStored: () => this.#wakeUp() })
    }
    this.#loop = this.#run()
    logger.info(
      { jobs: config.jobs.enabled, stream: config.events.sources !== 'webhooks' },
      'payouts worker started'
    )
  }

  async #run() {
    const { logger, service } = this.#options
    while (!this.#stopping) {
      let processed = 0
      let renotified = 0
      /**
       * How long the writes of this round took, their waits for the lock included (SQLite's
       * handover: a writer waiting in the busy handler may have waited that long).
       */
      let tookMs = 0
      try {
        processed = await service.drainInbox({ maxBatches: 1 })
        if (processed > 0) tookMs = this.#sqlite?.lastBatchSpanMs ?? 0
        const renotifying = performance.now()
        renotified = await service.renotify()
        if (renotified > 0) tookMs += performance.now() - renotifying
      } catch (error) {
        logger.error({ err: safeError(error) }, 'payouts worker batch failed')
      }
      // Health tells a dead worker by this beat (bounded, never throws).
      await service.heartbeat('worker', { atMostEveryMs: WORKER_BEAT_EVERY_MS })
      if (processed > 0 || renotified > 0) {
        logger.info({ processed, renotified }, 'payouts worker batch')
        // The web process's insert that waited meanwhile gets the lock (see the class).
        if (this.#sqlite && !this.#stopping) await sleep(sqliteHandoverMs(tookMs))
      }
      if (processed === 0 && !this.#stopping) await this.#pause()
    }
  }

  #wakeUp() {
    this.#woken = true
    this.#wake?.()
  }

  /** Waits one poll interval, or less when something was stored or the worker is stopped. */
  #pause() {
    const { service, pollIntervalMs } = this.#options
    const ms = pollIntervalMs ?? (service.config.webhook.retryIntervalMs || 1000)
    if (this.#woken) {
      this.#woken = false
      return Promise.resolve()
    }
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms)
      function done() {
        clearTimeout(timer)
        resolve()
      }
      this.#wake = () => {
        this.#wake = undefined
        this.#woken = false
        done()
      }
    })
  }

  /**
   * Finishes the batch in hand, then stops the jobs (their locks released with their
   * store), closes the stream and the client. Resolves false when that took longer than
   * the stop bound (what was left is rolled back by the database, and done again later).
   * Called again, answers the first call's outcome.
   */
  stop(): Promise<boolean> {
    this.#stopped ??= this.#stop()
    return this.#stopped
  }

  async #stop(): Promise<boolean> {
    const { service, logger } = this.#options
    this.#stopping = true
    this.#wakeUp()
    const bound = this.#options.stopTimeoutMs ?? service.config.ledger.transactionTimeoutMs + 10_000
    try {
      await withDeadline(
        (async () => {
          await this.#loop
          await service.close()
        })(),
        bound,
        'payouts worker stop'
      )
      logger.info('payouts worker stopped')
      return true
    } catch (error) {
      logger.error({ err: safeError(error) }, 'payouts worker did not stop in time')
      return false
    }
  }
}
