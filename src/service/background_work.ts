import type { Logger } from '@adonisjs/core/logger'
import type { PayoutsConfig } from '../define_config.ts'
import debug from '../debug.ts'
import { missingKey } from '../errors.ts'
import type { HostLockServices, JobLocks } from '../jobs/locks.ts'
import { backlogChannel, channels, traced } from '../tracing/channels.ts'
import { safeError } from '../safe_error.ts'

/** How often the backlog is read while someone listens. */
const BACKLOG_SAMPLE_MS = 15_000
import type { JobScheduler } from '../jobs/scheduler.ts'
import type { PayoutsStream } from '../stream/payouts_stream.ts'
import type { HeartbeatName, Heartbeats } from '../health/heartbeats.ts'
import type { ServiceParts } from './wiring.ts'

/** What the background work needs from the service. */
export interface BackgroundWorkOptions {
  config: PayoutsConfig
  logger: Logger
  parts: () => Promise<ServiceParts>
  /** The host app's lock manager and Redis connections, when it has them. */
  host?: HostLockServices
  /** What each job runs: the service's own methods, so a job does what its command does. */
  jobs: Record<'reconcile' | 'escrow' | 'recover' | 'prune', () => Promise<unknown>>
  /** Runs after every stream reconnect: reads what may have changed while it was down. */
  catchUp: () => Promise<unknown>
}

/**
 * What runs in the web process without a request: the inbox worker's timer, the jobs'
 * scheduler and its locks, the WebSocket source. Each starts once; `stop` ends them all.
 */
export class BackgroundWork {
  /** When this process began: health counts a worker or job never seen from here. */
  readonly startedAt = Date.now()
  #options: BackgroundWorkOptions
  #inboxTimer?: NodeJS.Timeout
  #stream?: PayoutsStream
  #scheduler?: JobScheduler
  #jobLocks?: JobLocks
  #heartbeats?: Promise<Heartbeats>
  #sampledAt = 0

  constructor(options: BackgroundWorkOptions) {
    this.#options = options
  }

  /**
   * Records that `name` ran now (see `Heartbeats`): bounded by `health.timeoutMs`, never
   * rejects, a failure is logged. The jobs beat through the service's methods, so a run
   * from a command (cron) beats as the scheduler's does.
   */
  async beat(name: HeartbeatName, options?: { atMostEveryMs?: number }): Promise<void> {
    const { config, logger, parts } = this.#options
    try {
      this.#heartbeats ??= Promise.all([parts(), import('../health/heartbeats.ts')]).then(
        ([{ db }, { Heartbeats }]) => new Heartbeats({ db, config, logger })
      )
      const heartbeats = await this.#heartbeats
      await heartbeats.beat(name, options)
    } catch (error) {
      this.#heartbeats = undefined
      logger.error({ err: safeError(error), heartbeat: name }, 'payouts heartbeat not recorded')
    }
  }

  /**
   * Publishes the inbox's backlog on `svc-payouts.inbox.backlog` while someone listens (the
   * OpenTelemetry gauges), at most every 15 s; reads nothing otherwise. Never rejects.
   */
  async sampleBacklog(): Promise<void> {
    if (!backlogChannel.hasSubscribers || Date.now() - this.#sampledAt < BACKLOG_SAMPLE_MS) return
    this.#sampledAt = Date.now()
    const { config, logger, parts } = this.#options
    try {
      const [{ db }, { readBacklogNow }, { tableNames }] = await Promise.all([
        parts(),
        import('../webhooks/inbox_backlog.ts'),
        import('../database/schema.ts'),
      ])
      const sample = await readBacklogNow({
        client: () => db.connection(config.ledger.connection),
        table: tableNames(config.ledger.tablePrefix).webhookDeliveries,
        timeoutMs: config.health.timeoutMs,
        account: config.account,
      })
      backlogChannel.publish({ ...sample, account: config.account })
    } catch (error) {
      logger.debug({ err: safeError(error) }, 'payouts inbox backlog not read')
    }
  }

  /** Waits for `work`, then records its beat: a run that threw records none. */
  async recorded<T>(name: HeartbeatName, work: Promise<T>): Promise<T> {
    const result = await work
    await this.beat(name)
    return result
  }

  /**
   * Retries due inbox rows on an interval, and fires the events of changes a killed process
   * committed but never told (the outbox). 0 or less starts nothing.
   */
  startInboxWorker(intervalMs: number) {
    if (intervalMs <= 0 || this.#inboxTimer) return
    const { parts, logger } = this.#options
    this.#inboxTimer = setInterval(() => {
      void this.sampleBacklog()
      parts()
        .then(({ processor, ledger }) => {
          processor.kick()
          return ledger.renotify()
        })
        .catch((error) => logger.error({ err: safeError(error) }, 'payouts inbox worker failed'))
    }, intervalMs)
    this.#inboxTimer.unref()
  }

  /** Starts the jobs on their intervals, each guarded by a lock shared by all instances. */
  async startJobs(): Promise<JobScheduler> {
    if (this.#scheduler) return this.#scheduler
    const { config, logger, jobs: run } = this.#options
    const { db } = await this.#options.parts()
    const { createJobLocks } = await import('../jobs/locks.ts')
    const { JobScheduler } = await import('../jobs/scheduler.ts')
    const { tableNames } = await import('../database/schema.ts')
    const { connection, tablePrefix } = config.ledger
    const { jobs } = config
    const locks = await createJobLocks({
      ...this.#options.host,
      redis: jobs.redis,
      redisUrl: jobs.redisUrl,
      lockStore: jobs.lockStore,
      db,
      connection,
      tableName: tableNames(tablePrefix).locks,
      logger,
    })
    this.#jobLocks = locks
    const job = (name: string, intervalMs: number, work: () => Promise<unknown>) => ({
      name,
      intervalMs,
      run: () => {
        debug('job %s starts', name)
        return traced(
          channels.jobRun,
          () => ({ job: name }),
          () => work()
        )
      },
    })
    this.#scheduler = new JobScheduler({
      locks: locks.locks,
      logger,
      runTimeoutMs: jobs.runTimeoutMs,
      account: config.account,
      onRun: (name, result) => debug('job %s ran: %o', name, result),
      jobs: [
        job('reconcile', jobs.reconcileEveryMs, run.reconcile),
        job('escrow', jobs.escrowEveryMs, run.escrow),
        job('recover', jobs.recoverEveryMs, run.recover),
        job('prune', jobs.pruneEveryMs, run.prune),
      ],
    })
    this.#scheduler.start()
    logger.info(
      {
        account: config.account,
        locks: locks.store,
        intervals: {
          reconcile: jobs.reconcileEveryMs,
          escrow: jobs.escrowEveryMs,
          recover: jobs.recoverEveryMs,
          prune: jobs.pruneEveryMs,
        },
      },
      'payouts jobs started'
    )
    return this.#scheduler
  }

  /**
   * Connects the WebSocket source at `url`; its messages go into the inbox, then `onStored`
   * runs (the worker wakes its loop); by default the inbox processor is kicked.
   */
  async startStream(url: string, onStored?: () => void): Promise<PayoutsStream> {
    if (this.#stream) return this.#stream
    const { PayoutsStream } = await import('../stream/payouts_stream.ts')
    const { streamToInbox } = await import('../stream/stream_to_inbox.ts')
    const { config, logger, catchUp } = this.#options
    const { inbox, processor, deliveries } = await this.#options.parts()
    if (!config.apiKey) throw missingKey(config.account)
    this.#stream = new PayoutsStream({
      url,
      apiKey: config.apiKey,
      backoff: { baseMs: config.events.reconnectBaseMs, maxMs: config.events.reconnectMaxMs },
      logger: {
        info: (obj, msg) => logger.info(obj, msg),
        warn: (obj, msg) => logger.warn(obj, msg),
      },
      onMessage: streamToInbox(inbox, onStored ? { kick: onStored } : processor, deliveries),
      onReconnect: () =>
        traced(
          channels.streamReconnect,
          () => ({ type: 'reconnect' }),
          async () => void (await catchUp())
        ),
    })
    this.#stream.start()
    return this.#stream
  }

  /** Stops the jobs, releases their locks, closes the socket and clears the timer. */
  async stop() {
    await this.#scheduler?.stop()
    this.#scheduler = undefined
    await this.#jobLocks?.close()
    this.#jobLocks = undefined
    await this.#stream?.stop()
    this.#stream = undefined
    clearInterval(this.#inboxTimer)
    this.#inboxTimer = undefined
  }
}
