import { test } from '@japa/runner'
import type { Database } from '@adonisjs/lucid/database'
import { dbDate } from '../../src/database/dates.ts'
import {
  createPayoutsAccounts,
  createPayoutsIndexes,
  createPayoutsLeases,
  createPayoutsTables,
  createPayoutsTraceContext,
  dropPayoutsAccounts,
  dropPayoutsTables,
  tableNames,
} from '../../src/database/schema.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

const UUID = '0f4e8c2a-6b1d-4a3e-9f7c-5d2b8e1a4c6f'
const OTHER_UUID = '7a9c1e3b-2d4f-4b6a-8c0e-1f3a5b7d9e2c'
/** A unique key's refusal, in the words of SQLite, PostgreSQL and MySQL. */
const UNIQUE = /unique|duplicate/i

type Row = Record<string, unknown>

/**
 * One row of every ledger table as an app of one account has it (no `account` column yet),
 * and, per unique key of the fifth migration, a row that repeats that key only.
 */
function oldRows(db: Database, prefix: string) {
  const t = tableNames(prefix)
  const at = dbDate(db.connection())
  const stamps = { created_at: at, updated_at: at }
  const payout = { payout_uuid: UUID, read_id: 'po_old', status: 'pending', ...stamps }
  const recipient = { remote_id: OTHER_UUID, ...stamps }
  const delivery = {
    delivery_id: 'dlv_old',
    event_type: 'payout.created',
    raw_body: 'e30=',
    source: 'webhook',
    state: 'processed',
    received_at: at,
  }
  const deposit = { quote_id: 'qt_old', state: 'awaiting_deposit', ...stamps }
  const intent = {
    idempotency_key: 'key-old',
    flow: 'fiat_to_fiat',
    request_body: '{}',
    body_hash: 'x'.repeat(64),
    state: 'succeeded',
    ...stamps,
  }
  const secret = { subscription_id: 'sub_old', url: 'https://app.test/wh', secret: 's', ...stamps }
  const rows: Record<string, Row> = {
    [t.payouts]: payout,
    [t.payoutEvents]: {
      payout_uuid: UUID,
      source: 'webhook',
      applied: true,
      observed_at: at,
      created_at: at,
    },
    [t.recipients]: recipient,
    [t.webhookDeliveries]: delivery,
    [t.escrowDeposits]: deposit,
    [t.executionIntents]: intent,
    [t.webhookSecrets]: secret,
  }
  const keys: Array<{ table: string; column: string; row: Row }> = [
    { table: t.payouts, column: 'payout_uuid', row: { ...payout, read_id: 'po_other' } },
    { table: t.payouts, column: 'read_id', row: { ...payout, payout_uuid: OTHER_UUID } },
    { table: t.recipients, column: 'remote_id', row: recipient },
    { table: t.webhookDeliveries, column: 'delivery_id', row: delivery },
    { table: t.escrowDeposits, column: 'quote_id', row: deposit },
    { table: t.executionIntents, column: 'idempotency_key', row: intent },
    { table: t.webhookSecrets, column: 'subscription_id', row: secret },
  ]
  return { rows, keys, heartbeat: { name: 'worker', owner: 'host:1', beat_at: at } }
}

test.group(`Database | the accounts migration (${TEST_DB})`, () => {
  test('on a ledger of the first four migrations: its rows become main, each unique key per account, and down restores the old shape', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'accounts_migration', {
      createTables: false,
    })
    const sql = db.connection()
    const schema = () => sql.schema
    await createPayoutsTraceContext(
      createPayoutsLeases(
        createPayoutsIndexes(createPayoutsTables(schema(), prefix), prefix),
        prefix
      ),
      prefix
    )
    cleanup(async () => {
      await dropPayoutsTables(schema(), prefix)
    })
    const t = tableNames(prefix)
    const { rows, keys, heartbeat } = oldRows(db, prefix)
    for (const [table, row] of Object.entries(rows)) await sql.table(table).insert(row)
    await sql.table(t.heartbeats).insert(heartbeat)
    const tables = Object.keys(rows)
    const accountsOf = async (table: string) =>
      (await sql.from(table).select('account')).map((row) => row.account)
    const counts = () =>
      Promise.all(tables.map(async (table) => (await sql.from(table).select('id')).length))

    await createPayoutsAccounts(schema(), prefix)
    for (const table of tables) assert.deepEqual(await accountsOf(table), ['main'], table)
    assert.isTrue(await schema().hasTable(t.accounts))
    // The old one-account ledger is the `main` account's: its ledger moves the old row.
    await new PayoutLedger(db).apply({ payoutId: UUID, status: 'processing', source: 'poll' })
    const moved = await sql.from(t.payouts).where('payout_uuid', UUID).select('status')
    assert.deepEqual(moved, [{ status: 'processing' }])

    // Another account takes every id main holds; main cannot take any of them twice.
    for (const { table, column, row } of keys) {
      await sql.table(table).insert({ ...row, account: 'eu' })
      await assert.rejects(() => sql.table(table).insert({ ...row, account: 'main' }), UNIQUE)
      assert.lengthOf(await sql.from(table).where(column, row[column] as string), 2)
    }
    // Heartbeats are per account and name now.
    await sql.table(t.heartbeats).insert({ ...heartbeat, account: 'main' })
    await sql.table(t.heartbeats).insert({ ...heartbeat, account: 'eu' })
    await assert.rejects(
      () => sql.table(t.heartbeats).insert({ ...heartbeat, account: 'eu' }),
      UNIQUE
    )

    // Down, once no two accounts hold the same id: the one-account shape, main's rows kept.
    for (const table of tables) await sql.from(table).where('account', 'eu').delete()
    const kept = await counts()
    await dropPayoutsAccounts(schema(), prefix)
    for (const table of [...tables, t.heartbeats]) {
      assert.isFalse(await schema().hasColumn(table, 'account'), table)
    }
    assert.isFalse(await schema().hasTable(t.accounts))
    assert.deepEqual(await counts(), kept)
    for (const { table, row } of keys)
      await assert.rejects(() => sql.table(table).insert(row), UNIQUE)
    await sql.table(t.heartbeats).insert(heartbeat)
    await assert.rejects(() => sql.table(t.heartbeats).insert(heartbeat), UNIQUE)
  })
})
