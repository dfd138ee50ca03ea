import type { Database } from '@adonisjs/lucid/database'
import type { PayoutsConfig } from '../define_config.ts'
import { tableNames } from '../database/schema.ts'

/**
 * Deletes every row of the plugin's tables (ledger, inbox, intents, escrow deposits,
 * recipients, stored secrets, locks) on the configured connection: a clean slate between
 * host-app tests. DELETE, not TRUNCATE, so it works on every store and inside a
 * transaction. Never call it against a production database.
 */
export async function clearPayoutsTables(db: Database, config: PayoutsConfig) {
  const connection = db.connection(config.ledger.connection)
  for (const table of Object.values(tableNames(config.ledger.tablePrefix))) {
    if (await connection.schema.hasTable(table)) await connection.from(table).delete()
  }
}
