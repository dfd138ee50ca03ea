import { setTimeout as sleep } from 'node:timers/promises'
import { test } from '@japa/runner'
import type { Database } from '@adonisjs/lucid/database'
import { dbDate } from '../../src/database/dates.ts'
import { DEADLOCK_ATTEMPTS } from '../../src/database/deadline.ts'
import { isDeadlock } from '../../src/database/dialects.ts'
import { tableNames } from '../../src/database/schema.ts'
import { InboxStore } from '../../src/webhooks/inbox_store.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'
import { nextWaiter, ONE_WRITER, otherTransaction } from '../helpers/deadlocks.ts'
import { inboxDelivery as delivery } from '../helpers/inbox.ts'

/**
 * Real deadlocks between the inbox's batch insert and another instance's transaction (see
 * tests/helpers/deadlocks.ts for how the plugin's side is made the victim).
 */

/** Rows written by the other transaction so that it weighs more than the plugin's batch. */
const FILLERS = Array.from({ length: 10 }, (_, index) => `z-filler-${index}`)

/** A fresh inbox table, a store on it, and the rows another instance would write there. */
async function freshInbox(cleanup: (fn: () => Promise<void>) => void) {
  const { db, prefix } = await setupDatabase(cleanup, 'deadlock')
  const table = tableNames(prefix).webhookDeliveries
  const store = new InboxStore(db, table)
  const rowOf = (deliveryId: string) => ({
    account: store.account,
    delivery_id: deliveryId,
    event_type: 'payout.created',
    raw_body: Buffer.from('{}').toString('base64'),
    signature_header: null,
    source: 'webhook',
    state: 'pending',
    attempts: 0,
    received_at: dbDate(db.connection()),
    trace_parent: null,
  })
  return { db, table, store, rowOf }
}

/** The INSERT statements the connection sends from now on that write all of `ids` at once. */
function recordBatchInserts(db: Database, ids: string[]) {
  const inserts: unknown[][] = []
  db.connection()
    .getWriteClient()
    .on('query', (query: { sql: string; bindings?: unknown[] }) => {
      const bindings = query.bindings ?? []
      if (/^\s*insert/i.test(query.sql) && ids.every((id) => bindings.includes(id))) {
        inserts.push(bindings)
      }
    })
  return inserts
}

/** The delivery ids stored in the table, in order, each as many times as stored. */
async function storedIds(db: Database, table: string) {
  const rows: Array<{ delivery_id: string }> = await db
    .from(table)
    .select('delivery_id')
    .orderBy('delivery_id')
  return rows.map((row) => row.delivery_id).filter((id) => !id.startsWith('z-filler-'))
}

test.group(`Webhooks | inbox insert as a deadlock's victim (${TEST_DB})`, () => {
  test("a batch rolled back as a deadlock's victim is run again and answered, duplicates as such", async ({
    assert,
    cleanup,
  }) => {
    const { db, table, store, rowOf } = await freshInbox(cleanup)
    const other = await otherTransaction(db, cleanup)
    // (1) Another instance stores 'b' (and more rows), not committed yet.
    await other.trx
      .knexQuery()
      .table(table)
      .insert([...FILLERS, 'b'].map(rowOf))

    // (2) One batch: 'a' is inserted, then 'b' waits for the other transaction.
    const settled = Promise.allSettled(['a', 'b', 'c'].map((id) => store.insert(delivery(id))))
    let done = false
    void settled.then(() => (done = true))
    assert.isNotNull(await nextWaiter(db, other, new Set(), () => done))

    // (3) The other transaction inserts 'a': each waits for the other. Its INSERT goes
    // through only once the plugin's transaction is rolled back as the victim.
    await other.trx
      .knexQuery()
      .table(table)
      .insert(rowOf('a'))
      .catch((error: { code?: string }) => {
        throw new Error(`the other transaction was the victim, not the plugin's: ${error.code}`)
      })
    // (4) It commits: 'a' and 'b' are its deliveries.
    await other.trx.commit()

    const outcomes = await settled
    for (const outcome of outcomes) {
      if (outcome.status === 'rejected') throw outcome.reason
    }
    assert.deepEqual(
      outcomes.map((outcome) => outcome.status === 'fulfilled' && outcome.value),
      ['duplicate', 'duplicate', 'stored']
    )
    assert.deepEqual(await storedIds(db, table), ['a', 'b', 'c'])
  })
    .skip(TEST_DB === 'sqlite', ONE_WRITER)
    .timeout(20_000)

  test(`a batch that is the deadlock's victim at each of its ${DEADLOCK_ATTEMPTS} runs fails with the deadlock`, async ({
    assert,
    cleanup,
  }) => {
    const { db, table, store, rowOf } = await freshInbox(cleanup)
    const other = await otherTransaction(db, cleanup)
    // Another instance stores 'c' (and more rows), never committed.
    await other.trx
      .knexQuery()
      .table(table)
      .insert([...FILLERS, 'c'].map(rowOf))
    const runs = recordBatchInserts(db, ['a', 'c'])

    // Each run of the batch inserts 'a', then waits for 'c'; the other transaction then asks
    // for 'a' and the run is rolled back as the victim. The other transaction lets go of 'a'
    // again (so the next run can insert it) and keeps 'c'.
    const settled = Promise.allSettled(['a', 'c'].map((id) => store.insert(delivery(id))))
    let done = false
    void settled.then(() => (done = true))
    const seen = new Set<string>()
    for (let round = 0; round < DEADLOCK_ATTEMPTS + 2; round++) {
      if (!(await nextWaiter(db, other, seen, () => done))) break
      if (TEST_DB === 'mysql') {
        // A locking read that waits for the run's 'a'. At READ COMMITTED its lock is not
        // kept as a gap lock once the victim's 'a' is gone, so the next run inserts 'a' again.
        await other.trx
          .knexQuery()
          .table(table)
          .where({ account: store.account, delivery_id: 'a' })
          .forUpdate()
      } else {
        // PostgreSQL sees no uncommitted row in a locking read: an insert waits for it, and
        // rolling back to a savepoint lets go of what the insert took.
        await other.trx.rawQuery('savepoint again')
        await other.trx.knexQuery().table(table).insert(rowOf('a'))
        await other.trx.rawQuery('rollback to savepoint again')
      }
    }
    // Past the bound a run would wait for 'c' until the other transaction ends: it does now.
    await Promise.race([settled, sleep(1000)])
    await other.trx.rollback()

    const outcomes = await settled
    for (const outcome of outcomes) {
      assert.equal(outcome.status, 'rejected', 'the batch gave up after its last run')
      if (outcome.status === 'rejected') {
        assert.isTrue(isDeadlock(outcome.reason), `a deadlock, not ${outcome.reason}`)
      }
    }
    assert.equal(runs.length, DEADLOCK_ATTEMPTS, 'runs of the batch')
    assert.deepEqual(await storedIds(db, table), [])
  })
    .skip(TEST_DB === 'sqlite', ONE_WRITER)
    .timeout(30_000)

  test('a batch inserts its rows in the order they arrived (the inbox is processed in id order)', async ({
    assert,
    cleanup,
  }) => {
    const { db, table, store } = await freshInbox(cleanup)
    const inserts = recordBatchInserts(db, ['a', 'b', 'c'])
    const outcomes = await Promise.all(['c', 'a', 'b', 'a'].map((id) => store.insert(delivery(id))))
    assert.deepEqual(outcomes, ['stored', 'stored', 'stored', 'duplicate'])
    assert.lengthOf(inserts, 1)
    assert.deepEqual(
      inserts[0].filter((value) => ['a', 'b', 'c'].includes(value as string)),
      ['c', 'a', 'b']
    )
    const byId = await db
      .connection()
      .from(table)
      .where('account', store.account)
      .orderBy('id', 'asc')
      .select('delivery_id')
    assert.deepEqual(
      byId.map((row: { delivery_id: string }) => row.delivery_id),
      ['c', 'a', 'b']
    )
  })
})
