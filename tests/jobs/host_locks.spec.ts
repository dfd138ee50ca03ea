import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { defineConfig as defineLockConfig, stores } from '@adonisjs/lock'
import type { ApplicationService } from '@adonisjs/core/types'
import { dropPayoutsTables, tableNames } from '../../src/database/schema.ts'
import { validateConfig } from '../../src/define_config.ts'
import { BASE_URL, TEST_API_KEY } from '../helpers/app.ts'
import { connectionConfig, createAllPayoutsTables, TEST_DB } from '../helpers/database.ts'
import { bootHostApp } from '../helpers/host_app.ts'

const LOCK_PROVIDER = () => import('@adonisjs/lock/lock_provider')

/**
 * A host app on the suite's database with the payouts tables, and, when `lock` is given,
 * `@adonisjs/lock` configured with it and its own locks table (`<prefix>host_locks`).
 */
async function hostApp(
  cleanup: (fn: () => Promise<void>) => void,
  options: { lock?: (hostTable: string) => Record<string, unknown>; jobs?: object }
) {
  const prefix = `h${randomUUID().slice(0, 6)}_`
  const hostTable = `${prefix}host_locks`
  const app: ApplicationService = await bootHostApp({
    root: BASE_URL,
    connection: connectionConfig('host-locks'),
    providers: options.lock ? [LOCK_PROVIDER] : [],
    config: options.lock ? { lock: options.lock(hostTable) } : {},
    payouts: {
      apiKey: TEST_API_KEY,
      baseUrl: 'http://127.0.0.1:9',
      ledger: { tablePrefix: prefix },
      jobs: { reconcileEveryMs: 0, escrowEveryMs: 0, recoverEveryMs: 0, ...options.jobs },
    },
  })
  const db = await app.container.make('lucid.db')
  const schema = () => db.connection().schema
  await createAllPayoutsTables(schema(), prefix)
  await schema().createTable(hostTable, (table) => {
    table.string('key', 255).notNullable().primary()
    table.string('owner').notNullable()
    table.bigint('expiration').unsigned().nullable()
  })
  const payouts = await app.container.make('payouts.manager')
  cleanup(async () => {
    await payouts.close()
    await schema().dropTableIfExists(hostTable)
    await dropPayoutsTables(schema(), prefix)
    await app.terminate()
  })
  /** Lock keys in the host's table and in the plugin's own. */
  const keys = async () => ({
    host: (await db.from(hostTable).select('key')).map((row) => row.key),
    plugin: (await db.from(tableNames(prefix).locks).select('key')).map((row) => row.key),
  })
  /** One run of a job through the scheduler that `startJobs` built. */
  const tick = async () => {
    const scheduler = await payouts.startJobs()
    return scheduler.tick({ name: 'reconcile', intervalMs: 60_000, run: async () => 'done' })
  }
  return { app, payouts, keys, tick }
}

test.group(`Jobs | the host app's @adonisjs/lock (${TEST_DB})`, () => {
  test("with @adonisjs/lock configured, the jobs' locks go through its default store", async ({
    assert,
    cleanup,
  }) => {
    const { keys, tick } = await hostApp(cleanup, {
      lock: (tableName) =>
        defineLockConfig({
          default: 'database',
          stores: { database: stores.database({ tableName }), memory: stores.memory() },
        }),
    })

    assert.equal(await tick(), 'ran')

    assert.deepEqual(await keys(), { host: ['svc-payouts:reconcile'], plugin: [] })
    // The same key again within its TTL: held in the host's store, so skipped.
    assert.equal(await tick(), 'skipped')
  })

  test('jobs.lockStore picks a store of the host lock config', async ({ assert, cleanup }) => {
    const { keys, tick } = await hostApp(cleanup, {
      jobs: { lockStore: 'database' },
      lock: (tableName) =>
        defineLockConfig({
          default: 'memory',
          stores: { memory: stores.memory(), database: stores.database({ tableName }) },
        }),
    })

    assert.equal(await tick(), 'ran')

    assert.deepEqual(await keys(), { host: ['svc-payouts:reconcile'], plugin: [] })
  })

  test('the default store of the host is used as is (memory here: no table row anywhere)', async ({
    assert,
    cleanup,
  }) => {
    const { keys, tick } = await hostApp(cleanup, {
      lock: (tableName) =>
        defineLockConfig({
          default: 'memory',
          stores: { memory: stores.memory(), database: stores.database({ tableName }) },
        }),
    })

    assert.equal(await tick(), 'ran')
    assert.equal(await tick(), 'skipped')

    assert.deepEqual(await keys(), { host: [], plugin: [] })
  })

  test('without @adonisjs/lock the locks stay in the plugin table', async ({ assert, cleanup }) => {
    const { keys, tick } = await hostApp(cleanup, {})

    assert.equal(await tick(), 'ran')

    assert.deepEqual(await keys(), { host: [], plugin: ['svc-payouts:reconcile'] })
  })

  test('jobs.lockStore or a Redis connection name without the package they need: the reason is named', async ({
    assert,
    cleanup,
  }) => {
    const withStore = await hostApp(cleanup, { jobs: { lockStore: 'database' } })
    await assert.rejects(
      () => withStore.payouts.startJobs(),
      /jobs\.lockStore needs @adonisjs\/lock/
    )

    const withName = await hostApp(cleanup, { jobs: { redis: 'main' } })
    await assert.rejects(
      () => withName.payouts.startJobs(),
      /jobs\.redis names a connection \("main"\) but the app has no @adonisjs\/redis/
    )
  })

  test('jobs.redis is a redis:// URL or a connection name; jobs.lockStore a name', ({ assert }) => {
    const base = { apiKey: TEST_API_KEY, baseUrl: 'http://127.0.0.1:9' }
    assert.equal(validateConfig({ ...base, jobs: { redis: 'main' } }).jobs.redis, 'main')
    assert.equal(validateConfig({ ...base, jobs: { lockStore: 'redis' } }).jobs.lockStore, 'redis')
    assert.throws(
      () => validateConfig({ ...base, jobs: { redis: 'http://x:6379' } }),
      /jobs\.redis/
    )
    assert.throws(() => validateConfig({ ...base, jobs: { redis: 'two words' } }), /jobs\.redis/)
  })
})
