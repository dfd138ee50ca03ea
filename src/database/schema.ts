import type { Knex } from 'knex'
import { DEFAULT_TABLE_PREFIX } from '../constants.ts'

/** Table names of the plugin, prefixed (`svc_` by default). */
export function tableNames(prefix = DEFAULT_TABLE_PREFIX) {
  return {
    payouts: `${prefix}payouts`,
    payoutEvents: `${prefix}payout_events`,
    recipients: `${prefix}recipients`,
    webhookDeliveries: `${prefix}webhook_deliveries`,
    escrowDeposits: `${prefix}escrow_deposits`,
    executionIntents: `${prefix}execution_intents`,
    locks: `${prefix}locks`,
    webhookSecrets: `${prefix}webhook_secrets`,
  }
}

/**
 * Creates the plugin's tables on a schema builder: `this.schema` inside a Lucid
 * migration, or `db.connection().schema` in a script. Money and atomic amounts are
 * strings (VARCHAR): never a float on any database, SQLite included, whose NUMERIC
 * affinity would turn "0.1" into a REAL.
 */
export function createPayoutsTables(schema: Knex.SchemaBuilder, prefix = DEFAULT_TABLE_PREFIX) {
  const t = tableNames(prefix)
  const money = (table: Knex.CreateTableBuilder, name: string) => table.string(name, 64).nullable()
  return schema
    .createTable(t.payouts, (table) => {
      table.increments('id')
      table.string('payout_uuid', 64).notNullable().unique()
      table.string('read_id', 64).nullable().unique()
      table.string('owner_id', 191).nullable().index()
      table.string('flow', 32).nullable()
      table.string('status', 32).notNullable()
      table.string('step', 32).nullable()
      table.string('transaction_type', 32).nullable()
      table.string('quote_id', 64).nullable().index()
      money(table, 'source_amount')
      table.string('source_currency', 12).nullable()
      money(table, 'payout_amount')
      table.string('payout_currency', 12).nullable()
      money(table, 'to_amount')
      table.text('fees').nullable()
      money(table, 'partner_fx_rate')
      money(table, 'effective_rate')
      table.string('recipient_id', 64).nullable().index()
      table.string('recipient_payment_method_id', 64).nullable()
      table.string('payment_method', 64).nullable()
      table.string('payment_purpose', 255).nullable()
      table.string('reference', 255).nullable()
      table.text('provider_metadata').nullable()
      table.text('instructions').nullable()
      table.timestamp('last_observed_at', { useTz: true }).nullable().index()
      table.timestamp('status_changed_at', { useTz: true }).nullable()
      table.timestamp('completed_at', { useTz: true }).nullable()
      table.timestamp('created_at', { useTz: true }).notNullable()
      table.timestamp('updated_at', { useTz: true }).notNullable()
      table.index(['status', 'last_observed_at'])
    })
    .createTable(t.payoutEvents, (table) => {
      table.increments('id')
      table.string('payout_uuid', 64).notNullable().index()
      table.string('source', 16).notNullable()
      table.string('event_type', 64).nullable()
      table.string('status', 32).nullable()
      table.string('step', 32).nullable()
      table.boolean('applied').notNullable()
      table.string('reason', 255).nullable()
      table.string('delivery_id', 255).nullable()
      table.timestamp('observed_at', { useTz: true }).notNullable()
      // The read id this row was logged under before its placeholder merged into the UUID's row.
      table.string('merged_from', 64).nullable()
      // Outbox: null while the app events of an applied change have not fired yet.
      table.timestamp('notified_at', { useTz: true }).nullable().index()
      table.timestamp('created_at', { useTz: true }).notNullable()
    })
    .createTable(t.recipients, (table) => {
      table.increments('id')
      table.string('remote_id', 64).notNullable().unique()
      table.string('owner_id', 191).nullable().index()
      table.string('name', 255).nullable()
      table.string('email', 255).nullable()
      table.string('country', 2).nullable()
      table.string('currency', 12).nullable()
      table.string('type', 32).nullable()
      table.text('payment_methods').nullable()
      table.text('metadata').nullable()
      table.timestamp('deleted_at', { useTz: true }).nullable()
      table.timestamp('synced_at', { useTz: true }).nullable()
      table.timestamp('created_at', { useTz: true }).notNullable()
      table.timestamp('updated_at', { useTz: true }).notNullable()
    })
    .createTable(t.webhookDeliveries, (table) => {
      table.increments('id')
      table.string('delivery_id', 255).notNullable().unique()
      table.string('event_type', 100).notNullable()
      // Base64 of the exact bytes received, so a body that is not UTF-8 survives.
      table.text('raw_body').notNullable()
      table.string('signature_header', 4096).nullable()
      table.string('source', 16).notNullable()
      table.string('state', 16).notNullable()
      table.integer('attempts').notNullable().defaultTo(0)
      table.timestamp('next_attempt_at', { useTz: true }).nullable()
      table.text('last_error').nullable()
      table.timestamp('received_at', { useTz: true }).notNullable()
      table.timestamp('processed_at', { useTz: true }).nullable()
      table.index(['state', 'next_attempt_at'])
    })
    .createTable(t.escrowDeposits, (table) => {
      table.increments('id')
      table.string('quote_id', 64).notNullable().unique()
      table.string('payout_uuid', 64).nullable().index()
      table.string('escrow_address', 128).nullable()
      table.string('token_address', 128).nullable()
      table.integer('chain_id').nullable()
      table.string('amount_atomic', 80).nullable()
      table.string('tx_hash', 80).nullable()
      table.timestamp('tx_confirmed_at', { useTz: true }).nullable()
      table.string('state', 32).notNullable()
      table.text('last_error').nullable()
      // The fallback's bounded retries: confirmations the service refused, the last one's
      // code, and when the next may be sent.
      table.integer('attempts').notNullable().defaultTo(0)
      table.string('last_error_code', 64).nullable()
      table.timestamp('next_attempt_at', { useTz: true }).nullable()
      table.timestamp('confirm_attempted_at', { useTz: true }).nullable()
      // The payout_events row whose change showed the service had detected the deposit.
      table.integer('confirmed_by_event_id').nullable()
      table.timestamp('created_at', { useTz: true }).notNullable()
      table.timestamp('updated_at', { useTz: true }).notNullable()
    })
    .createTable(t.executionIntents, (table) => {
      table.increments('id')
      table.string('idempotency_key', 255).notNullable().unique()
      table.string('owner_id', 191).nullable().index()
      table.string('flow', 32).notNullable()
      table.text('request_body').notNullable()
      table.string('body_hash', 64).notNullable()
      table.string('state', 32).notNullable().index()
      table.integer('attempts').notNullable().defaultTo(0)
      table.string('payout_uuid', 64).nullable()
      table.text('response').nullable()
      table.text('error').nullable()
      table.timestamp('last_attempt_at', { useTz: true }).nullable()
      table.timestamp('created_at', { useTz: true }).notNullable()
      table.timestamp('updated_at', { useTz: true }).notNullable()
    })
    .createTable(t.webhookSecrets, (table) => {
      // Signing secrets of the subscriptions made by payouts:webhooks:create, encrypted
      // with the app's APP_KEY. Rotations keep no previous secret (the service allows no
      // overlap): previous_secret is only ever cleared, and never accepted.
      table.increments('id')
      table.string('subscription_id', 128).notNullable().unique()
      table.string('url', 2048).notNullable()
      table.text('secret').notNullable()
      table.text('previous_secret').nullable()
      table.timestamp('previous_valid_until', { useTz: true }).nullable()
      table.timestamp('created_at', { useTz: true }).notNullable()
      table.timestamp('updated_at', { useTz: true }).notNullable()
    })
    .createTable(t.locks, (table) => {
      // The schema @verrou/core's knex store expects: the scheduler's job locks.
      table.string('key', 255).notNullable().primary()
      table.string('owner').notNullable()
      table.bigint('expiration').unsigned().nullable()
    })
}

/** Drops the plugin's tables (the migration's `down`). */
export function dropPayoutsTables(schema: Knex.SchemaBuilder, prefix = DEFAULT_TABLE_PREFIX) {
  const t = tableNames(prefix)
  return schema
    .dropTableIfExists(t.locks)
    .dropTableIfExists(t.webhookSecrets)
    .dropTableIfExists(t.executionIntents)
    .dropTableIfExists(t.escrowDeposits)
    .dropTableIfExists(t.webhookDeliveries)
    .dropTableIfExists(t.recipients)
    .dropTableIfExists(t.payoutEvents)
    .dropTableIfExists(t.payouts)
}
