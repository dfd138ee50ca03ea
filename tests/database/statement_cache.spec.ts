import { rmSync } from 'node:fs'
import { test } from '@japa/runner'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import {
  cacheSqliteStatements,
  MAX_CACHED_SQL_LENGTH,
  statementCacheOf,
} from '../../src/database/statement_cache.ts'
import { partsOf } from '../../src/service/payouts_service.ts'
import { connectionConfig, setupDatabase, sqlitePath, TEST_DB } from '../helpers/database.ts'
import { serveHostApp } from '../helpers/host_app.ts'

type Cleanup = (fn: () => Promise<void> | void) => void

/** A Lucid database on a SQLite file of its own, with a `notes` table of `rows` rows. */
async function notes(cleanup: Cleanup, name: string, rows = 3) {
  const filename = sqlitePath(`${name}-${process.pid}.sqlite`)
  for (const suffix of ['', '-wal', '-shm']) rmSync(filename + suffix, { force: true })
  const { db } = await setupDatabase(cleanup, name, {
    connection: { ...connectionConfig(name), connection: { filename } },
    createTables: false,
  })
  const client = db.connection()
  await client.schema.createTable('notes', (table) => {
    table.increments('id')
    table.string('text')
  })
  for (let i = 0; i < rows; i++) await client.table('notes').insert({ text: `note ${i}` })
  return { db, client }
}

/** What the next statements do to the cache's counts. */
async function counted(client: QueryClientContract, run: () => Promise<unknown>) {
  const stats = statementCacheOf(client)!
  const [hits, misses] = [stats.hits, stats.misses]
  await run()
  return { hits: stats.hits - hits, misses: stats.misses - misses }
}

if (TEST_DB === 'sqlite') {
  test.group('SQLite statements kept and run again (sqlite)', () => {
    test('a statement run again is taken from the cache, with the same results, in a transaction too', async ({
      assert,
      cleanup,
    }) => {
      const { db, client } = await notes(cleanup, 'stmt_reuse')
      const read = () => client.from('notes').where('id', '>', 1).orderBy('id')
      const before = await read()
      assert.isNotNull(cacheSqliteStatements(client, 10))

      const first = await counted(client, read)
      assert.deepEqual(first, { hits: 0, misses: 1 })
      const again = await counted(client, async () => {
        assert.deepEqual(await read(), before)
        assert.deepEqual(await read(), before)
      })
      assert.deepEqual(again, { hits: 2, misses: 0 })

      // A transaction's knex client is made from the client's class, not from the client:
      // its statements (BEGIN, COMMIT included) are kept too.
      const transaction = () =>
        db.transaction(async (trx) => {
          await trx.table('notes').insert({ text: 'in a transaction' })
          return trx.from('notes').where('text', 'in a transaction').count('* as n')
        })
      await transaction()
      const second = await counted(client, transaction)
      assert.deepEqual(second, { hits: 4, misses: 0 }, 'BEGIN, INSERT, SELECT, COMMIT')
      assert.equal(Number((await client.from('notes').count('* as n'))[0].n), 5)

      // Writes through a kept statement: their own bindings every time.
      const insert = (text: string) => client.table('notes').insert({ text })
      await insert('a')
      await insert('b')
      assert.deepEqual(
        (await client.from('notes').orderBy('id', 'desc').limit(2)).map((row) => row.text),
        ['b', 'a']
      )
    })

    test('each connection keeps its last `size` statements; the least recently used goes first', async ({
      assert,
      cleanup,
    }) => {
      const { client } = await notes(cleanup, 'stmt_bound')
      cacheSqliteStatements(client, 2)
      const select = (id: number) => client.from('notes').select(`id as c${id}`)
      const misses = async (...ids: number[]) =>
        (
          await counted(client, async () => {
            for (const id of ids) await select(id)
          })
        ).misses
      assert.equal(await misses(1, 2), 2)
      assert.equal(await misses(2, 1), 0, 'both kept')
      assert.equal(await misses(3), 1, 'a third: 2, the least recently used, goes')
      assert.equal(await misses(1, 3), 0, '1, used since, stays')
      assert.equal(await misses(2), 1, 'prepared again')
    })

    test('a statement longer than the bound is prepared every time, never kept', async ({
      assert,
      cleanup,
    }) => {
      const { client } = await notes(cleanup, 'stmt_long')
      cacheSqliteStatements(client, 10)
      const long = `select id from notes where text <> '${'x'.repeat(MAX_CACHED_SQL_LENGTH)}'`
      const counts = await counted(client, async () => {
        assert.lengthOf(await client.rawQuery(long), 3)
        assert.lengthOf(await client.rawQuery(long), 3)
      })
      assert.deepEqual(counts, { hits: 0, misses: 0 })
    })

    test("a query's own safeIntegers does not stay on the kept statement", async ({
      assert,
      cleanup,
    }) => {
      const { client } = await notes(cleanup, 'stmt_integers')
      cacheSqliteStatements(client, 10)
      const knex = client.getWriteClient()
      const read = () => knex('notes').select('id').where('id', 1)
      assert.deepEqual(await read(), [{ id: 1 }])
      assert.deepEqual(await read().options({ safeIntegers: true }), [{ id: 1n }])
      // knex sets safeIntegers on the statement it runs: had that been the kept one, this
      // plain query would now read BigInts.
      assert.deepEqual(await read(), [{ id: 1 }])
    })

    test('a kept statement follows a change of the schema', async ({ assert, cleanup }) => {
      const { client } = await notes(cleanup, 'stmt_schema', 1)
      cacheSqliteStatements(client, 10)
      const read = () => client.rawQuery('select * from notes')
      assert.deepEqual(await read(), [{ id: 1, text: 'note 0' }])
      await client.schema.alterTable('notes', (table) => table.string('tag').defaultTo('t'))
      const after = await counted(client, async () => {
        assert.deepEqual(await read(), [{ id: 1, text: 'note 0', tag: 't' }])
      })
      assert.deepEqual(after, { hits: 1, misses: 0 })
    })

    test('the connection itself is untouched: what the app prepares on it is its own', async ({
      assert,
      cleanup,
    }) => {
      const { client } = await notes(cleanup, 'stmt_raw')
      cacheSqliteStatements(client, 10)
      await client.rawQuery('select 1 as one')
      await client.rawQuery('select 1 as one')
      const pool = client.getWriteClient().client as unknown as {
        acquireConnection(): Promise<{ prepare(sql: string): { raw(on: boolean): unknown } }>
        releaseConnection(connection: unknown): Promise<unknown>
      }
      const raw = await pool.acquireConnection()
      try {
        assert.isFalse(Object.hasOwn(raw, 'prepare'))
        const mine = raw.prepare('select 1 as one')
        assert.notStrictEqual(mine, raw.prepare('select 1 as one'))
        // Configured here, it changes nothing of what knex reads.
        mine.raw(true)
      } finally {
        await pool.releaseConnection(raw)
      }
      assert.deepEqual(await client.rawQuery('select 1 as one'), [{ one: 1 }])
    })

    test('a savepoint (knex names each apart) is prepared, never kept', async ({
      assert,
      cleanup,
    }) => {
      const { db, client } = await notes(cleanup, 'stmt_savepoint')
      cacheSqliteStatements(client, 10)
      const nested = () =>
        db.transaction(async (trx) => {
          const inner = await trx.transaction()
          await inner.table('notes').insert({ text: 'nested' })
          await inner.commit()
        })
      await nested()
      const counts = await counted(client, nested)
      // BEGIN, INSERT and COMMIT kept; SAVEPOINT and RELEASE SAVEPOINT neither kept nor counted.
      assert.deepEqual(counts, { hits: 3, misses: 0 })
      assert.equal(Number((await client.from('notes').count('* as n'))[0].n), 5)
    })

    test('a second copy of this module (two versions of the plugin) registers where the first copy reads', async ({
      assert,
      cleanup,
    }) => {
      const { client } = await notes(cleanup, 'stmt_copies')
      // The first copy has patched knex's class already (the other tests, the wiring).
      cacheSqliteStatements((await notes(cleanup, 'stmt_copies_first')).client, 10)
      const copy = (await import(
        `../../src/database/statement_cache.ts?copy=${Math.random()}`
      )) as typeof import('../../src/database/statement_cache.ts')
      const stats = copy.cacheSqliteStatements(client, 10)!
      await client.rawQuery('select 2 as two')
      await client.rawQuery('select 2 as two')
      assert.deepEqual({ hits: stats.hits, misses: stats.misses }, { hits: 1, misses: 1 })
    })

    test('0 keeps none; a second call keeps the first size', async ({ assert, cleanup }) => {
      const { client } = await notes(cleanup, 'stmt_off')
      assert.isNull(cacheSqliteStatements(client, 0))
      assert.isNull(statementCacheOf(client))
      const stats = cacheSqliteStatements(client, 5)!
      assert.equal(stats.size, 5)
      assert.strictEqual(cacheSqliteStatements(client, 50), stats)
    })

    test("a host app's service keeps statements on its SQLite connection unless told not to", async ({
      assert,
      cleanup,
    }) => {
      for (const size of [undefined, 0]) {
        const name = `stmt_app_${size ?? 'default'}`
        const filename = sqlitePath(`${name}-${process.pid}.sqlite`)
        rmSync(filename, { force: true })
        const prefix = `s${Math.random().toString(36).slice(2, 7)}_`
        const host = await serveHostApp({
          root: new URL('../tmp/', import.meta.url),
          connection: { ...connectionConfig(name), connection: { filename } },
          tablePrefix: prefix,
          payouts: {
            apiKey: `sk_test_${'S'.repeat(43)}`,
            baseUrl: 'http://127.0.0.1:9',
            webhook: { secret: `whsec_${'s'.repeat(32)}` },
            jobs: { enabled: false },
            ledger: { tablePrefix: prefix, sqliteStatementCache: size },
          },
        })
        cleanup(() => host.close())
        await partsOf(host.payouts)
        const db = await host.app.container.make('lucid.db')
        const stats = statementCacheOf(db.connection())
        if (size === 0) {
          assert.isNull(stats)
          continue
        }
        assert.equal(stats?.size, 100)
        const count = () => db.connection().from(`${prefix}payouts`).count('* as n')
        await count()
        const again = await counted(db.connection(), count)
        assert.isAbove(again.hits, 0)
        assert.equal(again.misses, 0)
      }
    })
  })
} else {
  test.group(`SQLite statements kept and run again (${TEST_DB})`, () => {
    test('not better-sqlite3: nothing installed', async ({ assert, cleanup }) => {
      const { db } = await setupDatabase(cleanup, 'stmt_server', { createTables: false })
      assert.isNull(cacheSqliteStatements(db.connection(), 100))
      assert.isNull(statementCacheOf(db.connection()))
      // The driver's knex class is not patched: its queries run exactly as knex runs them.
      const knexClient = db.connection().getWriteClient().client as object
      const patched = Symbol.for('@svc/adonis-payouts/statement-cache/patched')
      assert.isFalse(patched in Object.getPrototypeOf(knexClient))
    })
  })
}
