import { test } from '@japa/runner'
import { DateTime } from 'luxon'
import { dbDate } from '../../src/database/dates.ts'
import {
  createPayoutsAccounts,
  createPayoutsIndexes,
  createPayoutsLeases,
  createPayoutsProviderMetadataAt,
  createPayoutsProviderMetadataDue,
  createPayoutsTables,
  createPayoutsTraceContext,
  dropPayoutsProviderMetadataAt,
  dropPayoutsProviderMetadataDue,
  dropPayoutsTables,
  tableNames,
} from '../../src/database/schema.ts'
import { Reconciler } from '../../src/jobs/reconciler.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { Payout } from '../../src/models/main.ts'
import type { Payout as RemotePayout, ProviderMetadata } from '../../src/schemas/resources.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

const UUID = '0f4e8c2a-6b1d-4a3e-9f7c-5d2b8e1a4c6f'
const OTHER_UUID = '7a9c1e3b-2d4f-4b6a-8c0e-1f3a5b7d9e2c'

/**
 * A ledger as the first five migrations leave it (and the sixth with `sixth`), its tables
 * dropped after the test.
 */
async function earlierLedger(
  cleanup: (fn: () => Promise<void>) => void,
  name: string,
  options: { sixth?: boolean } = {}
) {
  const { db, prefix } = await setupDatabase(cleanup, name, { createTables: false })
  const sql = db.connection()
  const schema = () => sql.schema
  const fifth = createPayoutsAccounts(
    createPayoutsTraceContext(
      createPayoutsLeases(
        createPayoutsIndexes(createPayoutsTables(schema(), prefix), prefix),
        prefix
      ),
      prefix
    ),
    prefix
  )
  await (options.sixth ? createPayoutsProviderMetadataAt(fifth, prefix) : fifth)
  cleanup(async () => {
    await dropPayoutsTables(schema(), prefix)
  })
  return { db, prefix, sql, schema, t: tableNames(prefix) }
}

test.group(`Database | the provider metadata migration (${TEST_DB})`, () => {
  test('on a ledger of the first five migrations: adds provider_metadata_at, the ledger orders reads by it, and down takes it away keeping every row', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix, sql, schema, t } = await earlierLedger(cleanup, 'metadata_migration')
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

  test('on a ledger of the first six migrations: marks the ended payouts whose detail is unread, the reconciler reads those alone and clears them, down keeps every row', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix, sql, schema, t } = await earlierLedger(cleanup, 'metadata_due_migration', {
      sixth: true,
    })
    const column = () => schema().hasColumn(t.payouts, 'provider_metadata_due_at')
    assert.isFalse(await column())

    // Rows as the sixth migration's version left them, an hour after each payout's end.
    const endedAt = DateTime.now().minus({ hours: 2 }).startOf('second')
    const at = (time: DateTime) => dbDate(sql, time)
    const row = (uuid: string, status: string, readAt: DateTime | null) => ({
      account: 'main',
      payout_uuid: uuid,
      status,
      last_observed_at: at(endedAt.plus({ hours: 1 })),
      status_changed_at: at(endedAt),
      provider_metadata_at: readAt && at(readAt),
      created_at: at(endedAt.minus({ hours: 1 })),
      updated_at: at(endedAt),
    })
    const uuid = (n: number) => `00000000-0000-4000-8000-00000000000${n}`
    await sql.table(t.payouts).multiInsert([
      row(uuid(1), 'completed', null), // ended, never read
      row(uuid(2), 'failed', endedAt.minus({ minutes: 5 })), // read before its end only
      row(uuid(3), 'completed', endedAt.plus({ minutes: 5 })), // read after its end
      row(uuid(4), 'processing', null), // not ended
      row(uuid(5), 'cancelled', endedAt), // read at its end
    ])

    await createPayoutsProviderMetadataDue(schema(), prefix)
    assert.isTrue(await column())
    const marks = async () =>
      Object.fromEntries(
        (
          await sql
            .from(t.payouts)
            .select('payout_uuid', 'provider_metadata_due_at')
            .orderBy('payout_uuid', 'asc')
        ).map((r) => [r.payout_uuid.slice(-1), r.provider_metadata_due_at !== null])
      )
    assert.deepEqual(await marks(), { 1: true, 2: true, 3: false, 4: false, 5: false })
    const marked = await Payout.findByOrFail('payoutUuid', uuid(1))
    assert.equal(marked.providerMetadataDueAt!.toMillis(), endedAt.toMillis())

    // The reconciler reads the two marked, each once (the payout in flight is not stale).
    const reads: string[] = []
    const getPayout = async (id: string) => {
      reads.push(id)
      const status =
        id === uuid(4) ? 'processing' : (await Payout.findByOrFail('payoutUuid', id)).status
      return {
        id,
        status,
        step: null,
        providerMetadata: { version: 1, offramp: { protocol: 'rt_x', status: 'sent' } },
      } as unknown as RemotePayout
    }
    const reconciler = () =>
      new Reconciler({ db, ledger: new PayoutLedger(db), client: { rateLimit: null, getPayout } })
    await reconciler().run({ staleAfterMs: 24 * 3600_000 })
    assert.sameMembers(reads, [uuid(1), uuid(2)])
    assert.deepEqual(await marks(), { 1: false, 2: false, 3: false, 4: false, 5: false })
    reads.length = 0
    await reconciler().run({ staleAfterMs: 24 * 3600_000 })
    assert.deepEqual(reads, [])

    await dropPayoutsProviderMetadataDue(schema(), prefix)
    assert.isFalse(await column())
    const [{ n }] = await sql.from(t.payouts).count('* as n')
    assert.equal(Number(n), 5)
    // The unique payout id is still there after SQLite's rebuild of the table.
    await assert.rejects(() => sql.table(t.payouts).insert(row(uuid(1), 'completed', null)))
  })
})
