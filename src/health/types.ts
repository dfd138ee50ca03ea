import type { PayoutsConfig } from '../define_config.ts'

/** A line's or the whole report's verdict, as AdonisJS health checks name them. */
export type Verdict = 'ok' | 'warning' | 'error'

/** One line of the health report: what was measured, its verdict, and why in words. */
export interface HealthLine {
  status: Verdict
  /** The count or the age in ms; null when there is nothing to measure yet. */
  value: number | null
  message: string
}

/** The reachability line: whether the service answered, and whether the answer is reused. */
export interface ReachabilityLine extends HealthLine {
  /** The base URL asked, its credentials redacted. */
  baseUrl: string
  /** True when the answer is a cached one (see `health.reachability.cacheForMs`). */
  cached: boolean
  /** When the service was last asked, ISO. */
  checkedAt: string
}

/** The heartbeats line: which of the worker and the jobs ran lately, and when each last did. */
export interface HeartbeatsLine extends HealthLine {
  /** When each source (`worker`, `job:reconcile`, ...) last beat, ISO; null when never. */
  lastBeats: Record<string, string | null>
  /** The sources expected here and overdue: no beat for 3 of their intervals. */
  overdue: string[]
}

/** The lines of the report, in the order `payouts:status` prints them. */
export interface HealthLines {
  /** Whether the service answers a cheap read with this key (cached, see `health.reachability`). */
  reachability: ReachabilityLine
  /** Whether the plugin's database answered the report's reads within `health.timeoutMs`. */
  database: HealthLine
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
  /** The worker (in worker mode) and the jobs that have not run for 3 of their intervals. */
  heartbeats: HeartbeatsLine
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
  /** The account reported on (`config.account`): a listing of several accounts names each. */
  account: string
  environment: 'sandbox' | 'production'
  eventSources: PayoutsConfig['events']['sources']
  /** When the inbox last stored a delivery, ISO; null when never. */
  lastEventReceivedAt: string | null
  /**
   * Without the ledger only `reachability` is reported; when the database does not answer,
   * `reachability` and `database` (an error).
   */
  checks: Partial<HealthLines> & Pick<HealthLines, 'reachability'>
}
