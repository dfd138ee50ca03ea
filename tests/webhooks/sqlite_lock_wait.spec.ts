import { rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { test } from '@japa/runner'
import { tableNames } from '../../src/database/schema.ts'
import { InboxStore } from '../../src/webhooks/inbox_store.ts'
import { connectionConfig, setupDatabase, sqlitePath, TEST_DB } from '../helpers/database.ts'

/** The driver the app's connection uses, opened here as another process would. */
const Database = createRequire(import.meta.url)('better-sqlite3')

type Cleanup = (fn: () => Promise<void> | void) => void

/** A signed-looking delivery (the store does not verify). */
const delivery = (deliveryId: string) => ({
  deliveryId,
  eventType: 'payout.created',
  rawBody: Buffer.from(JSON.stringify({ type: 'payout.created', data: { payoutId: deliveryId } })),
  signatureHeader: 't=1,v1=x',
  source: 'webhook' as const,
})

/**
 * An inbox on its own SQLite file in WAL mode, its connection with `busyTimeoutMs` (as
 * docs/production.md sets it), and a second connection to the file: the worker process's.
 */
async function lockedInbox(cleanup: Cleanup, name: string, busyTimeoutMs: number) {
  const filename = sqlitePath(`${name}-${process.pid}.sqlite`)
  const remove = () => {
    for (const suffix of ['', '-wal', '-shm']) rmSync(filename + suffix, { force: true })
  }
  remove()
  const { db, prefix } = await setupDatabase(cleanup, name, {
    connection: {
      ...connectionConfig(name),
      connection: { filename },
      pool: {
        afterCreate: (conn: { pragma(sql: string): unknown }, done: () => void) => {
          conn.pragma('journal_mode = WAL')
          conn.pragma(`busy_timeout = ${busyTimeoutMs}`)
          done()
        },
      },
    },
  })
  const other = new Database(filename)
  cleanup(() => {
    if (other.inTransaction) other.exec('ROLLBACK')
    other.close()
    remove()
  })
  const table = tableNames(prefix).webhookDeliveries
  return { db, other, table, store: new InboxStore(db, table) }
}

/** Counts the event loop's turns from now: how often a 5 ms timer fired. */
function turnsCounter() {
  let turns = 0
  const timer = setInterval(() => turns++, 5)
  return {
    stop: () => {
      clearInterval(timer)
      return turns
    },
  }
}

if (TEST_DB === 'sqlite') {
  test.group(
    'Webhooks | the insert waits for another process write lock off the event loop (sqlite)',
    () => {
      test('an acknowledgement behind a lock held 300 ms is stored once it is freed; the event loop ran meanwhile', async ({
        assert,
        cleanup,
      }) => {
        const { db, other, table, store } = await lockedInbox(cleanup, 'lockwait_held', 5000)
        other.exec('BEGIN IMMEDIATE')
        // Freed by a timer of this process: a write that waited on the event loop would hold
        // the timer back, and the lock with it, until its busy timeout (5 s) failed it.
        const freed = new Promise<number>((resolve) =>
          setTimeout(() => {
            other.exec('COMMIT')
            resolve(performance.now())
          }, 300)
        )
        const turns = turnsCounter()
        const startedAt = performance.now()
        const outcome = await store.insert(delivery('d-behind-lock'))
        const storedAt = performance.now()
        const ran = turns.stop()

        assert.equal(outcome, 'stored')
        assert.isAtLeast(storedAt, await freed, 'stored after the lock was freed')
        assert.isAbove(ran, 10, `the event loop turned while it waited (${ran} timer runs)`)
        assert.isBelow(storedAt - startedAt, 5000)
        const rows = await db.connection().from(table).count('* as n')
        assert.equal(Number(rows[0].n), 1)
      })

      test("a lock held past the connection's busy_timeout fails the insert as before; that timeout is the connection's again", async ({
        assert,
        cleanup,
      }) => {
        const { db, other, store } = await lockedInbox(cleanup, 'lockwait_timeout', 200)
        other.exec('BEGIN IMMEDIATE')
        const turns = turnsCounter()
        const startedAt = performance.now()
        const error = await store.insert(delivery('d-timed-out')).then(
          () => null,
          (failed: { code?: string }) => failed
        )
        const failedAfter = performance.now() - startedAt
        const ran = turns.stop()
        other.exec('COMMIT')

        assert.match(String(error?.code), /^SQLITE_BUSY/)
        assert.isAtLeast(failedAfter, 200)
        assert.isAbove(ran, 10, `the event loop turned while it waited (${ran} timer runs)`)
        // The app's other statements on that connection still wait as it was configured.
        const [setting] = (await db.connection().rawQuery('PRAGMA busy_timeout')) as Array<
          Record<string, number>
        >
        assert.equal(Object.values(setting)[0], 200)
        // And the next delivery goes in once the lock is free.
        assert.equal(await store.insert(delivery('d-after')), 'stored')
      })
    }
  )
}
