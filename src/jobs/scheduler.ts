import type { JobLockFactory } from './locks.ts'
import { withDeadline } from '../time_bounds.ts'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import { safeError } from '../safe_error.ts'

/** The lock of one account's job (see `JobSchedulerOptions.account`). */
export function jobLockKey(job: string, account: string = DEFAULT_ACCOUNT): string {
  return account === DEFAULT_ACCOUNT ? `svc-payouts:${job}` : `svc-payouts:${account}:${job}`
}

/** One periodic job of the plugin. */
export interface ScheduledJob {
  name: string
  intervalMs: number
  run: () => Promise<unknown>
}

export interface JobSchedulerOptions {
  locks: JobLockFactory
  jobs: ScheduledJob[]
  logger: { info(obj: object, msg?: string): void; error(obj: object, msg?: string): void }
  onRun?: (name: string, result: unknown) => void
  /**
   * A run still going after this long is given up: logged as failed, its lock no longer
   * extended (so it lapses at its TTL) and the job free to run at a later tick. The run
   * itself cannot be cancelled; every job is safe to repeat. 0 waits forever.
   */
  runTimeoutMs?: number
  /**
   * The account whose jobs these are: its locks are its own (`svc-payouts:<account>:<job>`),
   * so each account's jobs run once per interval across instances, independently. The
   * account `main` keeps the keys of a one-account app (`svc-payouts:<job>`), so instances
   * of an app being upgraded share their locks.
   */
  account?: string
}

/**
 * Runs the plugin's jobs on intervals in the web process. Each run first takes a lock
 * whose TTL is the interval and is never released early, so across every instance of the
 * app a job runs at most once per interval (the lock lives where `createJobLocks` puts it:
 * the app's `@adonisjs/lock` store, Redis with `jobs.redis`, or the app's database). A run
 * longer than its interval keeps extending its lock, so it never overlaps the next run
 * anywhere. Every run is logged as `payouts job ran`, with its result and how long it ran (`ms`).
 */
export class JobScheduler {
  #timers: NodeJS.Timeout[] = []
  #running = new Set<Promise<unknown>>()
  /** Jobs running in this process: a tick that finds its job here skips. */
  #active = new Set<string>()

  constructor(private options: JobSchedulerOptions) {}

  start() {
    for (const job of this.options.jobs) {
      if (job.intervalMs <= 0) continue
      const timer = setInterval(() => void this.tick(job), job.intervalMs)
      timer.unref()
      this.#timers.push(timer)
    }
  }

  /** One attempt: runs the job if no instance ran it in this interval. */
  async tick(job: ScheduledJob): Promise<'ran' | 'skipped' | 'failed'> {
    if (this.#active.has(job.name)) return 'skipped'
    const ttl = Math.max(1, job.intervalMs - 50)
    const lock = this.options.locks.createLock(jobLockKey(job.name, this.options.account), ttl)
    this.#active.add(job.name)
    try {
      if (!(await lock.acquireImmediately())) {
        this.#active.delete(job.name)
        return 'skipped'
      }
    } catch (error) {
      this.#active.delete(job.name)
      // The lock store is down: skip this tick rather than risk a second run elsewhere.
      this.options.logger.error(
        { err: safeError(error), job: job.name },
        'payouts job lock unavailable'
      )
      return 'failed'
    }
    // Held for as long as the run lasts; after it, the TTL still covers the interval.
    const keeper = setInterval(
      () => {
        lock.extend(ttl).catch((error) => {
          this.options.logger.error(
            { err: safeError(error), job: job.name },
            'payouts job lock not extended'
          )
        })
      },
      // A third of the TTL: two extensions may be late before the lock lapses.
      Math.max(1, Math.floor(ttl / 3))
    )
    keeper.unref()
    const startedAt = performance.now()
    const run = job.run()
    this.#running.add(run)
    try {
      const result = await withDeadline(run, this.options.runTimeoutMs ?? 0, `job ${job.name}`)
      const ms = Math.round(performance.now() - startedAt)
      this.options.logger.info({ job: job.name, result, ms }, 'payouts job ran')
      this.options.onRun?.(job.name, result)
      return 'ran'
    } catch (error) {
      this.options.logger.error({ err: safeError(error), job: job.name }, 'payouts job failed')
      return 'failed'
    } finally {
      clearInterval(keeper)
      this.#running.delete(run)
      this.#active.delete(job.name)
    }
  }

  async stop() {
    for (const timer of this.#timers) clearInterval(timer)
    this.#timers = []
    await Promise.allSettled([...this.#running])
  }
}
