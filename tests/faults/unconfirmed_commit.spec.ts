import { randomUUID } from 'node:crypto'
import { createRequire } from 'node:module'
import { test } from '@japa/runner'
import type { Database } from '@adonisjs/lucid/database'
import { E_PAYOUTS_COMMIT_UNCONFIRMED, E_PAYOUTS_TIMEOUT } from '../../src/errors.ts'
import { commitConfirmed } from '../../src/database/deadline.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { Payout, PayoutEvent } from '../../src/models/main.ts'
import { boundedConnection, connectionConfig, setupDatabase, TEST_DB } from '../helpers/database.ts'
import { TcpProxy } from '../helpers/tcp_proxy.ts'

/** The driver Lucid's SQLite connections use: one SQLite library, whose locks see each other. */
const BetterSqlite3 = createRequire(import.meta.url)('better-sqlite3')
const SERVER_ONLY = 'needs PostgreSQL or MySQL (TEST_DB=pg, TEST_DB=mysql) behind a TCP proxy'
const LEASE_MS = 500
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * A ledger whose database is reached through a proxy, recording the changes it tells, and a
 * trap: `atCommit(fault)` runs `fault` when the next COMMIT is about to be sent.
 */
async function ledgerBehindProxy(
  cleanup: (fn: () => Promise<void>) => void,
  transactionTimeoutMs: number,
  notifyLeaseMs = LEASE_MS
) {
  const base = connectionConfig('unconfirmed') as any
  const proxy = new TcpProxy({ host: base.connection.host, port: base.connection.port })
  await proxy.start()
  // Registered first, so it closes after the tables are dropped (through a healed proxy).
  cleanup(() => proxy.close())
  const { db } = await setupDatabase(cleanup, 'unconfirmed', {
    connection: boundedConnection(base, {
      port: proxy.port,
      connectMs: 500,
      idleInTransactionMs: 1000,
    }),
  })
  cleanup(() => proxy.heal())
  const told: number[] = []
  const ledger = new PayoutLedger(
    db,
    { onChange: (change) => void told.push(change.eventId) },
    { transactionTimeoutMs, notifyLeaseMs }
  )
  let fault: (() => void) | null = null
  db.connection()
    .getWriteClient()
    .on('query', (query: { sql: string }) => {
      if (!fault || !/^commit/i.test(query.sql.trim())) return
      const run = fault
      fault = null
      run()
    })
  const atCommit = (run: () => void) => (fault = run)
  return { db, proxy, ledger, told, atCommit }
}

/** The payout's applied changes, read once the database answers again. */
async function appliedOf(db: Database, payoutUuid: string) {
  for (let attempt = 1; ; attempt++) {
    try {
      const payouts = await Payout.query({ client: db.connection() }).where(
        'payout_uuid',
        payoutUuid
      )
      const events = await PayoutEvent.query({ client: db.connection() })
        .where('payout_uuid', payoutUuid)
        .where('applied', true)
      return { payouts: payouts.length, events }
    } catch (error) {
      // A pooled connection the proxy reset: the pool drops it, the next read opens another.
      if (attempt >= 5) throw error
      await sleep(100)
    }
  }
}

const created = (payoutId: string) => ({
  payoutId,
  source: 'webhook' as const,
  status: 'pending',
  step: 'initiated',
})

/**
 * Lucid's commit() resolves, and runs the transaction's after('commit') hooks, even when the
 * COMMIT statement failed: knex reports it only on the transaction's own promise. A change
 * told from there may never have been stored (an app event for a payout the ledger does not
 * hold, then a second one when the payout is stored again).
 */
test.group(`Faults | a COMMIT the database does not confirm (${TEST_DB})`, () => {
  test('reset before it reaches the server: the caller hears E_PAYOUTS_COMMIT_UNCONFIRMED, nothing is told or stored', async ({
    assert,
    cleanup,
  }) => {
    const { db, proxy, ledger, told, atCommit } = await ledgerBehindProxy(cleanup, 0)
    const payoutId = randomUUID()
    atCommit(() => void proxy.refuse())
    const error = await ledger.apply(created(payoutId)).then(
      () => null,
      (e) => e
    )
    assert.instanceOf(error, E_PAYOUTS_COMMIT_UNCONFIRMED)
    assert.notInclude(error.message, payoutId, 'no statement values in the message')
    await proxy.heal()
    await sleep(200)
    assert.deepEqual(told, [], 'no change told')
    const stored = await appliedOf(db, payoutId)
    assert.deepEqual([stored.payouts, stored.events.length], [0, 0], 'nothing stored')
    assert.equal(await ledger.renotify({ olderThanMs: 0 }), 0)
  })
    .skip(TEST_DB === 'sqlite', SERVER_ONLY)
    .timeout(30_000)

  test('committed with its answer lost: not told by the hook; the outbox tells it once, after its lease', async ({
    assert,
    cleanup,
  }) => {
    const { db, proxy, ledger, told, atCommit } = await ledgerBehindProxy(cleanup, 0)
    const payoutId = randomUUID()
    atCommit(() => {
      // The COMMIT goes through; its answer is swallowed, then the connection reset.
      proxy.muteAnswers()
      setTimeout(() => void proxy.refuse(), 300)
    })
    const error = await ledger.apply(created(payoutId)).then(
      () => null,
      (e) => e
    )
    assert.instanceOf(error, E_PAYOUTS_COMMIT_UNCONFIRMED)
    await proxy.heal()
    await sleep(200)
    assert.deepEqual(told, [], 'not told from a COMMIT nobody confirmed')
    const stored = await appliedOf(db, payoutId)
    assert.equal(stored.payouts, 1, 'the COMMIT landed')
    assert.lengthOf(stored.events, 1)
    assert.isNull(stored.events[0].notifiedAt)

    // Past the lease (MySQL keeps whole seconds: it may end up to a second later).
    await sleep(LEASE_MS + 1100)
    assert.equal(await ledger.renotify({ olderThanMs: 0 }), 1)
    assert.equal(await ledger.renotify({ olderThanMs: 0 }), 0)
    assert.deepEqual(told, [stored.events[0].id], 'told once, by the outbox')
  })
    .skip(TEST_DB === 'sqlite', SERVER_ONLY)
    .timeout(30_000)

  test('given up at its deadline: the caller hears E_PAYOUTS_TIMEOUT, and the dropped COMMIT failing later tells nothing', async ({
    assert,
    cleanup,
  }) => {
    // A lease long enough that the outbox tells the change without checking it first.
    const { db, proxy, ledger, told, atCommit } = await ledgerBehindProxy(cleanup, 1000, 60_000)
    const payoutId = randomUUID()
    // The COMMIT never leaves: its flow is dropped silently, as a NAT does; new connections
    // (the outbox's) get through.
    atCommit(() => proxy.dropOpen())
    const error = await ledger.apply(created(payoutId)).then(
      () => null,
      (e) => e
    )
    assert.instanceOf(error, E_PAYOUTS_TIMEOUT)
    // The server ends the session left idle in its transaction (1 s), and rolls it back. The
    // flow comes back as a reset: the COMMIT the deadline gave up fails now, and Lucid runs
    // the transaction's after('commit') hooks.
    await sleep(1200)
    proxy.resetDropped()
    await sleep(500)
    assert.deepEqual(told, [], 'no change told')
    const stored = await appliedOf(db, payoutId)
    assert.deepEqual([stored.payouts, stored.events.length], [0, 0], 'nothing stored')
  })
    .skip(TEST_DB === 'sqlite', SERVER_ONLY)
    .timeout(30_000)
})

test.group(`Faults | a COMMIT refused by the database (${TEST_DB})`, () => {
  test("commitConfirmed reads knex's own record of the COMMIT on this database", async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'commit_record')
    // The check rests on knex's executionPromise: a knex without it would confirm every
    // COMMIT unseen, so its absence fails here.
    await db.transaction(async (trx) => {
      assert.instanceOf((trx.knexClient as any).executionPromise, Promise)
    })
    const trx = await db.transaction()
    await trx.rawQuery('select 1')
    await trx.commit()
    await commitConfirmed(trx, 'a transaction')
  })

  test('SQLite refuses a COMMIT while another connection reads: the caller hears it, the connection is not reused inside the failed transaction', async ({
    assert,
    cleanup,
  }) => {
    const base = connectionConfig('commit_busy') as any
    const { db } = await setupDatabase(cleanup, 'commit_busy', {
      connection: {
        ...base,
        pool: {
          afterCreate: (connection: any, done: (error: unknown, connection: unknown) => void) => {
            connection.pragma('busy_timeout = 200')
            done(null, connection)
          },
        },
      },
    })
    const told: string[] = []
    const ledger = new PayoutLedger(db, {
      onChange: (change) => void told.push(change.payout.payoutUuid),
    })
    // Another process reading the file in its default journal mode (a backup, a report):
    // a writer's COMMIT waits for its SHARED lock, then fails with SQLITE_BUSY.
    const reader = new BetterSqlite3(base.connection.filename)
    cleanup(async () => void reader.close())
    reader.exec('BEGIN')
    reader.prepare('SELECT count(*) AS n FROM sqlite_master').get()
    const refused = randomUUID()
    const error = await ledger.apply(created(refused)).then(
      () => null,
      (e) => e
    )
    assert.instanceOf(error, E_PAYOUTS_COMMIT_UNCONFIRMED)
    assert.include(error.message, 'SQLITE_BUSY')
    reader.exec('COMMIT')

    // The next transaction runs on a fresh connection: stored, committed, told.
    const next = randomUUID()
    await ledger.apply(created(next))
    assert.deepEqual(told, [next])
    const stored = await Payout.query({ client: db.connection() }).whereIn('payout_uuid', [
      refused,
      next,
    ])
    assert.deepEqual(
      stored.map((payout) => payout.payoutUuid),
      [next],
      'the refused COMMIT rolled back'
    )
    // Seen from another connection too: committed, not held in an open transaction.
    const row = reader
      .prepare(`SELECT count(*) AS n FROM ${Payout.table} WHERE payout_uuid = ?`)
      .get(next) as { n: number }
    assert.equal(row.n, 1)
  })
    .skip(
      TEST_DB !== 'sqlite',
      'the SQLite file lock; PostgreSQL and MySQL have the proxy tests above'
    )
    .timeout(30_000)
})
