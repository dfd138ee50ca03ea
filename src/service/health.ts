import type { Database } from '@adonisjs/lucid/database'
import { dbDate } from '../database/dates.ts'
import { tableNames } from '../database/schema.ts'
import type { PayoutsConfig } from '../define_config.ts'
import type { Reachability, ReachabilityLine } from '../health/reachability.ts'

/** A line's or the whole report's verdict, as AdonisJS health checks name them. */
export type Verdict = 'ok' | 'warning' | 'error'

/** One line of the health report: what was measured, its verdict, and why in words. */
export interface HealthLine {
  status: Verdict
  /** The count or the age in ms; null when there is nothing to measure yet. */
  value: number | null
  message: string
}

/** The lines of the report, in the order `payouts:status` prints them. */
export interface HealthLines {
  /** Whether the service answers a cheap read with this key (cached, see `health.reachability`). */
  reachability: ReachabilityLine
  /** Inbox rows not yet processed: pending, being processed, or failed and due again. */
  inboxBacklog: HealthLine
  /** Age in ms of the oldest of those rows. */
  oldestPendingMs: HealthLine
  /** Inbox rows given up on; `payouts:replay` requeues them. */
  deadLetters: HealthLine
  /** Execution intents whose outcome is unknown or that wait for a human. */
  unknownIntents: HealthLine
  /** Escrow deposits whose confirmation failed past its attempts. */
  escrowFailed: HealthLine
  /** Non-terminal payouts older than `jobs.stuckAfterMs`. */
  stuckPayouts: HealthLine
  /** Ms since the inbox last stored a delivery (webhook or WebSocket). */
  sinceLastEventMs: HealthLine
}

/**
 * The health of the integration, shared by the AdonisJS health check (`PayoutsCheck`) and
 * `payouts:status`. `--json` prints it as it is: camelCase keys, ages in milliseconds.
 */
export interface PayoutsHealthReport {
  /** The worst verdict of the lines. */
  status: Verdict
  /** The messages of the lines that are not ok, joined; "all checks ok" otherwise. */
  message: string
  environment: 'sandbox' | 'production'
  eventSources: PayoutsConfig['events']['sources']
  /** When the inbox last stored a delivery, ISO; null when never. */
  lastEventReceivedAt: string | null
  /** Without the ledger only `reachability` is reported. */
  checks: Partial<HealthLines> & Pick<HealthLines, 'reachability'>
}

type Threshold = { warning: number | null; error: number | null }

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
  if (ms < 60_000) return `${Math.round(ms / 1000)} s`
  if (ms < 3600_000) return `${Math.round(ms / 60_000)} min`
  return `${Math.round(ms / 3600_000)} h`
}

const toDate = (value: unknown) => (value ? new Date(value as string) : null)

/** Reads the ledger's lines from the plugin's tables (one query per measure). */
async function ledgerLines(
  db: Database,
  config: Pick<PayoutsConfig, 'ledger' | 'jobs' | 'health'>,
  now: number
) {
  const t = tableNames(config.ledger.tablePrefix)
  const client = db.connection(config.ledger.connection)
  const h = config.health
  const count = async (table: string, where: (q: any) => void) => {
    const query = client.from(table)
    where(query)
    const row = await query.count('* as total').first()
    return Number(row?.total ?? 0)
  }
  const unprocessed = (q: any) => q.whereIn('state', ['pending', 'processing', 'failed'])
  const lastRow = await client.from(t.webhookDeliveries).max('received_at as at').first()
  const oldestRow = await unprocessed(client.from(t.webhookDeliveries))
    .min('received_at as at')
    .first()
  const last = toDate(lastRow?.at)
  const oldest = toDate(oldestRow?.at)
  const stuckBefore = dbDate(client, new Date(now - config.jobs.stuckAfterMs))
  const backlog = await count(t.webhookDeliveries, unprocessed)
  const dead = await count(t.webhookDeliveries, (q) => q.where('state', 'dead'))
  const unknown = await count(t.executionIntents, (q) =>
    q.whereIn('state', ['unknown', 'needs_attention'])
  )
  const escrow = await count(t.escrowDeposits, (q) => q.where('state', 'confirm_failed'))
  const stuck = await count(t.payouts, (q) =>
    q.whereIn('status', ['pending', 'processing']).where('created_at', '<', stuckBefore)
  )
  const oldestMs = oldest ? Math.max(0, now - oldest.getTime()) : null
  const sinceLastMs = last ? Math.max(0, now - last.getTime()) : null
  const lines: Omit<HealthLines, 'reachability'> = {
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
  }
  return { lines, lastEventReceivedAt: last?.toISOString() ?? null }
}

/** What `readHealth` reads from. */
export interface HealthSources {
  config: Pick<PayoutsConfig, 'ledger' | 'jobs' | 'events' | 'health'>
  environment: PayoutsHealthReport['environment']
  /** The plugin's database; null without the ledger (only reachability is reported). */
  db: Database | null
  reachability: Reachability
}

/** Reads the health report: the ledger's tables and the service's reachability. */
export async function readHealth(sources: HealthSources): Promise<PayoutsHealthReport> {
  const now = Date.now()
  const [reachability, ledger] = await Promise.all([
    sources.reachability.read(),
    sources.db ? ledgerLines(sources.db, sources.config, now) : null,
  ])
  const checks = { reachability, ...ledger?.lines }
  const lines = Object.values(checks) as HealthLine[]
  const status = worst(lines.map((l) => l.status))
  const problems = lines.filter((l) => l.status !== 'ok').map((l) => l.message)
  return {
    status,
    message: problems.length ? problems.join('; ') : 'all checks ok',
    environment: sources.environment,
    eventSources: sources.config.events.sources,
    lastEventReceivedAt: ledger?.lastEventReceivedAt ?? null,
    checks,
  }
}
