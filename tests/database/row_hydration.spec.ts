import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import fc from 'fast-check'
import { DateTime } from 'luxon'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import Payout from '../../src/models/payout.ts'
import { dirtyAttributes, hydrateOriginals, hydrateRow } from '../../src/models/row_hydration.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

/** Two attribute maps hold the same values: DateTimes by `equals` (as Lucid compares them), the rest deeply. */
function sameValues(
  actual: Record<string, unknown>,
  expected: Record<string, unknown>,
  assert: any
) {
  assert.deepEqual(Object.keys(actual), Object.keys(expected))
  for (const key of Object.keys(expected)) {
    const [a, e] = [actual[key], expected[key]]
    if (DateTime.isDateTime(e)) {
      assert.isTrue(DateTime.isDateTime(a) && a.equals(e), `${key}: ${String(a)} for ${e.toISO()}`)
    } else {
      assert.deepEqual(a, e, key)
    }
  }
}

/** Two payouts of every kind the ledger holds: a bare pending one, and one with every column filled. */
async function seed(prefix: string) {
  const bare = randomUUID()
  const full = randomUUID()
  await Payout.create({ account: 'default', payoutUuid: bare, status: 'pending' })
  await Payout.create({
    account: 'default',
    payoutUuid: full,
    readId: `po_${prefix}`,
    ownerId: 'user-7',
    status: 'completed',
    step: 'delivered',
    sourceAmount: '100.25',
    fees: { total: '1.5', lines: [{ kind: 'fx', amount: '0.5' }] },
    providerMetadata: {
      onramp: { protocol: 'ach', status: 'settled', legs: [{ id: 'l1' }] },
    } as never,
    providerMetadataAt: DateTime.utc(2026, 11, 28, 1, 2, 3),
    instructions: { iban: 'DE89', nested: { deep: [1, 2, { three: 3 }] } },
    lastObservedAt: DateTime.utc(2026, 11, 28, 1, 2, 4),
    statusChangedAt: DateTime.utc(2026, 11, 28, 1, 2, 5),
    completedAt: DateTime.utc(2026, 11, 28, 1, 2, 6),
  })
  return { bare, full }
}

/** The suite's database with the two payouts of `seed`, and its connection. */
async function seeded(cleanup: (fn: () => Promise<void>) => void) {
  const { db, prefix } = await setupDatabase(cleanup, 'row-hydration')
  return { db, client: db.connection(), ...(await seed(prefix)) }
}

async function rowsOf(client: QueryClientContract, extra = false) {
  // As the applier reads them: the model's query, as plain rows.
  const query = Payout.query({ client }).select('*').orderBy('id', 'asc')
  if (extra) query.select(client.raw('1 as extra_column'))
  return query.pojo<Record<string, unknown>>()
}

test.group(`Row hydration (${TEST_DB})`, () => {
  test('hydrateRow makes the model Lucid makes: attributes, originals, persisted, bound to the transaction', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await seeded(cleanup)
    const trx = await db.connection().transaction()
    cleanup(() => trx.rollback())
    const rows = await rowsOf(trx)
    assert.lengthOf(rows, 2)
    for (const raw of rows) {
      const lucid = Payout.$createFromAdapterResult(raw, undefined, { client: trx })!
      const fast = hydrateRow(Payout, raw, trx)
      assert.instanceOf(fast, Payout)
      sameValues(fast.$attributes, lucid.$attributes, assert)
      sameValues(fast.$original, lucid.$original, assert)
      assert.isTrue(fast.$isPersisted)
      assert.isFalse(fast.$isLocal)
      assert.deepEqual(fast.$dirty, {})
      assert.strictEqual(fast.$trx, trx)
      assert.deepEqual(fast.$extras, lucid.$extras)
      // The getters read through the model as Lucid's do.
      assert.equal(fast.payoutUuid, lucid.payoutUuid)
      assert.deepEqual(fast.providerMetadata, lucid.providerMetadata)
      assert.equal(fast.createdAt.zoneName, 'UTC')
      assert.deepEqual(fast.serialize(), lucid.serialize())
    }
  })

  test('its originals are copies: a nested change of a JSON column makes the row dirty, as with Lucid', async ({
    assert,
    cleanup,
  }) => {
    const { client, full } = await seeded(cleanup)
    const raw = (await rowsOf(client)).find((row) => row.payout_uuid === full)!
    const fast = hydrateRow(Payout, raw, client)
    const lucid = Payout.$createFromAdapterResult(raw, undefined, { client })!
    for (const row of [fast, lucid]) {
      ;(row.instructions as any).nested.deep[2].three = 4
      ;(row.providerMetadata as any).onramp.legs.push({ id: 'l2' })
    }
    assert.sameMembers(Object.keys(fast.$dirty), ['instructions', 'providerMetadata'])
    assert.deepEqual(Object.keys(fast.$dirty), Object.keys(lucid.$dirty))
    // Saved, then read again: the change went out.
    await fast.save()
    const again = await Payout.findByOrFail('payoutUuid', full)
    assert.equal((again.instructions as any).nested.deep[2].three, 4)
    assert.lengthOf((again.providerMetadata as any).onramp.legs, 2)
  })

  test('a row with a column the model does not declare is left to Lucid ($extras)', async ({
    assert,
    cleanup,
  }) => {
    const { client } = await seeded(cleanup)
    const [raw] = await rowsOf(client, true)
    const fast = hydrateRow(Payout, raw, client)
    assert.equal(Number(fast.$extras.extra_column), 1)
    assert.deepEqual(fast.$dirty, {})
  })

  test('a JSON key named __proto__ stays a key of the originals: the row is not changed by being read', async ({
    assert,
    cleanup,
  }) => {
    const { client, bare } = await seeded(cleanup)
    // As a payload would carry it, deep in a JSON column (JSON.parse makes it an own key).
    const fees = JSON.parse('{"extra":{"__proto__":{"polluted":true}},"total":"1"}')
    await Payout.query({ client })
      .where('payoutUuid', bare)
      .update({ fees: JSON.stringify(fees) })
    const raw = (await rowsOf(client)).find((row) => row.payout_uuid === bare)!
    const fast = hydrateRow(Payout, raw, client)
    assert.deepEqual(dirtyAttributes(fast), [])
    assert.deepEqual(JSON.parse(JSON.stringify(fast.$original.fees)), fees)
    // Never the copy's prototype, nor anybody's.
    assert.isUndefined((fast.$original.fees as any).extra.polluted)
    assert.isUndefined(({} as any).polluted)
    hydrateOriginals(fast)
    assert.deepEqual(dirtyAttributes(fast), [])
    assert.isUndefined((fast.$original.fees as any).extra.polluted)
  })

  test('dirtyAttributes and hydrateOriginals agree with $dirty and $hydrateOriginals after any changes', async ({
    assert,
    cleanup,
  }) => {
    const { client } = await seeded(cleanup)
    const rows = await rowsOf(client)
    const at = DateTime.utc(2026, 11, 28, 1, 2, 5)
    /** Each change a batch makes to a row, and the ones that only look like changes. */
    const change = fc.constantFrom(
      (row: Payout) => (row.status = 'failed'),
      (row: Payout) => (row.status = `${row.status}` as Payout['status']),
      (row: Payout) => (row.step = null),
      (row: Payout) => (row.readId = row.readId ?? 'po_new'),
      (row: Payout) => (row.statusChangedAt = at),
      // The same instant in another zone: Lucid's `equals` calls it a change.
      (row: Payout) => (row.statusChangedAt = at.setZone('Asia/Kolkata')),
      (row: Payout) => (row.lastObservedAt = at.plus({ minutes: 1 })),
      (row: Payout) => (row.providerMetadata = structuredClone(row.providerMetadata)),
      (row: Payout) => (row.providerMetadata = { onramp: { status: 'new' } } as never),
      (row: Payout) => ((row.fees ??= {}).total = '2'),
      (row: Payout) =>
        (row.updatedAt = DateTime.fromMillis(row.updatedAt.toMillis(), { zone: 'utc' }))
    )
    fc.assert(
      fc.property(
        fc.nat({ max: rows.length - 1 }),
        fc.array(change, { maxLength: 6 }),
        (index, changes) => {
          const fast = hydrateRow(Payout, rows[index], client)
          const lucid = Payout.$createFromAdapterResult(rows[index], undefined, { client })!
          for (const apply of changes) {
            apply(fast)
            apply(lucid)
          }
          assert.deepEqual(dirtyAttributes(fast), Object.keys(fast.$dirty))
          assert.deepEqual(dirtyAttributes(fast), Object.keys(lucid.$dirty))
          hydrateOriginals(fast)
          lucid.$hydrateOriginals()
          assert.deepEqual(fast.$dirty, {})
          sameValues(fast.$original, lucid.$original, assert)
          // Copies again: a nested change after it is a change.
          if (fast.fees) {
            fast.fees.total = 'changed'
            assert.include(dirtyAttributes(fast), 'fees')
          }
        }
      ),
      { numRuns: 300 }
    )
  })
})
