import { copyFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { test } from '@japa/runner'
import {
  SqliteCheckpointer,
  checkpointerOf,
  checkpointsFor,
  runningCheckpointers,
} from '../../src/database/sqlite_checkpointer.ts'
import { partsOf } from '../../src/service/payouts_service.ts'
import { connectionConfig, setupDatabase, sqlitePath, TEST_DB } from '../helpers/database.ts'
import { serveHostApp } from '../helpers/host_app.ts'

/** The driver the app's connection uses, opened here on a copy of its file. */
const Database = createRequire(import.meta.url)('better-sqlite3')

type Cleanup = (fn: () => Promise<void> | void) => void

/** The suite's SQLite connection on its own file, in WAL mode when `wal`. */
function sqliteConnection(name: string, wal: boolean) {
  const base = connectionConfig(name) as {
    connection: { filename: string }
  } & Record<string, unknown>
  const filename = sqlitePath(`${name}-${process.pid}.sqlite`)
  for (const suffix of ['', '-wal', '-shm']) rmSync(filename + suffix, { force: true })
  return {
    filename,
    config: {
      ...base,
      connection: { filename },
      pool: wal
        ? {
            afterCreate: (conn: { pragma(sql: string): unknown }, done: () => void) => {
              conn.pragma('journal_mode = WAL')
              done()
            },
          }
        : undefined,
    },
  }
}

/** Rows of `table` in the database file alone, as if its log were lost: what was checkpointed. */
function rowsInMainFile(filename: string, table: string): number {
  const copy = `${filename}.main-only`
  copyFileSync(filename, copy)
  try {
    const db = new Database(copy, { readonly: true })
    try {
      const exists = db
        .prepare(`select count(*) as n from sqlite_master where name = ?`)
        .get(table) as { n: number }
      if (exists.n === 0) return 0
      return (db.prepare(`select count(*) as n from "${table}"`).get() as { n: number }).n
    } finally {
      db.close()
    }
  } finally {
    rmSync(copy, { force: true })
  }
}

async function waitUntil(what: string, check: () => boolean | Promise<boolean>, ms = 10_000) {
  const until = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** A Lucid database on its own SQLite file, `rows` rows written in small transactions. */
async function written(cleanup: Cleanup, name: string, wal: boolean, rows: number) {
  const { filename, config } = sqliteConnection(name, wal)
  const { db } = await setupDatabase(cleanup, name, { connection: config, createTables: false })
  const client = db.connection()
  await client.schema.createTable('notes', (table) => {
    table.increments('id')
    table.string('text')
  })
  for (let i = 0; i < rows; i++) await client.table('notes').insert({ text: `note ${i}` })
  return { db, client, filename }
}

if (TEST_DB === 'sqlite') {
  test.group('SQLite checkpoints from a thread (sqlite)', () => {
    test('a WAL file: the thread copies the log into the database file, the last release stops it', async ({
      assert,
      cleanup,
    }) => {
      const { client, filename } = await written(cleanup, 'ckpt_wal', true, 200)
      // 200 small commits stay far below SQLite's own checkpoint (1,000 pages): the rows
      // are in the log only.
      assert.equal(rowsInMainFile(filename, 'notes'), 0, 'nothing checkpointed before')

      const release = await checkpointsFor(client, 20)
      cleanup(release)
      assert.equal(runningCheckpointers(), 1)
      await waitUntil(
        'the rows in the database file',
        () => rowsInMainFile(filename, 'notes') === 200
      )
      const stats = await checkpointerOf(filename)!.stats()
      assert.isAbove(stats.runs, 0)
      assert.isAbove(stats.pages, 0)

      await release()
      assert.equal(runningCheckpointers(), 0)
      assert.isNull(checkpointerOf(filename))
      // Stopped: later commits stay in the log.
      await client.table('notes').insert({ text: 'after' })
      await new Promise((resolve) => setTimeout(resolve, 200))
      assert.equal(rowsInMainFile(filename, 'notes'), 200)
    })

    test('a thread that fails (its file gone) is reported, and stopping it still ends', async ({
      assert,
    }) => {
      const errors: string[] = []
      const missing = sqlitePath(`ckpt_missing-${process.pid}.sqlite`)
      rmSync(missing, { force: true })
      const checkpointer = SqliteCheckpointer.start(missing, {
        intervalMs: 20,
        onError: (message) => errors.push(message),
      })!
      await waitUntil('the failure reported', () => errors.length > 0)
      const stopped = await Promise.race([
        checkpointer.stop().then(() => 'stopped'),
        new Promise((resolve) => setTimeout(() => resolve('still waiting after 3 s'), 3000)),
      ])
      assert.equal(stopped, 'stopped')
      assert.deepEqual(await checkpointer.stats(), { runs: 0, pages: 0 })
    })

    test('two services on one file share one thread; it stops with the last of them', async ({
      assert,
      cleanup,
    }) => {
      const { client, filename } = await written(cleanup, 'ckpt_shared', true, 1)
      const first = await checkpointsFor(client, 20)
      const second = await checkpointsFor(client, 20)
      cleanup(first)
      cleanup(second)
      assert.equal(runningCheckpointers(), 1)
      await first()
      await first()
      assert.equal(runningCheckpointers(), 1, 'a release counts once')
      assert.isNotNull(checkpointerOf(filename))
      await second()
      assert.equal(runningCheckpointers(), 0)
    })

    test('the rollback journal (no log), or sqliteCheckpointMs: 0: no thread', async ({
      assert,
      cleanup,
    }) => {
      const journal = await written(cleanup, 'ckpt_journal', false, 1)
      await checkpointsFor(journal.client, 20)
      assert.equal(runningCheckpointers(), 0, 'rollback journal')
      const wal = await written(cleanup, 'ckpt_off', true, 1)
      await checkpointsFor(wal.client, 0)
      assert.equal(runningCheckpointers(), 0, 'turned off')
    })

    test("a host app on a WAL file: the service's parts start the thread, closing the app stops it", async ({
      assert,
      cleanup,
    }) => {
      const { filename, config } = sqliteConnection('ckpt_app', true)
      const prefix = `c${Math.random().toString(36).slice(2, 7)}_`
      const host = await serveHostApp({
        root: new URL('../tmp/', import.meta.url),
        connection: config,
        tablePrefix: prefix,
        payouts: {
          apiKey: `sk_test_${'C'.repeat(43)}`,
          baseUrl: 'http://127.0.0.1:9',
          webhook: { secret: `whsec_${'c'.repeat(32)}` },
          jobs: { enabled: false },
          ledger: { tablePrefix: prefix, sqliteCheckpointMs: '25ms' },
        },
      })
      let closed = false
      cleanup(async () => {
        if (!closed) await host.close()
      })
      await partsOf(host.payouts)
      assert.equal(runningCheckpointers(), 1)
      assert.isNotNull(checkpointerOf(filename))
      await host.close()
      closed = true
      assert.equal(runningCheckpointers(), 0)
    })
  })
} else {
  test.group(`SQLite checkpoints from a thread (${TEST_DB})`, () => {
    test('not SQLite: no thread', async ({ assert, cleanup }) => {
      const { db } = await setupDatabase(cleanup, 'ckpt_server', { createTables: false })
      const release = await checkpointsFor(db.connection(), 20)
      assert.equal(runningCheckpointers(), 0)
      await release()
    })
  })
}
