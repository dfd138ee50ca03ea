import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import fc from 'fast-check'
import { DateTime } from 'luxon'
import { dbDate } from '../../src/database/dates.ts'
import { saveLockedPayouts } from '../../src/ledger/saved_rows.ts'
import { Payout } from '../../src/models/main.ts'
import { recordStatements, setupDatabase, TEST_DB } from '../helpers/database.ts'

type Cleanup = (fn: () => Promise<void>) => void

/** The columns a test compares: every one but the keys and the time of the save. */
const COMPARED = [
  'status',
  'step',
  'ownerId',
  'flow',
  'transactionType',
  'sourceAmount',
  'sourceCurrency',
  'payoutAmount',
  'payoutCurrency',
  'fees',
  'reference',
  'providerMetadata',
  'instructions',
  'lastObservedAt',
  'statusChangedAt',
  'completedAt',
] as const
type Compared = (typeof COMPARED)[number]

const ZONES = ['UTC', 'Asia/Kolkata', 'America/St_Johns', 'Pacific/Chatham']

/** A date a column may get: whole seconds (SQLite and MySQL keep no fraction), any zone. */
const dateArb = fc
  .tuple(
    fc.integer({ min: Date.UTC(2020, 0, 1) / 1000, max: Date.UTC(2030, 0, 1) / 1000 }),
    fc.constantFrom(...ZONES)
  )
  .map(([seconds, zone]) => DateTime.fromSeconds(seconds, { zone }))

const textArb = fc.string({ minLength: 1, maxLength: 12 })
const jsonArb = fc.dictionary(
  fc.constantFrom('a', 'b', 'route'),
  fc.oneof(fc.string({ maxLength: 8 }), fc.integer(), fc.boolean())
)

/** What a change may set on one column: a value of its kind, or null where it may be null. */
const changeArb: Record<Compared, fc.Arbitrary<unknown>> = {
  status: fc.constantFrom('pending', 'processing', 'completed', 'failed'),
  step: fc.option(fc.constantFrom('initiated', 'collected', 'paid_out')),
  ownerId: fc.option(textArb),
  flow: fc.option(textArb),
  transactionType: fc.option(textArb),
  sourceAmount: fc.option(fc.integer({ min: 1, max: 10 ** 9 }).map(String)),
  sourceCurrency: fc.option(fc.constantFrom('USD', 'EUR', 'USDC')),
  payoutAmount: fc.option(fc.integer({ min: 1, max: 10 ** 9 }).map((n) => `${n}.25`)),
  payoutCurrency: fc.option(fc.constantFrom('MXN', 'BRL')),
  fees: fc.option(jsonArb),
  reference: fc.option(fc.string({ maxLength: 20 })),
  providerMetadata: fc.option(jsonArb),
  instructions: fc.option(jsonArb),
  lastObservedAt: fc.option(dateArb),
  statusChangedAt: fc.option(dateArb),
  completedAt: fc.option(dateArb),
}

/** For each row, the columns it changes (none: a row left as it was). */
const changesArb = (rows: number) =>
  fc.array(
    fc.record(changeArb, { requiredKeys: [] }) as fc.Arbitrary<Partial<Record<Compared, unknown>>>,
    { minLength: rows, maxLength: rows }
  )

/**
 * `count` stored payouts with the same starting columns, new ids, read back whole as the
 * ledger reads the rows it locks.
 */
async function seed(count: number, start: Partial<Record<Compared, unknown>>) {
  const ids: number[] = []
  for (let i = 0; i < count; i++) {
    const row = await Payout.create({
      payoutUuid: randomUUID(),
      status: 'pending',
      ...(start as Partial<Payout>),
    })
    ids.push(row.id)
  }
  return Payout.query().whereIn('id', ids).orderBy('id', 'asc')
}

/** A row as stored, the compared columns only, dates as instants. */
async function stored(id: number) {
  const row = await Payout.findOrFail(id)
  return Object.fromEntries(
    COMPARED.map((column) => {
      const value = row[column] as unknown
      return [column, DateTime.isDateTime(value) ? value.toMillis() : value]
    })
  )
}

async function setup(cleanup: Cleanup) {
  return setupDatabase(cleanup, 'saved_rows')
}

test.group(`saveLockedPayouts (${TEST_DB})`, () => {
  test('stores what row-by-row saves store, for any mix of changed columns', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setup(cleanup)
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2, max: 8 }).chain((n) => fc.tuple(fc.constant(n), changesArb(n))),
        fc.record(changeArb, { requiredKeys: [] }),
        async ([count, changes], start) => {
          const oneByOne = await seed(count, start)
          const together = await seed(count, start)
          const before = DateTime.now().minus({ seconds: 1 })
          const apply = (rows: Payout[]) =>
            rows.forEach((row, index) => row.merge(changes[index] as Partial<Payout>))
          await db.transaction(async (trx) => {
            apply(oneByOne)
            for (const row of oneByOne) {
              row.useTransaction(trx)
              await row.save()
            }
          })
          await db.transaction(async (trx) => {
            apply(together)
            await saveLockedPayouts(trx, together)
          })
          for (let index = 0; index < count; index++) {
            assert.deepEqual(
              await stored(together[index].id),
              await stored(oneByOne[index].id),
              `row ${index}`
            )
            // As clean afterwards as after Lucid's own save.
            assert.deepEqual(together[index].$dirty, oneByOne[index].$dirty, `dirty ${index}`)
            const changed = Object.keys(changes[index]).length > 0
            const updatedAt = (await Payout.findOrFail(together[index].id)).updatedAt
            if (changed) assert.isTrue(updatedAt >= before.startOf('second'), `updated_at ${index}`)
          }
        }
      ),
      { numRuns: 12 }
    )
  })

  test('a row nothing changed is not written: its updated_at stays', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setup(cleanup)
    const rows = await seed(3, {})
    const old = DateTime.fromSeconds(1_700_000_000)
    await Payout.query()
      .whereIn(
        'id',
        rows.map((row) => row.id)
      )
      .update({ updated_at: dbDate(db.connection(), old) })
    const [untouched] = await Payout.query().where('id', rows[0].id)
    const others = await Payout.query().whereIn('id', [rows[1].id, rows[2].id])
    for (const row of others) row.status = 'processing'
    await db.transaction((trx) => saveLockedPayouts(trx, [untouched, ...others]))
    const after = await Payout.findOrFail(rows[0].id)
    assert.equal(after.updatedAt.toMillis(), old.toMillis())
    for (const row of others) {
      assert.equal((await Payout.findOrFail(row.id)).status, 'processing')
    }
  })

  test('rows not read whole (a column never loaded): saved row by row, each as changed', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setup(cleanup)
    const created = [
      await Payout.create({ payoutUuid: randomUUID(), status: 'pending' }),
      await Payout.create({ payoutUuid: randomUUID(), status: 'pending', reference: 'kept' }),
    ]
    created[0].reference = 'first'
    created[1].status = 'processing'
    await db.transaction((trx) => saveLockedPayouts(trx, created))
    const [first, second] = await Promise.all(created.map((row) => Payout.findOrFail(row.id)))
    assert.equal(first.reference, 'first')
    assert.equal(first.status, 'pending')
    assert.equal(second.reference, 'kept')
    assert.equal(second.status, 'processing')
  })

  test('250 rows: one statement per 200 rows, every row saved', async ({ assert, cleanup }) => {
    const { db } = await setup(cleanup)
    const rows = await seed(250, {})
    const statements = recordStatements(db)
    await db.transaction(async (trx) => {
      rows.forEach((row, index) => {
        row.status = 'processing'
        row.reference = `ref-${index}`
      })
      await saveLockedPayouts(trx, rows)
    })
    const updates = statements.filter((sql) => /^update/i.test(sql.trim()))
    assert.lengthOf(updates, 2)
    const saved = await Payout.query().whereIn(
      'id',
      rows.map((row) => row.id)
    )
    assert.lengthOf(saved, 250)
    for (const row of saved) {
      assert.equal(row.status, 'processing')
      assert.equal(row.reference, `ref-${rows.findIndex((r) => r.id === row.id)}`)
    }
  })
})
