import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import { fromDbDate } from '../database/dates.ts'
import { whereAccountNotLeading } from '../database/dialects.ts'

/** The states of a stored delivery not processed yet (due, being processed, or failed once). */
export const UNPROCESSED_STATES = ['pending', 'processing', 'failed']

/** How far behind the inbox is: rows not processed yet, and how old the oldest one is. */
export interface InboxBacklog {
  rows: number
  /** Milliseconds since the oldest unprocessed row arrived; null when none waits. */
  oldestAgeMs: number | null
}

/**
 * Reads the backlog of one account (`options.account`, default `main`: the accounts share
 * the table) with two statements along the `(state, ...)` index, each passed through
 * `bounded` (the caller's statement timeout): health's inbox lines and the backlog gauges.
 */
export async function readInboxBacklog(
  client: QueryClientContract,
  table: string,
  now: number,
  bounded: <Query extends { timeout(ms: number): Query }>(query: Query) => Query,
  options: { account?: string } = {}
): Promise<InboxBacklog> {
  const account = options.account ?? DEFAULT_ACCOUNT
  // Along the `(state, ...)` index, also on a SQLite file without statistics.
  const unprocessed = () =>
    whereAccountNotLeading(client, client.from(table), account).whereIn('state', UNPROCESSED_STATES)
  const oldestRow = await bounded(unprocessed().min('received_at as at')).first()
  const countRow = await bounded(unprocessed().count('* as total')).first()
  const oldest = fromDbDate(client, oldestRow?.at)?.toJSDate() ?? null
  return {
    rows: Number(countRow?.total ?? 0),
    oldestAgeMs: oldest ? Math.max(0, now - oldest.getTime()) : null,
  }
}

/**
 * What `sampleBacklog` reads with: the database, the inbox's table, the statements' bound,
 * and the account sampled (`config.account`; default `main`).
 */
export interface BacklogSource {
  client: () => QueryClientContract
  table: string
  timeoutMs: number
  account?: string
}

/** Reads the account's backlog now, each statement bounded by `timeoutMs`. */
export function readBacklogNow(source: BacklogSource): Promise<InboxBacklog> {
  return readInboxBacklog(
    source.client(),
    source.table,
    Date.now(),
    (query) => (source.timeoutMs > 0 ? query.timeout(source.timeoutMs) : query),
    { account: source.account }
  )
}
