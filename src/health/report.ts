import type { Database } from '@adonisjs/lucid/database'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { redactCredentials } from '../client/redact.ts'
import { isDatabaseError } from '../safe_error.ts'
import { dbDate, fromDbDate } from '../database/dates.ts'
import { isDeadlineError, withDeadline } from '../time_bounds.ts'
import { dropIdleConnections, withStatementTimeout } from '../database/deadline.ts'
import { tableNames } from '../database/schema.ts'
import { isSqlite, whereAccountNotLeading } from '../database/dialects.ts'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import type { PayoutsConfig } from '../define_config.ts'
import type { Reachability } from './reachability.ts'
import type {
  HealthLine,
  HealthLines,
  HeartbeatsLine,
  PayoutsHealthReport,
  ReachabilityLine,
  Verdict,
} from './types.ts'
import { readInboxBacklog } from '../webhooks/inbox_backlog.ts'
import { expectedBeats, MISSED_INTERVALS, readBeats, type HeartbeatName } from './heartbeats.ts'

type Threshold = { warning: number | null; error: number | null }

/** `account`: whose rows and beats the report reads (`main` when the config names none). */
type HealthConfig = Pick<
  PayoutsConfig,
  'baseUrl' | 'ledger' | 'jobs' | 'events' | 'health' | 'webhook'
> &
  Partial<Pick<PayoutsConfig, 'account'>>

/** The account a config is for. */
function accountOf(config: HealthConfig): string {
  return config.account ?? DEFAULT_ACCOUNT
}

/** The verdict of a value against its threshold: error first, then warning. */
export function verdictOf(value: number | null, threshold: Threshold): Verdict {
  if (value === null) return 'ok'
  if (threshold.error !== null && value >= threshold.error) return 'error'
  if (threshold.warning !== null && value >= threshold.warning) return 'warning'
  return 'ok'
}

/** A line for a measured value: its verdict, and the threshold it reached in the message. */
function line(value: number | null, threshold: Threshold, describe: string): HealthLine {
  const status = verdictOf(value, threshold)
  const reached = status === 'ok' ? null : threshold[status]
  return {
    status,
    value,
    message: reached === null ? describe : `${describe} (${status} at ${reached})`,
  }
}

const ORDER: Verdict[] = ['ok', 'warning', 'error']

/** The worst of the verdicts. */
function worst(verdicts: Verdict[]): Verdict {
  return verdicts.reduce((a, b) => (ORDER.indexOf(b) > ORDER.indexOf(a) ? b : a), 'ok')
}

/** "3 min", "2 h": an age for a human. */
function age(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`
  if (ms < 60_000) return `${Math.round(ms / 1000)} s`
  if (ms < 3600_000) return `${Math.round(ms / 60_000)} min`
  return `${Math.round(ms / 3600_000)} h`
}

/** Every source that may beat, in the order the report lists them. */
const BEAT_NAMES: HeartbeatName[] = [
  'worker',
  'job:reconcile',
  'job:escrow',
  'job:recover',
  'job:prune',
]

/**
 * The heartbeats line: a source expected here (see `expectedBeats`) with no beat for
 * `MISSED_INTERVALS` of its intervals is overdue. One never seen counts from `since` (when
 * this process began to expect it), so a fresh deploy is not reported before it could beat.
 */
function heartbeatsLine(
  beats: Map<string, Date>,
  config: HealthConfig,
  now: number,
  since: number
): HeartbeatsLine {
  const expected = expectedBeats(config)
  const lastBeats = Object.fromEntries(
    BEAT_NAMES.map((name) => [name, beats.get(name)?.toISOString() ?? null])
  )
  const overdue: string[] = []
  const words: string[] = []
  for (const { name, everyMs } of expected) {
    const last = beats.get(name)?.getTime()
    if (now - (last ?? since) < MISSED_INTERVALS * everyMs) continue
    overdue.push(name)
    const every = `expected every ${age(everyMs)}`
    words.push(
      last === undefined
        ? `${name} has not run (${every})`
        : `${name} last ran ${age(now - last)} ago (${every})`
    )
  }
  if (overdue.includes('worker')) words.push('is node ace payouts:work running?')
  const describe = !expected.length
    ? 'no worker or job expected to run here'
    : overdue.length
      ? words.join(', ')
      : `worker and jobs ran within ${MISSED_INTERVALS} of their intervals`
  const value = expected.length ? overdue.length : null
  return { ...line(value, config.health.heartbeats, describe), lastBeats, overdue }
}

/** Stops the statements of a report given up on: the next one is not sent. */
interface Gate {
  expired: boolean
}

/**
 * Reads the ledger's lines from the plugin's tables (one statement per measure, each under
 * the report's bound), and the heartbeats: the config's account's rows only, so each
 * account's report counts its own backlog, dead letters and beats.
 */
async function ledgerLines(
  client: QueryClientContract,
  config: HealthConfig,
  now: number,
  since: number,
  gate: Gate
) {
  const t = tableNames(config.ledger.tablePrefix)
  const h = config.health
  const account = accountOf(config)
  const own = (table: string) => client.from(table).where('account', account)
  const bounded = <Query extends { timeout(ms: number): Query }>(query: Query): Query => {
    if (gate.expired) throw new Error('the health report was given up')
    return withStatementTimeout(query, h.timeoutMs)
  }
  const count = async (table: string, where: (q: any) => void) => {
    const query = own(table)
    where(query)
    const row = await bounded(query.count('* as total')).first()
    return Number(row?.total ?? 0)
  }
  // The newest row along the received_at index, the account's filter kept out of SQLite's
  // plan: without statistics, max() over `account = ?` read every row of the account through
  // its (account, delivery_id) index (3.9 s on the inbox of 1,000,000 payouts). There, an
  // account with no delivery at all is found first through its own index (one entry read):
  // read backwards, the received_at index would be walked through every other account's
  // rows. PostgreSQL and MySQL plan the one query from their statistics.
  const anyRow = isSqlite(client)
    ? await bounded(own(t.webhookDeliveries).select('id').limit(1)).first()
    : true
  const lastRow = anyRow
    ? await bounded(
        whereAccountNotLeading(client, client.from(t.webhookDeliveries), account)
          .select('received_at as at')
          .orderBy('received_at', 'desc')
          .limit(1)
      ).first()
    : null
  const last = fromDbDate(client, lastRow?.at)?.toJSDate() ?? null
  const { rows: backlog, oldestAgeMs: oldestMs } = await readInboxBacklog(
    client,
    t.webhookDeliveries,
    now,
    bounded,
    { account }
  )
  const stuckBefore = dbDate(client, new Date(now - config.jobs.stuckAfterMs))
  const dead = await count(t.webhookDeliveries, (q) => q.where('state', 'dead'))
  const unknown = await count(t.executionIntents, (q) =>
    q.whereIn('state', ['unknown', 'needs_attention'])
  )
  const escrow = await count(t.escrowDeposits, (q) => q.where('state', 'confirm_failed'))
  const stuck = await count(t.payouts, (q) =>
    q.whereIn('status', ['pending', 'processing']).where('created_at', '<', stuckBefore)
  )
  if (gate.expired) throw new Error('the health report was given up')
  const beats = await readBeats(client, t.heartbeats, h.timeoutMs, { account })
  const sinceLastMs = last ? Math.max(0, now - last.getTime()) : null
  const lines: Omit<HealthLines, 'reachability' | 'database'> = {
    inboxBacklog: line(backlog, h.inboxBacklog, `${backlog} inbox rows not processed`),
    oldestPendingMs: line(
      oldestMs,
      h.oldestPendingMs,
      oldestMs === null ? 'no inbox row waits' : `oldest unprocessed inbox row ${age(oldestMs)} old`
    ),
    deadLetters: line(dead, h.deadLetters, `${dead} dead letters (payouts:replay requeues them)`),
    unknownIntents: line(unknown, h.unknownIntents, `${unknown} intents with an unknown outcome`),
    escrowFailed: line(escrow, h.escrowFailed, `${escrow} escrow confirmations failed`),
    stuckPayouts: line(stuck, h.stuckPayouts, `${stuck} payouts stuck past jobs.stuckAfterMs`),
    sinceLastEventMs: line(
      sinceLastMs,
      h.sinceLastEventMs,
      sinceLastMs === null ? 'no event received yet' : `last event ${age(sinceLastMs)} ago`
    ),
    heartbeats: heartbeatsLine(beats, config, now, since),
  }
  return { lines, lastEventReceivedAt: last?.toISOString() ?? null }
}

/** A driver's code for a database that could not be reached or stopped answering. */
const UNANSWERED =
  /^(ECONN\w+|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN|EPIPE|PROTOCOL_CONNECTION_LOST)$/

/**
 * What the database did, for a report anyone reading the health route may see: its driver's
 * code alone ("did not answer (ECONNREFUSED)", "answered with an error (42P01)"), never the
 * statement, its values, or the server's address. Null for an error that is not the
 * database's. In the health path the client's own network errors are wrapped
 * (`PayoutsNetworkError`): a bare socket error (`syscall`) is the database driver's.
 */
export function databaseFailure(error: unknown): string | null {
  const { name, code, syscall } = (error ?? {}) as {
    name?: unknown
    code?: unknown
    syscall?: unknown
  }
  if (name === 'KnexTimeoutError') return 'did not answer (no pooled connection in time)'
  if (typeof syscall !== 'string' && !isDatabaseError(error)) return null
  const known = typeof code === 'string' || typeof code === 'number' ? String(code) : null
  if (typeof syscall === 'string' || (known && UNANSWERED.test(known))) {
    return known ? `did not answer (${known})` : 'did not answer'
  }
  return known ? `answered with an error (${known})` : 'failed'
}

/** A database error in a line, by its code (`databaseFailure`); any other by its message. */
function databaseError(error: unknown): string {
  const failure = databaseFailure(error)
  if (failure) return failure
  return `failed: ${redactCredentials(String((error as Error)?.message ?? error))}`
}

/**
 * Why a whole report could not be read, in one phrase: a database error by its code alone
 * ("the database did not answer (ECONNREFUSED)"), any other error by its message, with the
 * credentials of any URL in it redacted.
 */
export function unreadableReason(error: unknown): string {
  const failure = databaseFailure(error)
  if (failure) return `the database ${failure}`
  return redactCredentials((error as Error)?.message ?? String(error))
}

/**
 * The ledger's lines and the `database` line, within `health.timeoutMs` whatever the
 * database does: past it (or on a database error) the `database` line is an error naming
 * the connection, and the other ledger lines are left out. A report given up on drops the
 * pool's idle connections (a stalled flow took them all, most likely) and sends no more.
 */
async function readLedger(db: Database, config: HealthConfig, now: number, since: number) {
  const { timeoutMs } = config.health
  const name = config.ledger.connection ?? db.primaryConnectionName
  const client = db.connection(config.ledger.connection)
  const gate: Gate = { expired: false }
  const started = Date.now()
  try {
    const ledger = await withDeadline(
      ledgerLines(client, config, now, since, gate),
      timeoutMs,
      `payouts health (database connection "${name}")`,
      (error) => {
        gate.expired = true
        dropIdleConnections(client, error)
      }
    )
    const ms = Date.now() - started
    const database: HealthLine = {
      status: 'ok',
      value: ms,
      message: `database connection "${name}" answered in ${ms} ms`,
    }
    return { lines: { database, ...ledger.lines }, lastEventReceivedAt: ledger.lastEventReceivedAt }
  } catch (error) {
    gate.expired = true
    const timedOut = isDeadlineError(error) || (error as Error)?.name === 'KnexTimeoutError'
    const message = timedOut
      ? `database connection "${name}" did not answer within ${timeoutMs} ms (health.timeoutMs)`
      : `database connection "${name}" ${databaseError(error)}`
    const database: HealthLine = { status: 'error', value: null, message }
    return { lines: { database }, lastEventReceivedAt: null }
  }
}

/** The reachability line within `health.timeoutMs`, whatever the probe does. */
async function readReachability(sources: HealthSources): Promise<ReachabilityLine> {
  const { timeoutMs } = sources.config.health
  const baseUrl = redactCredentials(sources.config.baseUrl)
  try {
    return await withDeadline(sources.reachability.read(), timeoutMs, 'payouts reachability')
  } catch (error) {
    const message = isDeadlineError(error)
      ? `${baseUrl} unreachable: no answer within ${timeoutMs} ms (health.timeoutMs)`
      : `${baseUrl} unreachable: ${(error as Error).message}`
    const checkedAt = new Date().toISOString()
    return { status: 'error', value: null, message, baseUrl, cached: false, checkedAt }
  }
}

/** What `readHealth` reads from. */
export interface HealthSources {
  config: HealthConfig
  environment: PayoutsHealthReport['environment']
  /** The plugin's database; null without the ledger (only reachability is reported). */
  db: Database | null
  reachability: Reachability
  /**
   * Since when this process expects the worker and the jobs to beat (the service's start):
   * one never seen is overdue only `MISSED_INTERVALS` of its intervals after it. Default:
   * the process's start.
   */
  watchingSince?: number
}

/**
 * Reads the health report: the ledger's tables, the heartbeats and the service's
 * reachability, within `health.timeoutMs` (a part that does not answer is an error line).
 * Credentials in any URL it names are redacted.
 */
export async function readHealth(sources: HealthSources): Promise<PayoutsHealthReport> {
  const now = Date.now()
  const since = sources.watchingSince ?? now - process.uptime() * 1000
  const [reachability, ledger] = await Promise.all([
    readReachability(sources),
    sources.db ? readLedger(sources.db, sources.config, now, since) : null,
  ])
  const checks = { reachability, ...ledger?.lines }
  const lines = Object.values(checks) as HealthLine[]
  for (const each of lines) each.message = redactCredentials(each.message)
  reachability.baseUrl = redactCredentials(reachability.baseUrl)
  const status = worst(lines.map((l) => l.status))
  const problems = lines.filter((l) => l.status !== 'ok').map((l) => l.message)
  return {
    status,
    message: problems.length ? problems.join('; ') : 'all checks ok',
    account: accountOf(sources.config),
    environment: sources.environment,
    eventSources: sources.config.events.sources,
    lastEventReceivedAt: ledger?.lastEventReceivedAt ?? null,
    checks,
  }
}

/**
 * One account's report when it could not be read at all (no key, a refused key, a database
 * that did not answer its parts' build): an error naming the account, so a listing of several
 * accounts still shows the others'.
 */
export function unreadableReport(
  config: Pick<PayoutsConfig, 'account' | 'apiKey' | 'environment' | 'baseUrl' | 'events'>,
  error: unknown
): PayoutsHealthReport {
  const message = `could not read the health of account ${config.account}: ${unreadableReason(error)}`
  return {
    status: 'error',
    message,
    account: config.account,
    environment:
      config.environment ?? (config.apiKey?.startsWith('sk_live_') ? 'production' : 'sandbox'),
    eventSources: config.events.sources,
    lastEventReceivedAt: null,
    checks: {
      reachability: {
        status: 'error',
        value: null,
        message,
        baseUrl: redactCredentials(config.baseUrl),
        cached: false,
        checkedAt: new Date().toISOString(),
      },
    },
  }
}
