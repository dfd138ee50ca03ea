import { hostname } from 'node:os'
import type { Database } from '@adonisjs/lucid/database'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { dbDate, fromDbDate } from '../database/dates.ts'
import { withDeadline } from '../time_bounds.ts'
import { dropIdleConnections, withStatementTimeout } from '../database/deadline.ts'
import { tableNames } from '../database/schema.ts'
import type { PayoutsConfig } from '../define_config.ts'
import debug from '../debug.ts'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import { safeError } from '../safe_error.ts'

/** What beats: the worker's loop and each job (a command's run of a job included). */
export type HeartbeatName = 'worker' | 'job:reconcile' | 'job:escrow' | 'job:recover' | 'job:prune'

/** The worker's loop writes its beat at most this often (it turns every poll interval). */
export const WORKER_BEAT_EVERY_MS = 15_000

/** A source expected to run is overdue after this many of its intervals without a beat. */
export const MISSED_INTERVALS = 3

/** `account`: whose beats these are (`main` when the config names none). */
type HeartbeatsConfig = Pick<PayoutsConfig, 'ledger' | 'health'> &
  Partial<Pick<PayoutsConfig, 'account'>>

/** Where beats go, and where a failed one is logged. */
export interface HeartbeatsOptions {
  db: Database
  config: HeartbeatsConfig
  logger: { error(obj: object, msg?: string): void }
  /** Named in the row; `<host>:<pid>` by default. */
  owner?: string
}

/**
 * The `heartbeats` table: one row per account and source (`worker`, `job:escrow`, ...) with
 * the last process that beat and when (UTC), upserted on every store. Each account's worker
 * and jobs beat under `config.account`: one account's running worker hides no other's. A beat is bounded by
 * `health.timeoutMs` and never rejects: a database that fails or stalls is logged, and the
 * job or the worker goes on. Health reads the rows to tell a dead worker or stopped jobs.
 */
export class Heartbeats {
  readonly owner: string
  #options: HeartbeatsOptions
  #wroteAt = new Map<HeartbeatName, number>()
  #writing = new Map<HeartbeatName, Promise<void>>()

  constructor(options: HeartbeatsOptions) {
    this.#options = options
    this.owner = options.owner ?? `${hostname()}:${process.pid}`.slice(0, 128)
  }

  #client(): QueryClientContract {
    return this.#options.db.connection(this.#options.config.ledger.connection)
  }

  /**
   * Records that `name` ran now. With `atMostEveryMs`, a beat written less than that ago
   * makes this one a no-op (the worker's loop). Resolves when written, given up or failed.
   */
  beat(name: HeartbeatName, options: { atMostEveryMs?: number } = {}): Promise<void> {
    const last = this.#wroteAt.get(name)
    const gap = options.atMostEveryMs ?? 0
    if (gap > 0 && last !== undefined && Date.now() - last < gap) return Promise.resolve()
    const inFlight = this.#writing.get(name)
    if (inFlight) return inFlight
    const writing = this.#write(name).finally(() => this.#writing.delete(name))
    this.#writing.set(name, writing)
    return writing
  }

  async #write(name: HeartbeatName) {
    const { config, logger } = this.#options
    const ms = config.health.timeoutMs
    const at = Date.now()
    try {
      const client = this.#client()
      const table = tableNames(config.ledger.tablePrefix).heartbeats
      const row = {
        account: config.account ?? DEFAULT_ACCOUNT,
        name,
        owner: this.owner,
        beat_at: dbDate(client, new Date(at)),
      }
      const upsert = client
        .knexQuery()
        .table(table)
        .insert(row)
        .onConflict(['account', 'name'])
        .merge(['owner', 'beat_at'])
      await withDeadline(
        Promise.resolve(withStatementTimeout(upsert, ms)),
        ms,
        `payouts heartbeat ${name}`,
        (error) => dropIdleConnections(client, error)
      )
      this.#wroteAt.set(name, at)
      debug('heartbeat %s', name)
    } catch (error) {
      logger.error({ err: safeError(error), heartbeat: name }, 'payouts heartbeat not recorded')
    }
  }
}

/** One source health expects to beat, and how often. */
export interface ExpectedBeat {
  name: HeartbeatName
  everyMs: number
}

/**
 * What should beat where this config runs: the jobs on their intervals when `jobs.enabled`
 * (an interval of 0 is never expected), and the worker in `webhook.processing: 'worker'`.
 * With the jobs left to cron (`jobs.enabled: false`) nothing is expected of them: their
 * commands still beat, and the report shows when each last ran.
 */
export function expectedBeats(config: Pick<PayoutsConfig, 'jobs' | 'webhook'>): ExpectedBeat[] {
  const expected: ExpectedBeat[] = []
  if (config.webhook.processing === 'worker') {
    const poll = config.webhook.retryIntervalMs || 1000
    expected.push({ name: 'worker', everyMs: Math.max(WORKER_BEAT_EVERY_MS, poll) })
  }
  if (config.jobs.enabled) {
    const { reconcileEveryMs, escrowEveryMs, recoverEveryMs, pruneEveryMs } = config.jobs
    const jobs: Array<[HeartbeatName, number]> = [
      ['job:reconcile', reconcileEveryMs],
      ['job:escrow', escrowEveryMs],
      ['job:recover', recoverEveryMs],
      ['job:prune', pruneEveryMs],
    ]
    for (const [name, everyMs] of jobs) if (everyMs > 0) expected.push({ name, everyMs })
  }
  return expected
}

/**
 * Every source's last beat (UTC) in one account (`options.account`, default `main`), read in
 * one statement under `timeoutMs`.
 */
export async function readBeats(
  client: QueryClientContract,
  table: string,
  timeoutMs: number,
  options: { account?: string } = {}
): Promise<Map<string, Date>> {
  const own = client
    .from(table)
    .where('account', options.account ?? DEFAULT_ACCOUNT)
    .select('name', 'beat_at')
  const rows = await withStatementTimeout(own, timeoutMs)
  const beats = new Map<string, Date>()
  for (const row of rows as Array<{ name: string; beat_at: unknown }>) {
    const at = fromDbDate(client, row.beat_at)
    if (at) beats.set(row.name, at.toJSDate())
  }
  return beats
}
