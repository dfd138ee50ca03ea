import type { Logger } from '@adonisjs/core/logger'
import { withDeadline } from '../time_bounds.ts'
import { WORKER_BEAT_EVERY_MS } from '../health/heartbeats.ts'
import type { PayoutsService } from './payouts_service.ts'
import { safeError } from '../safe_error.ts'

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
 */
export class PayoutsWorker {
  #options: PayoutsWorkerOptions
  #stopping = false
  #stopped?: Promise<boolean>
  #loop?: Promise<void>
  #wake?: () => void
  /** Set when something was stored while the loop was busy: the next pause is skipped. */
  #woken = false

  constructor(options: PayoutsWorkerOptions) {
    this.#options = options
  }

  /** Starts the jobs (when enabled), the stream (when configured) and the inbox loop. */
  async start() {
    const { service, logger } = this.#options
    const { config } = service
    // The parts built now (no query): an app without a ledger fails here, not in its loop.
    await service.drainInbox({ maxBatches: 0 })
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
      try {
        processed = await service.drainInbox({ maxBatches: 1 })
        renotified = await service.renotify()
      } catch (error) {
        logger.error({ err: safeError(error) }, 'payouts worker batch failed')
      }
      // Health tells a dead worker by this beat (bounded, never throws).
      await service.heartbeat('worker', { atMostEveryMs: WORKER_BEAT_EVERY_MS })
      if (processed > 0 || renotified > 0) {
        logger.info({ processed, renotified }, 'payouts worker batch')
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
