import { test } from '@japa/runner'
import { DateTime } from 'luxon'
import { dbDate } from '../../src/database/dates.ts'
import {
  createPayoutsAccounts,
  createPayoutsIndexes,
  createPayoutsLeases,
  createPayoutsProviderMetadataAt,
  createPayoutsTables,
  createPayoutsTraceContext,
  dropPayoutsProviderMetadataAt,
  dropPayoutsTables,
  tableNames,
} from '../../src/database/schema.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { Payout } from '../../src/models/main.ts'
import type { ProviderMetadata } from '../../src/schemas/resources.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

const UUID = '0f4e8c2a-6b1d-4a3e-9f7c-5d2b8e1a4c6f'
const OTHER_UUID = '7a9c1e3b-2d4f-4b6a-8c0e-1f3a5b7d9e2c'

test.group(`Database | the provider metadata migration (${TEST_DB})`, () => {
  test('on a ledger of the first five migrations: adds provider_metadata_at, the ledger orders reads by it, and down takes it away keeping every row', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'metadata_migration', {
      createTables: false,
    })
    const sql = db.connection()
    const schema = () => sql.schema
    await createPayoutsAccounts(
      createPayoutsTraceContext(
        createPayoutsLeases(
          createPayoutsIndexes(createPayoutsTables(schema(), prefix), prefix),
          prefix
        ),
        prefix
      ),
      prefix
    )
    cleanup(async () => {
      await dropPayoutsTables(schema(), prefix)
    })
    const t = tableNames(prefix)
    const column = () => schema().hasColumn(t.payouts, 'provider_metadata_at')
    assert.isFalse(await column())
    // Rows as the earlier version left them: one observed, one with routing detail in the
    // first migration's text column.
    const at = dbDate(sql)
    const earlier = { status: 'processing', last_observed_at: at, created_at: at, updated_at: at }
    await sql.table(t.payouts).insert({ ...earlier, payout_uuid: UUID, read_id: 'po_old' })
    const kept = JSON.stringify({ version: 1, offramp: { protocol: 'rt_x', status: 'sent' } })
    await sql
      .table(t.payouts)
      .insert({ ...earlier, payout_uuid: OTHER_UUID, provider_metadata: kept })

    await createPayoutsProviderMetadataAt(schema(), prefix)
    assert.isTrue(await column())
    const old = await Payout.findByOrFail('payoutUuid', OTHER_UUID)
    assert.deepEqual(old.providerMetadata, JSON.parse(kept))
    assert.isNull(old.providerMetadataAt)

    // A read of the old payout: stored, with when it was observed.
    const ledger = new PayoutLedger(db)
    const readAt = DateTime.fromISO('2026-03-01T10:00:00Z')
    const metadata = { version: 1, onramp: { protocol: 'rt_on', status: 'processing' } }
    const read = (observedAt: DateTime, providerMetadata: ProviderMetadata) =>
      ledger.apply({
        payoutId: UUID,
        status: 'processing',
        source: 'poll',
        eventType: 'reconcile',
        observedAt,
        fields: { providerMetadata },
      })
    await read(readAt, metadata)
    await read(readAt.minus({ minutes: 1 }), { version: 1, onramp: { status: 'older' } })
    const upgraded = await Payout.findByOrFail('payoutUuid', UUID)
    assert.deepEqual(upgraded.providerMetadata, metadata)
    assert.equal(upgraded.providerMetadataAt!.toMillis(), readAt.toMillis())

    await dropPayoutsProviderMetadataAt(schema(), prefix)
    assert.isFalse(await column())
    const rows = await sql
      .from(t.payouts)
      .select('payout_uuid', 'provider_metadata')
      .orderBy('payout_uuid', 'asc')
    assert.deepEqual(
      rows.map((row) => [row.payout_uuid, JSON.parse(row.provider_metadata)]),
      [
        [UUID, metadata],
        [OTHER_UUID, JSON.parse(kept)],
      ]
    )
    // The unique payout id is still there after SQLite's rebuild of the table.
    await assert.rejects(() =>
      sql.table(t.payouts).insert({ ...earlier, payout_uuid: UUID, account: 'main' })
    )
  })
})
