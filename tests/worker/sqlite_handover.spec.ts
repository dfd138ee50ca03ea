import { randomUUID } from 'node:crypto'
import { rm } from 'node:fs/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import { test } from '@japa/runner'
import { openDatabase, waitFor } from '../chaos/helpers.ts'
import { sqlitePath, TEST_DB } from '../helpers/database.ts'
import { InboxStore } from '../../src/webhooks/inbox_store.ts'
import { spawnChild } from './helpers.ts'

/**
 * Worker mode on one SQLite WAL file (issue #30): while `payouts:work` drains a backlog, an
 * insert of the web process (here: this process, one row through the inbox store, as the
 * route stores a delivery) waits for the file's write lock in SQLite's busy handler, which
 * polls instead of queueing. A worker that began each batch as soon as the last committed
 * kept the lock batch after batch; it now sizes its batches to about 20 ms and leaves the
 * lock free after each one long enough for a waiter's next poll.
 *
 * Measured on the 2-core dev box under load (load average 5-6), 4,000 rows, batches of 100,
 * one insert every 10 ms for 4 s: before, the worst insert waited 590 and 657 ms (p99 the
 * same); after, 62 and 81 ms (p99 39-46 ms). The bound, 200 ms, is under a third of the
 * worst before and 2.5 times the worst after.
 */
const BACKLOG = 4000
/** How long inserts are measured: while the backlog lasts, at most this long. */
const MEASURE_MS = 4000
const WORST_WAIT_BOUND_MS = 200

function delivery() {
  const payoutId = randomUUID()
  const body = { type: 'payout.created', createdAt: new Date().toISOString(), data: { payoutId } }
  return {
    deliveryId: `dlv_${payoutId}`,
    eventType: 'payout.created',
    rawBody: Buffer.from(JSON.stringify(body)),
    signatureHeader: null,
    source: 'webhook' as const,
  }
}

test.group('Worker | SQLite: the worker leaves the write lock to the web process', () => {
  test('an insert waits for one short batch, not for the backlog', async ({ assert, cleanup }) => {
    const sqliteFile = sqlitePath(`svc-payouts-handover-${process.pid}-${Date.now()}.sqlite`)
    cleanup(async () => {
      await Promise.all(
        ['', '-wal', '-shm'].map((suffix) => rm(sqliteFile + suffix, { force: true }))
      )
    })
    const { db, prefix } = await openDatabase(cleanup, sqliteFile, () => false)
    // As docs/production.md has it: WAL (kept by the file), and this connection's busy timeout.
    await db.connection().rawQuery('PRAGMA journal_mode = WAL')
    await db.connection().rawQuery('PRAGMA busy_timeout = 10000')
    const table = `${prefix}webhook_deliveries`
    const inbox = new InboxStore(db, table)
    await Promise.all(Array.from({ length: BACKLOG }, () => inbox.insert(delivery())))
    const processed = async () =>
      Number((await db.from(table).where('state', 'processed').count('* as n'))[0].n)

    const worker = spawnChild(
      cleanup,
      'worker_app.ts',
      { prefix, batchSize: 100 },
      { SVC_TEST_SQLITE: sqliteFile }
    )
    await waitFor('the worker at work', async () => (await processed()) > 0, {
      timeoutMs: 30_000,
      everyMs: 20,
    })

    // One insert every 10 ms while the backlog lasts, each one's wait measured (better-sqlite3
    // blocks this process while it waits, as it blocks the web process).
    const waits: number[] = []
    let inserted = 0
    const until = performance.now() + MEASURE_MS
    while ((await processed()) < BACKLOG - 200 && performance.now() < until) {
      const startedAt = performance.now()
      await inbox.insert(delivery())
      waits.push(performance.now() - startedAt)
      inserted++
      await sleep(10)
    }
    const worst = Math.max(...waits)
    const sorted = [...waits].sort((a, b) => a - b)
    const p99 = sorted[Math.floor(sorted.length * 0.99)]
    console.log(
      `sqlite handover: ${waits.length} inserts during the drain, worst ${worst.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms`
    )
    assert.isAbove(waits.length, 20, 'inserts measured while the worker drained')
    assert.isBelow(worst, WORST_WAIT_BOUND_MS, 'the worst insert wait')

    // The backlog and the rows inserted meanwhile are all applied.
    await waitFor('the backlog drained', async () => (await processed()) === BACKLOG + inserted, {
      timeoutMs: 60_000,
    })
    worker.process.kill('SIGTERM')
    assert.equal(await worker.exited, 0)
  })
    .skip(TEST_DB !== 'sqlite', 'SQLite only: one write lock for the whole file')
    .timeout(120_000)
})
