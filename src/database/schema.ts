import type { Knex } from 'knex'
import { DEFAULT_ACCOUNT, DEFAULT_TABLE_PREFIX } from '../constants.ts'
import { buildsForMysql } from './dialects.ts'

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
    heartbeats: `${prefix}heartbeats`,
    accounts: `${prefix}accounts`,
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
  const mysql = buildsForMysql(schema)
  const money = (table: Knex.CreateTableBuilder, name: string) => table.string(name, 64).nullable()
  // MySQL: DATETIME(3), not TIMESTAMP (its 2038 end, its session time zone, and its implicit
  // DEFAULT/ON UPDATE CURRENT_TIMESTAMP where explicit_defaults_for_timestamp is off).
  const at = (table: Knex.CreateTableBuilder, name: string) =>
    mysql ? table.datetime(name, { precision: 3 }) : table.timestamp(name, { useTz: true })
  // MySQL's TEXT ends at 64 KB; a stored body (256 KB as base64) or JSON needs MEDIUMTEXT.
  const long = (table: Knex.CreateTableBuilder, name: string) => table.text(name, 'mediumtext')
  // MySQL compares ids case-sensitively only under a binary collation (its default, as
  // utf8mb4_general_ci, would make `dlv_A` a duplicate of `dlv_a`).
  const binary = (table: Knex.CreateTableBuilder) => {
    if (!mysql) return
    table.charset('utf8mb4')
    table.collate('utf8mb4_bin')
  }
  return schema
    .createTable(t.payouts, (table) => {
      binary(table)
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
      long(table, 'fees').nullable()
      money(table, 'partner_fx_rate')
      money(table, 'effective_rate')
      table.string('recipient_id', 64).nullable().index()
      table.string('recipient_payment_method_id', 64).nullable()
      table.string('payment_method', 64).nullable()
      table.string('payment_purpose', 255).nullable()
      table.string('reference', 255).nullable()
      long(table, 'provider_metadata').nullable()
      long(table, 'instructions').nullable()
      at(table, 'last_observed_at').nullable().index()
      at(table, 'status_changed_at').nullable()
      at(table, 'completed_at').nullable()
      at(table, 'created_at').notNullable()
      at(table, 'updated_at').notNullable()
      table.index(['status', 'last_observed_at'])
    })
    .createTable(t.payoutEvents, (table) => {
      binary(table)
      table.increments('id')
      table.string('payout_uuid', 64).notNullable().index()
      table.string('source', 16).notNullable()
      table.string('event_type', 64).nullable()
      table.string('status', 32).nullable()
      table.string('step', 32).nullable()
      table.boolean('applied').notNullable()
      table.string('reason', 255).nullable()
      table.string('delivery_id', 255).nullable()
      at(table, 'observed_at').notNullable()
      // The read id this row was logged under before its placeholder merged into the UUID's row.
      table.string('merged_from', 64).nullable()
      // Outbox: null while the app events of an applied change have not fired yet.
      at(table, 'notified_at').nullable().index()
      at(table, 'created_at').notNullable()
    })
    .createTable(t.recipients, (table) => {
      binary(table)
      table.increments('id')
      table.string('remote_id', 64).notNullable().unique()
      table.string('owner_id', 191).nullable().index()
      table.string('name', 255).nullable()
      table.string('email', 255).nullable()
      table.string('country', 2).nullable()
      table.string('currency', 12).nullable()
      table.string('type', 32).nullable()
      long(table, 'payment_methods').nullable()
      long(table, 'metadata').nullable()
      at(table, 'deleted_at').nullable()
      at(table, 'synced_at').nullable()
      at(table, 'created_at').notNullable()
      at(table, 'updated_at').notNullable()
    })
    .createTable(t.webhookDeliveries, (table) => {
      binary(table)
      table.increments('id')
      table.string('delivery_id', 255).notNullable().unique()
      table.string('event_type', 100).notNullable()
      // Base64 of the exact bytes received, so a body that is not UTF-8 survives.
      long(table, 'raw_body').notNullable()
      table.string('signature_header', 4096).nullable()
      table.string('source', 16).notNullable()
      table.string('state', 16).notNullable()
      table.integer('attempts').notNullable().defaultTo(0)
      at(table, 'next_attempt_at').nullable()
      long(table, 'last_error').nullable()
      at(table, 'received_at').notNullable()
      at(table, 'processed_at').nullable()
      table.index(['state', 'next_attempt_at'])
    })
    .createTable(t.escrowDeposits, (table) => {
      binary(table)
      table.increments('id')
      table.string('quote_id', 64).notNullable().unique()
      table.string('payout_uuid', 64).nullable().index()
      table.string('escrow_address', 128).nullable()
      table.string('token_address', 128).nullable()
      table.integer('chain_id').nullable()
      table.string('amount_atomic', 80).nullable()
      table.string('tx_hash', 80).nullable()
      at(table, 'tx_confirmed_at').nullable()
      table.string('state', 32).notNullable()
      long(table, 'last_error').nullable()
      // The fallback's bounded retries: confirmations the service refused, the last one's
      // code, and when the next may be sent.
      table.integer('attempts').notNullable().defaultTo(0)
      table.string('last_error_code', 64).nullable()
      at(table, 'next_attempt_at').nullable()
      at(table, 'confirm_attempted_at').nullable()
      // The payout_events row whose change showed the service had detected the deposit.
      table.integer('confirmed_by_event_id').nullable()
      at(table, 'created_at').notNullable()
      at(table, 'updated_at').notNullable()
    })
    .createTable(t.executionIntents, (table) => {
      binary(table)
      table.increments('id')
      table.string('idempotency_key', 255).notNullable().unique()
      table.string('owner_id', 191).nullable().index()
      table.string('flow', 32).notNullable()
      long(table, 'request_body').notNullable()
      table.string('body_hash', 64).notNullable()
      table.string('state', 32).notNullable().index()
      table.integer('attempts').notNullable().defaultTo(0)
      table.string('payout_uuid', 64).nullable()
      long(table, 'response').nullable()
      long(table, 'error').nullable()
      at(table, 'last_attempt_at').nullable()
      at(table, 'created_at').notNullable()
      at(table, 'updated_at').notNullable()
    })
    .createTable(t.webhookSecrets, (table) => {
      binary(table)
      // Signing secrets of the subscriptions made by payouts:webhooks:create, encrypted
      // with the app's APP_KEY. Rotations keep no previous secret (the service allows no
      // overlap): previous_secret is only ever cleared, and never accepted.
      table.increments('id')
      table.string('subscription_id', 128).notNullable().unique()
      table.string('url', 2048).notNullable()
      table.text('secret').notNullable()
      table.text('previous_secret').nullable()
      at(table, 'previous_valid_until').nullable()
      at(table, 'created_at').notNullable()
      at(table, 'updated_at').notNullable()
    })
    .createTable(t.locks, (table) => {
      binary(table)
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
    .dropTableIfExists(t.accounts)
    .dropTableIfExists(t.heartbeats)
    .dropTableIfExists(t.locks)
    .dropTableIfExists(t.webhookSecrets)
    .dropTableIfExists(t.executionIntents)
    .dropTableIfExists(t.escrowDeposits)
    .dropTableIfExists(t.webhookDeliveries)
    .dropTableIfExists(t.recipients)
    .dropTableIfExists(t.payoutEvents)
    .dropTableIfExists(t.payouts)
}

/**
 * The indexes that keep the hot queries index-driven on a ledger of millions of payouts
 * (issue #20): the health report, the reconciler's and the escrow job's queries, replay by
 * time, pruning. A second migration (`add_payouts_indexes`), so an install whose tables
 * exist already gets them too. Named, so `dropPayoutsIndexes` can remove them.
 */
export function payoutsIndexes(prefix = DEFAULT_TABLE_PREFIX) {
  const t = tableNames(prefix)
  return [
    // stuck payouts (health): non-terminal ones created before a cutoff.
    { table: t.payouts, columns: ['status', 'created_at'] },
    // the newest delivery (health), payouts:replay --since/--until.
    { table: t.webhookDeliveries, columns: ['received_at'] },
    // pruning: processed rows past their retention, oldest first. With the state in front:
    // SQLite, which has no statistics, prefers an index that matches an equality.
    { table: t.webhookDeliveries, columns: ['state', 'processed_at'] },
    // the deposit a change confirmed (after COMMIT and on renotify).
    { table: t.escrowDeposits, columns: ['confirmed_by_event_id'] },
    // the escrow fallback job's due deposits, oldest on-chain confirmation first.
    { table: t.escrowDeposits, columns: ['state', 'tx_confirmed_at'] },
  ].map((index) => ({ ...index, name: `${index.table}_${index.columns.join('_')}_index` }))
}

/** Adds the indexes of `payoutsIndexes` to existing tables (the second migration's `up`). */
export function createPayoutsIndexes(schema: Knex.SchemaBuilder, prefix = DEFAULT_TABLE_PREFIX) {
  for (const index of payoutsIndexes(prefix)) {
    schema.alterTable(index.table, (table) => {
      table.index(index.columns, index.name)
    })
  }
  return schema
}

/** Removes them (the second migration's `down`). */
export function dropPayoutsIndexes(schema: Knex.SchemaBuilder, prefix = DEFAULT_TABLE_PREFIX) {
  for (const index of payoutsIndexes(prefix)) {
    schema.alterTable(index.table, (table) => {
      table.dropIndex(index.columns, index.name)
    })
  }
  return schema
}

/**
 * What the third migration (`add_payouts_leases`) adds to tables an earlier version created:
 * - `execution_intents.key_origin`: `app` when the key is the app's own (kept as long as the
 *   payout it made: pruning never makes an app's key new again), `plugin` when the plugin
 *   made it; null on rows from before, which pruning treats as the app's.
 * - `payout_events.notify_owner` / `notify_until`: the per-change lease on its notification,
 *   held by the one live process that fires the change's app events and broadcasts.
 * - `heartbeats`: when the worker and each job last ran, per process, for health.
 */
export function createPayoutsLeases(schema: Knex.SchemaBuilder, prefix = DEFAULT_TABLE_PREFIX) {
  const t = tableNames(prefix)
  const mysql = buildsForMysql(schema)
  const at = (table: Knex.CreateTableBuilder | Knex.AlterTableBuilder, name: string) =>
    mysql ? table.datetime(name, { precision: 3 }) : table.timestamp(name, { useTz: true })
  return schema
    .alterTable(t.executionIntents, (table) => {
      table.string('key_origin', 8).nullable()
    })
    .alterTable(t.payoutEvents, (table) => {
      table.string('notify_owner', 64).nullable()
      at(table, 'notify_until').nullable()
    })
    .createTable(t.heartbeats, (table) => oneAccountHeartbeats(table, mysql, at))
}

/**
 * The heartbeats table of the third migration (and of the fifth's `down`): one row per beat
 * source, `worker`, `job:reconcile`, ... (and the process that beat).
 */
function oneAccountHeartbeats(
  table: Knex.CreateTableBuilder,
  mysql: boolean,
  at: (table: Knex.CreateTableBuilder, name: string) => Knex.ColumnBuilder
) {
  if (mysql) {
    table.charset('utf8mb4')
    table.collate('utf8mb4_bin')
  }
  table.string('name', 191).notNullable().primary()
  table.string('owner', 128).nullable()
  at(table, 'beat_at').notNullable()
}

/** Removes them (the third migration's `down`). */
export function dropPayoutsLeases(schema: Knex.SchemaBuilder, prefix = DEFAULT_TABLE_PREFIX) {
  const t = tableNames(prefix)
  return schema
    .dropTableIfExists(t.heartbeats)
    .alterTable(t.payoutEvents, (table) => {
      table.dropColumn('notify_owner')
      table.dropColumn('notify_until')
    })
    .alterTable(t.executionIntents, (table) => {
      table.dropColumn('key_origin')
    })
}

/**
 * What the fourth migration (`add_payouts_trace_context`) adds: `trace_parent`, the W3C
 * `traceparent` (55 characters) of the context a delivery was received in
 * (`webhook_deliveries`) and of the execute that made an intent (`execution_intents`), so
 * that the batch that applies the delivery, maybe in another process, and a recovery run
 * that re-sends the intent link to them. Null where no OpenTelemetry SDK was registered.
 * Nullable columns with no default: added without rewriting the tables.
 */
export function createPayoutsTraceContext(
  schema: Knex.SchemaBuilder,
  prefix = DEFAULT_TABLE_PREFIX
) {
  const t = tableNames(prefix)
  return schema
    .alterTable(t.webhookDeliveries, (table) => {
      table.string('trace_parent', 64).nullable()
    })
    .alterTable(t.executionIntents, (table) => {
      table.string('trace_parent', 64).nullable()
    })
}

/** Removes them (the fourth migration's `down`). */
export function dropPayoutsTraceContext(schema: Knex.SchemaBuilder, prefix = DEFAULT_TABLE_PREFIX) {
  const t = tableNames(prefix)
  return schema
    .alterTable(t.executionIntents, (table) => {
      table.dropColumn('trace_parent')
    })
    .alterTable(t.webhookDeliveries, (table) => {
      table.dropColumn('trace_parent')
    })
}

/**
 * The unique keys that become per account in the fifth migration: an id the service gave
 * (or the app's idempotency key) is unique within its account, never across accounts.
 */
function accountKeys(prefix: string) {
  const t = tableNames(prefix)
  return [
    { table: t.payouts, column: 'payout_uuid', lookedUpAlone: true },
    { table: t.payouts, column: 'read_id', lookedUpAlone: true },
    { table: t.recipients, column: 'remote_id', lookedUpAlone: true },
    { table: t.webhookDeliveries, column: 'delivery_id', lookedUpAlone: false },
    { table: t.escrowDeposits, column: 'quote_id', lookedUpAlone: true },
    { table: t.executionIntents, column: 'idempotency_key', lookedUpAlone: false },
    { table: t.webhookSecrets, column: 'subscription_id', lookedUpAlone: false },
  ]
}

/** The tables whose rows carry their account (all but the locks, whose keys name it). */
function accountTables(prefix: string) {
  const t = tableNames(prefix)
  return [
    t.payouts,
    t.payoutEvents,
    t.recipients,
    t.webhookDeliveries,
    t.escrowDeposits,
    t.executionIntents,
    t.webhookSecrets,
  ]
}

/**
 * What the fifth migration (`add_payouts_accounts`) adds, so that one app can hold several
 * accounts (docs/accounts.md):
 * - an `account` column on every ledger table, `main` on the rows from before (a
 *   one-account config is the account `main`);
 * - the unique keys per account (`account` first): the same delivery id, payout id or
 *   idempotency key in two accounts is two rows;
 * - `accounts`: the environment (sandbox or production) each account's key had when it first
 *   used the ledger, so a live key never takes over a sandbox account's rows (or the reverse),
 *   and a fingerprint of the key it last used, so two accounts' keys swapped are refused;
 * - `heartbeats` again, keyed by account and name (its rows are rewritten within an interval).
 */
export function createPayoutsAccounts(schema: Knex.SchemaBuilder, prefix = DEFAULT_TABLE_PREFIX) {
  const t = tableNames(prefix)
  const mysql = buildsForMysql(schema)
  const at = (table: Knex.CreateTableBuilder, name: string) =>
    mysql ? table.datetime(name, { precision: 3 }) : table.timestamp(name, { useTz: true })
  const binary = (table: Knex.CreateTableBuilder) => {
    if (!mysql) return
    table.charset('utf8mb4')
    table.collate('utf8mb4_bin')
  }
  for (const name of accountTables(prefix)) {
    schema.alterTable(name, (table) => {
      table.string('account', 64).notNullable().defaultTo(DEFAULT_ACCOUNT)
    })
  }
  for (const key of accountKeys(prefix)) {
    schema.alterTable(key.table, (table) => {
      table.dropUnique([key.column])
      table.unique(['account', key.column], { indexName: accountKeyName(key.table, key.column) })
      // A host app looks a payout (or its escrow deposit, its recipient) up by the service's
      // id alone (`Payout.findBy('payoutUuid', id)`): that stays an index read.
      if (key.lookedUpAlone) table.index([key.column], lookupName(key.table, key.column))
    })
  }
  return schema
    .dropTableIfExists(t.heartbeats)
    .createTable(t.heartbeats, (table) => {
      binary(table)
      table.string('account', 64).notNullable()
      // `worker`, `job:reconcile`, ...
      table.string('name', 120).notNullable()
      table.string('owner', 128).nullable()
      at(table, 'beat_at').notNullable()
      table.primary(['account', 'name'])
    })
    .createTable(t.accounts, (table) => {
      binary(table)
      table.string('name', 64).notNullable().primary()
      table.string('environment', 16).notNullable()
      // A SHA-256 prefix of the key it last used (never the key): a key two accounts swap
      // is refused.
      table.string('key_fingerprint', 64).nullable().index()
      at(table, 'created_at').notNullable()
    })
}

function accountKeyName(table: string, column: string) {
  return `${table}_account_${column}_unique`
}

function lookupName(table: string, column: string) {
  return `${table}_${column}_lookup`
}

/**
 * Removes them (the fifth migration's `down`). Refused by the database when two accounts
 * hold the same id: the one-account keys cannot hold both.
 */
export function dropPayoutsAccounts(schema: Knex.SchemaBuilder, prefix = DEFAULT_TABLE_PREFIX) {
  const t = tableNames(prefix)
  const mysql = buildsForMysql(schema)
  const at = (table: Knex.CreateTableBuilder, name: string) =>
    mysql ? table.datetime(name, { precision: 3 }) : table.timestamp(name, { useTz: true })
  for (const key of accountKeys(prefix)) {
    schema.alterTable(key.table, (table) => {
      if (key.lookedUpAlone) table.dropIndex([key.column], lookupName(key.table, key.column))
      table.dropUnique(['account', key.column], accountKeyName(key.table, key.column))
      table.unique([key.column])
    })
  }
  for (const name of accountTables(prefix)) {
    schema.alterTable(name, (table) => {
      table.dropColumn('account')
    })
  }
  return schema
    .dropTableIfExists(t.accounts)
    .dropTableIfExists(t.heartbeats)
    .createTable(t.heartbeats, (table) => oneAccountHeartbeats(table, mysql, at))
}

/**
 * What the sixth migration (`add_payouts_provider_metadata_at`) adds:
 * `payouts.provider_metadata_at`, when the routing detail kept in `provider_metadata` (a
 * column of the first migration) was observed. The ledger keeps a payout's latest
 * `providerMetadata`, and a read taken earlier but applied later must not replace a newer
 * one: this is what it is compared with. Null on rows from before and while no read has
 * given the detail. A nullable column with no default: added without rewriting the table.
 */
export function createPayoutsProviderMetadataAt(
  schema: Knex.SchemaBuilder,
  prefix = DEFAULT_TABLE_PREFIX
) {
  const mysql = buildsForMysql(schema)
  return schema.alterTable(tableNames(prefix).payouts, (table) => {
    if (mysql) table.datetime('provider_metadata_at', { precision: 3 }).nullable()
    else table.timestamp('provider_metadata_at', { useTz: true }).nullable()
  })
}

/** Removes it (the sixth migration's `down`); the metadata itself stays. */
export function dropPayoutsProviderMetadataAt(
  schema: Knex.SchemaBuilder,
  prefix = DEFAULT_TABLE_PREFIX
) {
  return schema.alterTable(tableNames(prefix).payouts, (table) => {
    table.dropColumn('provider_metadata_at')
  })
}

/**
 * The statuses a payout ends in, as the seventh migration knew them: written here, not
 * imported, so that the migration does what it did when it was written.
 */
const TERMINAL = ['completed', 'failed', 'cancelled']

/** The index of the seventh migration: the reconciler's ended payouts still to read. */
function metadataDueName(table: string) {
  return `${table}_account_metadata_due_index`
}

/**
 * What the seventh migration (`add_payouts_provider_metadata_due`) adds:
 * `payouts.provider_metadata_due_at`, the time a payout ended while the routing detail of its
 * end is not read yet (null otherwise), and an `(account, provider_metadata_due_at)` index.
 * The reconciler reads each payout that ended within 24 h once for that detail; without the
 * mark it read every payout that ended within the window, read or not, on each run (about
 * 30,000 rows at 1,000,000 payouts, 12 ms on SQLite), where it now reads those due alone.
 * The ledger sets and clears it as it applies observations. Payouts that ended before the
 * migration and are not read since are marked here (every one of them: the window is the
 * reconciler's to apply).
 */
export function createPayoutsProviderMetadataDue(
  schema: Knex.SchemaBuilder,
  prefix = DEFAULT_TABLE_PREFIX
) {
  const mysql = buildsForMysql(schema)
  const payouts = tableNames(prefix).payouts
  const terminal = TERMINAL.map(() => '?').join(', ')
  return schema
    .alterTable(payouts, (table) => {
      if (mysql) table.datetime('provider_metadata_due_at', { precision: 3 }).nullable()
      else table.timestamp('provider_metadata_due_at', { useTz: true }).nullable()
      table.index(['account', 'provider_metadata_due_at'], metadataDueName(payouts))
    })
    .raw(
      // The schema builder's raw takes no bindings: its client's raw writes them in.
      (schema as unknown as { client: Knex.Client }).client
        .raw(
          `update ?? set ?? = ?? where ?? in (${terminal}) and ?? is not null and (?? is null or ?? < ??)`,
          [
            payouts,
            'provider_metadata_due_at',
            'status_changed_at',
            'status',
            ...TERMINAL,
            'status_changed_at',
            'provider_metadata_at',
            'provider_metadata_at',
            'status_changed_at',
          ]
        )
        .toQuery()
    )
}

/** Removes them (the seventh migration's `down`). */
export function dropPayoutsProviderMetadataDue(
  schema: Knex.SchemaBuilder,
  prefix = DEFAULT_TABLE_PREFIX
) {
  const payouts = tableNames(prefix).payouts
  return schema.alterTable(payouts, (table) => {
    table.dropIndex(['account', 'provider_metadata_due_at'], metadataDueName(payouts))
    table.dropColumn('provider_metadata_due_at')
  })
}
