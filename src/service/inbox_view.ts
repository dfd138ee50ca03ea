import type { Database } from '@adonisjs/lucid/database'
import { fromDbDate } from '../database/dates.ts'
import { tableNames } from '../database/schema.ts'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import type { PayoutsConfig } from '../define_config.ts'
import type { InboxStore } from '../webhooks/inbox_store.ts'

/** One stored delivery as an operator sees it (`payouts:deliveries`). */
export interface InboxDeliveryView {
  deliveryId: string
  eventType: string
  source: string
  state: string
  attempts: number
  lastError: string | null
  receivedAt: string
}

/**
 * Reads the config's account's stored inbox deliveries, newest first, by state and/or
 * delivery id; for the commands that show the inbox or check a `--id` before replaying it.
 */
export async function listInboxDeliveries(
  db: Database,
  config: Pick<PayoutsConfig, 'ledger'> & Partial<Pick<PayoutsConfig, 'account'>>,
  filter: { states?: string[]; ids?: string[]; limit?: number }
): Promise<InboxDeliveryView[]> {
  const table = tableNames(config.ledger.tablePrefix).webhookDeliveries
  const client = db.connection(config.ledger.connection)
  const query = client
    .from(table)
    .select('delivery_id', 'event_type', 'source', 'state', 'attempts', 'last_error', 'received_at')
    .where('account', config.account ?? DEFAULT_ACCOUNT)
    .orderBy('received_at', 'desc')
    .orderBy('id', 'desc')
  if (filter.states?.length) query.whereIn('state', filter.states)
  if (filter.ids?.length) query.whereIn('delivery_id', filter.ids)
  if (filter.limit) query.limit(filter.limit)
  const rows: any[] = await query
  return rows.map((row) => ({
    deliveryId: row.delivery_id,
    eventType: row.event_type,
    source: row.source,
    state: row.state,
    attempts: Number(row.attempts),
    lastError: row.last_error ?? null,
    receivedAt: fromDbDate(client, row.received_at)!.toISO()!,
  }))
}

/** What `payouts:replay` selects: ids, a state, a time range (ISO), processed ones with `force`. */
export interface ReplayFilter {
  ids?: string[]
  state?: 'failed' | 'dead' | 'processed' | 'pending'
  since?: string
  until?: string
  force?: boolean
}

/**
 * Requeues the stored deliveries `filter` selects, processes the inbox (`drain`), and says
 * how many were requeued, processed, and are still failing.
 */
export async function replayDeliveries(
  inbox: Pick<InboxStore, 'requeue' | 'statesOf'>,
  drain: () => Promise<number>,
  filter: ReplayFilter
) {
  const ids = await inbox.requeue({
    ...filter,
    since: filter.since ? new Date(filter.since) : undefined,
    until: filter.until ? new Date(filter.until) : undefined,
  })
  const processed = await drain()
  const states = await inbox.statesOf(ids)
  return {
    requeued: ids.length,
    processed,
    failing: states.filter((state) => state === 'failed' || state === 'dead').length,
  }
}
