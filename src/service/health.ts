import type { Database } from '@adonisjs/lucid/database'
import { dbDate } from '../database/dates.ts'
import { tableNames } from '../database/schema.ts'
import type { PayoutsClient } from '../client/payouts_client.ts'
import type { PayoutsConfig } from '../define_config.ts'

/** The counts an operator needs, as `payouts:status` prints them. */
export interface PayoutsHealthReport {
  environment: PayoutsClient['environment']
  eventSources: PayoutsConfig['events']['sources']
  /** When the inbox last stored a delivery (webhook or WebSocket), ISO; null when never. */
  lastEventReceivedAt: string | null
  /** Inbox rows not yet processed: pending, being processed, or failed and due again. */
  inboxBacklog: number
  /** Inbox rows given up on; `payouts:replay` requeues them. */
  deadLetters: number
  /** Execution intents whose outcome is unknown or that wait for a human. */
  unknownIntents: number
  /** Escrow deposits whose confirmation failed past its attempts. */
  escrowFailed: number
  /** Non-terminal payouts older than `jobs.stuckAfterMs`. */
  stuckPayouts: number
}

/** Reads the health report from the plugin's tables (one query per count). */
export async function readHealth(
  db: Database,
  config: Pick<PayoutsConfig, 'ledger' | 'jobs' | 'events'>,
  environment: PayoutsHealthReport['environment']
): Promise<PayoutsHealthReport> {
  const t = tableNames(config.ledger.tablePrefix)
  const client = db.connection(config.ledger.connection)
  const count = async (table: string, where: (q: any) => void) => {
    const query = client.from(table)
    where(query)
    const row = await query.count('* as total').first()
    return Number(row?.total ?? 0)
  }
  const last = await client.from(t.webhookDeliveries).max('received_at as at').first()
  const stuckBefore = dbDate(client, new Date(Date.now() - config.jobs.stuckAfterMs))
  return {
    environment,
    eventSources: config.events.sources,
    lastEventReceivedAt: last?.at ? new Date(last.at).toISOString() : null,
    inboxBacklog: await count(t.webhookDeliveries, (q) =>
      q.whereIn('state', ['pending', 'processing', 'failed'])
    ),
    deadLetters: await count(t.webhookDeliveries, (q) => q.where('state', 'dead')),
    unknownIntents: await count(t.executionIntents, (q) =>
      q.whereIn('state', ['unknown', 'needs_attention'])
    ),
    escrowFailed: await count(t.escrowDeposits, (q) => q.where('state', 'confirm_failed')),
    stuckPayouts: await count(t.payouts, (q) =>
      q.whereIn('status', ['pending', 'processing']).where('created_at', '<', stuckBefore)
    ),
  }
}
