import { randomBytes } from 'node:crypto'
import { test } from '@japa/runner'
import { DateTime } from 'luxon'
import {
  createPayoutsIndexes,
  createPayoutsLeases,
  createPayoutsTables,
  createPayoutsTraceContext,
  dropPayoutsTables,
  dropPayoutsTraceContext,
  tableNames,
} from '../../src/database/schema.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { PayoutEvent, WebhookDelivery } from '../../src/models/main.ts'
import { InboxStore } from '../../src/webhooks/inbox_store.ts'
import { connectionConfig, setupDatabase, TEST_DB } from '../helpers/database.ts'

/** A delivery as the route hands it to the inbox. */
const delivery = (deliveryId: string, rawBody = Buffer.from('{}')) => ({
  deliveryId,
  eventType: 'payout.created',
  rawBody,
  signatureHeader: null,
  source: 'webhook' as const,
})

test.group(`Database | the plugin's tables (${TEST_DB})`, () => {
  test('ids are compared byte for byte: delivery ids that differ only in case are two deliveries', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'schema')
    const store = new InboxStore(db, tableNames(prefix).webhookDeliveries)
    // One at a time (the unique index decides), then together (the group-commit read decides).
    assert.equal(await store.insert(delivery('dlv_Case')), 'stored')
    assert.equal(await store.insert(delivery('dlv_case')), 'stored')
    assert.deepEqual(
      await Promise.all(
        ['dlv_CASE', 'dlv_cAse', 'dlv_case'].map((id) => store.insert(delivery(id)))
      ),
      ['stored', 'stored', 'duplicate']
    )
    assert.equal(
      await WebhookDelivery.query()
        .where('deliveryId', 'dlv_case')
        .count('* as n')
        .then((r) => Number(r[0].$extras.n)),
      1
    )
  })

  test('a body of 256 KB, the largest the route takes, is stored and read back byte for byte', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'schema')
    const store = new InboxStore(db, tableNames(prefix).webhookDeliveries)
    const body = randomBytes(256 * 1024)
    assert.equal(await store.insert(delivery('dlv_large', body)), 'stored')
    const [row] = await store.claimDue(new Date(), 10, 60_000)
    assert.equal(row.deliveryId, 'dlv_large')
    assert.isTrue(row.rawBody.equals(body))
  })

  test('the trace context migration adds trace_parent to deliveries and intents; down takes it away', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'schema', { createTables: false })
    const schema = () => db.connection().schema
    // The tables as the first three migrations leave them.
    await createPayoutsLeases(
      createPayoutsIndexes(createPayoutsTables(schema(), prefix), prefix),
      prefix
    )
    cleanup(async () => {
      await dropPayoutsTables(schema(), prefix)
    })
    const t = tableNames(prefix)
    const columns = () =>
      Promise.all(
        [t.webhookDeliveries, t.executionIntents].map((table) =>
          schema().hasColumn(table, 'trace_parent')
        )
      )
    assert.deepEqual(await columns(), [false, false])

    // Rows written by hand: the inbox of today also writes the fifth migration's account.
    const insert = (deliveryId: string, more: Record<string, unknown> = {}) =>
      db.table(t.webhookDeliveries).insert({
        delivery_id: deliveryId,
        event_type: 'payout.created',
        raw_body: '',
        source: 'webhook',
        state: 'pending',
        received_at: new Date(),
        ...more,
      })

    await createPayoutsTraceContext(schema(), prefix)
    assert.deepEqual(await columns(), [true, true])
    const traceParent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'
    await insert('dlv_traced', { trace_parent: traceParent })
    const row = await db.from(t.webhookDeliveries).where('delivery_id', 'dlv_traced').first()
    assert.equal(row.trace_parent, traceParent)

    await dropPayoutsTraceContext(schema(), prefix)
    assert.deepEqual(await columns(), [false, false])
    // The rest of the table is as it was: its rows, and its unique delivery id.
    const kept = await db.from(t.webhookDeliveries).select('delivery_id')
    assert.deepEqual(kept, [{ delivery_id: 'dlv_traced' }])
    await insert('dlv_after')
    await assert.rejects(() => insert('dlv_traced'))
  })

  test('a timestamp past 2038 is kept as given', async ({ assert, cleanup }) => {
    const { db } = await setupDatabase(cleanup, 'schema')
    const observedAt = DateTime.fromISO('2040-06-01T12:00:00Z')
    await new PayoutLedger(db).apply({
      payoutId: 'po_far',
      status: 'pending',
      source: 'poll',
      observedAt,
    })
    const logged = await PayoutEvent.query().where('payoutUuid', 'po_far').firstOrFail()
    assert.equal(logged.observedAt.toMillis(), observedAt.toMillis())
    // Stored as its UTC wall clock (SQLite's text), whatever the process's zone.
    const raw = await db.connection().from(PayoutEvent.table).select('observed_at').first()
    if (TEST_DB === 'sqlite') assert.match(raw.observed_at, /^2040-06-01 12:00:00/)
  })

  test('a timestamp stays as written when another column of its row changes, on a server with explicit_defaults_for_timestamp off', async ({
    assert,
    cleanup,
  }) => {
    // MySQL 5.7 and MariaDB before 10.10 default to off: there, the first TIMESTAMP NOT NULL
    // column of a table is given DEFAULT and ON UPDATE CURRENT_TIMESTAMP behind the
    // migration's back. The tables are created, and written, in such sessions.
    const base = connectionConfig('schema') as any
    const connection = {
      ...base,
      pool: {
        ...base.pool,
        afterCreate: (raw: any, done: (error: unknown, raw: unknown) => void) =>
          raw.query('SET SESSION explicit_defaults_for_timestamp = OFF', (error: unknown) =>
            done(error, raw)
          ),
      },
    }
    const { db } = await setupDatabase(cleanup, 'schema', { connection })
    const observedAt = DateTime.fromISO('2026-01-01T00:00:00Z')
    await new PayoutLedger(db).apply({
      payoutId: 'po_1',
      status: 'pending',
      source: 'poll',
      observedAt,
    })
    const logged = await PayoutEvent.query().where('payoutUuid', 'po_1').firstOrFail()
    logged.notifiedAt = DateTime.now()
    await logged.save()
    await logged.refresh()
    assert.equal(logged.observedAt.toMillis(), observedAt.toMillis())
  }).skip(TEST_DB !== 'mysql', 'a MySQL/MariaDB setting')
})
