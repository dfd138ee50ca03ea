import { setTimeout as sleep } from 'node:timers/promises'
import { test } from '@japa/runner'
import type { Database } from '@adonisjs/lucid/database'
import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { dbDate } from '../../src/database/dates.ts'
import { isDeadlock } from '../../src/database/dialects.ts'
import { tableNames } from '../../src/database/schema.ts'
import { INSERT_DEADLOCK_ATTEMPTS } from '../../src/webhooks/inbox_inserts.ts'
import { InboxStore } from '../../src/webhooks/inbox_store.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

/**
 * Real deadlocks between the inbox's batch insert and another transaction on a connection of
 * the test's own (another instance of the app). On MySQL/MariaDB the other transaction has
 * written more rows, so InnoDB rolls back the plugin's (the lighter) as the victim; on
 * PostgreSQL the other transaction's `deadlock_timeout` is raised, so the plugin's statement,
 * which waits first, runs the deadlock check first and is the one cancelled.
 */

/** SQLite cannot be the victim of a deadlock: why its tests are skipped. */
const ONE_WRITER =
  'SQLite has one writer for the whole file and no row locks: no deadlock can be built'

/** A signed-looking delivery (the store does not verify). */
const delivery = (deliveryId: string) => ({
  deliveryId,
  eventType: 'payout.created',
  rawBody: Buffer.from(JSON.stringify({ type: 'payout.created', data: { payoutId: deliveryId } })),
  signatureHeader: 't=1,v1=x',
  source: 'webhook' as const,
})

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

/** The rows of a raw query's answer: mysql2 answers `[rows, fields]`, pg `{ rows }`. */
function rowsOf<Row>(result: any): Row[] {
  return TEST_DB === 'mysql' ? result[0] : result.rows
}

/**
 * Another instance's transaction, on a connection of its own, READ COMMITTED as the plugin's
 * are; rolled back in the test's cleanup if still open (before the tables are dropped).
 */
async function otherTransaction(db: Database, cleanup: (fn: () => Promise<void>) => void) {
  // Options second: Lucid's `transaction(options)`, as typed, takes them for its callback
  // and gives knex none (the transaction then runs at the server's default isolation).
  const client = db.connection()
  const begin = client.transaction as unknown as (
    callback: undefined,
    options: { isolationLevel: 'read committed' }
  ) => Promise<TransactionClientContract>
  const trx = await begin.call(client, undefined, { isolationLevel: 'read committed' })
  cleanup(async () => {
    if (!trx.isCompleted) await trx.rollback()
  })
  const [{ id }] = rowsOf<{ id: number }>(
    await trx.rawQuery(
      TEST_DB === 'mysql' ? 'select connection_id() as id' : 'select pg_backend_pid() as id'
    )
  )
  // Its own deadlock check comes long after the plugin's, which then is the victim.
  if (TEST_DB === 'pg') await trx.rawQuery(`set local deadlock_timeout = '60s'`)
  return { trx, id }
}

/**
 * The transactions that wait for a lock `other` holds, each named by its transaction id
 * (each run of the plugin's batch is a transaction of its own). InnoDB refreshes these tables
 * only when they were not read for 0.1 s (see `POLL_MS`).
 */
async function waitingOn(db: Database, other: { id: number }): Promise<string[]> {
  const result =
    TEST_DB === 'mysql'
      ? await db.rawQuery(
          `select r.trx_id as attempt from information_schema.innodb_lock_waits w
           join information_schema.innodb_trx r on r.trx_id = w.requesting_trx_id
           join information_schema.innodb_trx b on b.trx_id = w.blocking_trx_id
           where b.trx_mysql_thread_id = ?`,
          [other.id]
        )
      : await db.rawQuery(
          `select coalesce(backend_xid::text, pid || '@' || xact_start) as attempt
           from pg_stat_activity where ? = any(pg_blocking_pids(pid))`,
          [other.id]
        )
  return rowsOf<{ attempt: unknown }>(result).map((row) => String(row.attempt))
}

/** Between two looks at the lock waits: InnoDB's tables stay as they were while read more often. */
const POLL_MS = 150

/**
 * Resolves with the id of the first transaction not in `seen` that waits for `other` (and
 * adds it to `seen`), or with null once `settled()` says the inserts settled.
 */
async function nextWaiter(
  db: Database,
  other: { id: number },
  seen: Set<string>,
  settled: () => boolean
): Promise<string | null> {
  const until = Date.now() + 10_000
  while (Date.now() < until) {
    if (settled()) return null
    const waiter = (await waitingOn(db, other)).find((attempt) => !seen.has(attempt))
    if (waiter) {
      seen.add(waiter)
      return waiter
    }
    await sleep(POLL_MS)
  }
  throw new Error('the plugin never waited for the other transaction: the scenario did not build')
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

  test(`a batch that is the deadlock's victim at each of its ${INSERT_DEADLOCK_ATTEMPTS} runs fails with the deadlock`, async ({
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
    for (let round = 0; round < INSERT_DEADLOCK_ATTEMPTS + 2; round++) {
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
    assert.equal(runs.length, INSERT_DEADLOCK_ATTEMPTS, 'runs of the batch')
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
