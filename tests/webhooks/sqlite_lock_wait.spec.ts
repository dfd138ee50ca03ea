import { rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { test } from '@japa/runner'
import { tableNames } from '../../src/database/schema.ts'
import { InboxStore } from '../../src/webhooks/inbox_store.ts'
import { writingWithoutBlocking } from '../../src/database/sqlite_lock_wait.ts'
import { partsOf } from '../../src/service/payouts_service.ts'
import { serveHostApp } from '../helpers/host_app.ts'
import { connectionConfig, setupDatabase, sqlitePath, TEST_DB } from '../helpers/database.ts'
import { inboxDelivery as delivery } from '../helpers/inbox.ts'

/** The driver the app's connection uses, opened here as another process would. */
const Database = createRequire(import.meta.url)('better-sqlite3')

type Cleanup = (fn: () => Promise<void> | void) => void

/**
 * An inbox on its own SQLite file in WAL mode, its connection with `busyTimeoutMs` (as
 * docs/production.md sets it), and a second connection to the file: the worker process's.
 */
async function lockedInbox(
  cleanup: Cleanup,
  name: string,
  busyTimeoutMs: number,
  options: { insertTimeoutMs?: number; journal?: 'wal' | 'delete'; lockWaitOffLoop?: boolean } = {}
) {
  const filename = sqlitePath(`${name}-${process.pid}.sqlite`)
  const remove = () => {
    for (const suffix of ['', '-wal', '-shm', '-journal'])
      rmSync(filename + suffix, { force: true })
  }
  remove()
  // Registered first, so it runs last: the file goes after the tables are dropped.
  let other: InstanceType<typeof Database> | undefined
  cleanup(() => {
    if (other?.inTransaction) other.exec('ROLLBACK')
    other?.close()
    remove()
  })
  let locked = 0
  const { db, prefix } = await setupDatabase(cleanup, name, {
    connection: {
      ...connectionConfig(name),
      connection: { filename },
      pool: {
        afterCreate: (
          conn: { pragma(sql: string): unknown; exec(sql: string): unknown },
          done: () => void
        ) => {
          conn.pragma(`journal_mode = ${options.journal ?? 'wal'}`)
          conn.pragma(`busy_timeout = ${busyTimeoutMs}`)
          // Every statement run through `exec` and refused as locked, counted.
          const exec = conn.exec.bind(conn)
          conn.exec = (sql: string) => {
            try {
              return exec(sql)
            } catch (error) {
              if (String((error as { code?: string }).code).startsWith('SQLITE_BUSY')) locked++
              throw error
            }
          }
          done()
        },
      },
    },
  })
  other = new Database(filename)
  const table = tableNames(prefix).webhookDeliveries
  return {
    db,
    other: other!,
    table,
    store: new InboxStore(db, table, undefined, {
      insertTimeoutMs: options.insertTimeoutMs,
      lockWaitOffLoop: options.lockWaitOffLoop ?? true,
    }),
    /** How many times a write of the app's connection was refused as locked so far. */
    refusals: () => locked,
  }
}

/** Commits the other connection's transaction `ms` from now; resolves with when it did. */
function commitIn(other: { exec(sql: string): unknown }, ms: number) {
  return new Promise<number>((resolve) =>
    setTimeout(() => {
      other.exec('COMMIT')
      resolve(performance.now())
    }, ms)
  )
}

/**
 * Awaits `insert`, counting the event loop's turns meanwhile (how often a 5 ms timer fired):
 * its outcome or its error, when it ended, how long it took, and the turns.
 */
async function whileCounting<T>(insert: Promise<T>) {
  let turns = 0
  const timer = setInterval(() => turns++, 5)
  const startedAt = performance.now()
  const settled = await insert.then(
    (outcome) => ({ outcome, error: null }),
    (error: { code?: string }) => ({ outcome: null, error })
  )
  clearInterval(timer)
  const endedAt = performance.now()
  return { ...settled, endedAt, tookMs: endedAt - startedAt, turns }
}

/** The lock waits are SQLite's; PostgreSQL and MySQL skip them. */
const NOT_SQLITE = TEST_DB !== 'sqlite'

test.group(
  `Webhooks | the insert waits for another process's write lock off the event loop (${TEST_DB})`,
  () => {
    test('an acknowledgement behind a lock held 300 ms is stored once it is freed; the event loop ran meanwhile', async ({
      assert,
      cleanup,
    }) => {
      const { db, other, table, store } = await lockedInbox(cleanup, 'lockwait_held', 5000)
      other.exec('BEGIN IMMEDIATE')
      // Freed by a timer of this process: a write that waited on the event loop would hold
      // the timer back, and the lock with it, until its busy timeout (5 s) failed it.
      const freed = commitIn(other, 300)
      const { outcome, endedAt, tookMs, turns } = await whileCounting(
        store.insert(delivery('d-behind-lock'))
      )

      assert.equal(outcome, 'stored')
      assert.isAtLeast(endedAt, await freed, 'stored after the lock was freed')
      assert.isAbove(turns, 10, `the event loop turned while it waited (${turns} timer runs)`)
      assert.isBelow(tookMs, 5000)
      const rows = await db.connection().from(table).count('* as n')
      assert.equal(Number(rows[0].n), 1)
    }).skip(NOT_SQLITE, 'SQLite only')

    test("a lock held past the connection's busy_timeout fails the insert as before; that timeout is the connection's again", async ({
      assert,
      cleanup,
    }) => {
      const { db, other, store } = await lockedInbox(cleanup, 'lockwait_timeout', 200)
      other.exec('BEGIN IMMEDIATE')
      const { error, tookMs, turns } = await whileCounting(store.insert(delivery('d-timed-out')))
      other.exec('COMMIT')

      assert.match(String(error?.code), /^SQLITE_BUSY/)
      assert.isAtLeast(tookMs, 200)
      assert.isAbove(turns, 10, `the event loop turned while it waited (${turns} timer runs)`)
      // The app's other statements on that connection still wait as it was configured.
      const [setting] = (await db.connection().rawQuery('PRAGMA busy_timeout')) as Array<
        Record<string, number>
      >
      assert.equal(Object.values(setting)[0], 200)
      // And the next delivery goes in once the lock is free.
      assert.equal(await store.insert(delivery('d-after')), 'stored')
    }).skip(NOT_SQLITE, 'SQLite only')

    test('an insert given up at its deadline runs no more: the lock freed right after, nothing is stored', async ({
      assert,
      cleanup,
    }) => {
      const { db, other, table, store } = await lockedInbox(cleanup, 'lockwait_deadline', 5000, {
        insertTimeoutMs: 100,
      })
      other.exec('BEGIN IMMEDIATE')
      // The other process commits the moment the waiter hears its timeout: a run after that
      // would store the row of a delivery answered 503.
      const error = await store.insert(delivery('d-given-up')).then(
        () => null,
        (failed: { code?: string }) => {
          other.exec('COMMIT')
          return failed
        }
      )
      assert.equal(error?.code, 'E_PAYOUTS_TIMEOUT')
      await new Promise((resolve) => setTimeout(resolve, 100))
      const rows = await db.connection().from(table).count('* as n')
      assert.equal(Number(rows[0].n), 0, 'nothing stored after its waiters were failed')
      // The next delivery goes in.
      assert.equal(await store.insert(delivery('d-next')), 'stored')
    }).skip(NOT_SQLITE, 'SQLite only')

    test('behind a lock held 300 ms the lock is asked for a few dozen times, not every millisecond, and the insert runs once', async ({
      assert,
      cleanup,
    }) => {
      const { db, other, store, refusals } = await lockedInbox(cleanup, 'lockwait_polls', 5000)
      const statements: string[] = []
      db.connection()
        .getWriteClient()
        .on('query', (query: { sql: string }) => void statements.push(query.sql))
      other.exec('BEGIN IMMEDIATE')
      setTimeout(() => other.exec('COMMIT'), 300)
      assert.equal(await store.insert(delivery('d-polled')), 'stored')
      // 1, 2, then every 4 ms: about 75 asks at most in 300 ms; every millisecond, about 300.
      const asked = refusals()
      assert.isAbove(asked, 3)
      assert.isAtMost(asked, 100, `${asked} asks`)
      // The lock is what is asked for: the insert itself was built and run once.
      assert.lengthOf(
        statements.filter((sql) => /^insert/i.test(sql)),
        1
      )
    }).skip(NOT_SQLITE, 'SQLite only')

    test('an insert that waited for the pooled connection past its deadline runs no more', async ({
      assert,
      cleanup,
    }) => {
      const { db, table, store } = await lockedInbox(cleanup, 'lockwait_pool', 5000, {
        insertTimeoutMs: 100,
      })
      // The pool's one connection held 300 ms by a transaction of this process (an inline
      // batch, an execute), past the insert's bound.
      const held = db.connection().transaction(async (trx) => {
        await trx.rawQuery('select 1')
        await new Promise((resolve) => setTimeout(resolve, 300))
      })
      const error = await store.insert(delivery('d-waited-for-pool')).then(
        () => null,
        (failed: { code?: string }) => failed
      )
      assert.equal(error?.code, 'E_PAYOUTS_TIMEOUT')
      await held
      await new Promise((resolve) => setTimeout(resolve, 50))
      const rows = await db.connection().from(table).count('* as n')
      assert.equal(Number(rows[0].n), 0, 'nothing stored after its waiters were failed')
    }).skip(NOT_SQLITE, 'SQLite only')

    test("SQLite's default journal: a COMMIT behind another connection's reader waits off the event loop too", async ({
      assert,
      cleanup,
    }) => {
      const { db, other, table, store } = await lockedInbox(cleanup, 'lockwait_commit', 5000, {
        journal: 'delete',
      })
      // A reader of the other process: the insert takes the write lock, but its COMMIT
      // waits until the reader ends, freed here by a timer.
      other.exec('BEGIN')
      other.prepare(`select count(*) from "${table}"`).get()
      const freed = commitIn(other, 300)
      const { outcome, endedAt, turns } = await whileCounting(
        store.insert(delivery('d-behind-reader'))
      )
      assert.equal(outcome, 'stored')
      assert.isAtLeast(endedAt, await freed, 'committed after the reader ended')
      assert.isAbove(turns, 10, `the event loop turned while it waited (${turns} timer runs)`)
      const rows = await db.connection().from(table).count('* as n')
      assert.equal(Number(rows[0].n), 1)
    }).skip(NOT_SQLITE, 'SQLite only')

    test('inline mode, alone on its file, inserts as before; worker mode waits off the event loop', async ({
      assert,
      cleanup,
    }) => {
      const { db, store, refusals } = await lockedInbox(cleanup, 'lockwait_inline', 5000, {
        lockWaitOffLoop: false,
      })
      const statements: string[] = []
      db.connection()
        .getWriteClient()
        .on('query', (query: { sql: string }) => void statements.push(query.sql))
      assert.equal(await store.insert(delivery('d-inline')), 'stored')
      assert.equal(refusals(), 0)
      assert.deepEqual(
        statements.map((sql) => sql.split(' ')[0].toLowerCase()),
        ['insert'],
        'one autocommitted insert, no lock asked for first'
      )
      assert.isFalse(store.waitsForLocksOffLoop)

      // The wiring: worker mode turns it on, inline mode (the default) leaves it off.
      for (const processing of ['worker', 'inline'] as const) {
        const prefix = `l${processing[0]}${Math.random().toString(36).slice(2, 7)}_`
        const host = await serveHostApp({
          root: new URL('../tmp/', import.meta.url),
          connection: connectionConfig(`lockwait_${processing}`),
          tablePrefix: prefix,
          payouts: {
            apiKey: `sk_test_${'C'.repeat(43)}`,
            baseUrl: 'http://127.0.0.1:9',
            webhook: { secret: `whsec_${'c'.repeat(32)}`, processing },
            jobs: { enabled: false },
            ledger: { tablePrefix: prefix },
          },
        })
        try {
          const { inbox } = await partsOf(host.payouts)
          assert.equal(inbox.waitsForLocksOffLoop, processing === 'worker', processing)
        } finally {
          await host.close()
        }
      }
    }).skip(NOT_SQLITE, 'SQLite only')

    test('another SQLite driver, or a transaction, runs the write as it is, once', async ({
      assert,
    }) => {
      const runs: unknown[] = []
      const write = async (connection: unknown) => {
        runs.push(connection)
        return 'written'
      }
      const sqlite3 = { isTransaction: false, dialect: { name: 'sqlite3' } }
      const libsql = { isTransaction: false, dialect: { name: 'libsql' } }
      const trx = { isTransaction: true, dialect: { name: 'better-sqlite3' } }
      for (const client of [sqlite3, libsql, trx]) {
        assert.equal(await writingWithoutBlocking(client as any, write), 'written')
      }
      assert.deepEqual(runs, [undefined, undefined, undefined])
    })
  }
)
