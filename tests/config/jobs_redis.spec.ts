import { randomUUID } from 'node:crypto'
import { Worker } from 'node:worker_threads'
import { test } from '@japa/runner'
import { Secret } from '@adonisjs/core/helpers'
import { defineConfig as defineRedisConfig } from '@adonisjs/redis'
import type { ApplicationService } from '@adonisjs/core/types'
import { Redis } from 'ioredis'
import { dropPayoutsTables, tableNames } from '../../src/database/schema.ts'
import { validateConfig } from '../../src/define_config.ts'
import { BASE_URL, TEST_API_KEY } from '../helpers/app.ts'
import { connectionConfig, createAllPayoutsTables, TEST_DB } from '../helpers/database.ts'
import { bootHostApp } from '../helpers/host_app.ts'

const REDIS_HOST = process.env.REDIS_HOST ?? '127.0.0.1'
const REDIS_PORT = Number(process.env.REDIS_PORT ?? 6379)
const REDIS_URL = `redis://${REDIS_HOST}:${REDIS_PORT}`
const base = { apiKey: TEST_API_KEY, baseUrl: 'http://127.0.0.1:9' }

/** Tests that need Redis run when it answers (CI makes sure it does). */
async function redisDown(): Promise<boolean> {
  const probe = new Redis(REDIS_URL, {
    lazyConnect: true,
    connectTimeout: 1000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  })
  probe.on('error', () => {})
  try {
    await probe.connect()
    return (await probe.ping()) !== 'PONG'
  } catch {
    return true
  } finally {
    probe.disconnect()
  }
}
const SKIP_REASON = `Redis does not answer at ${REDIS_URL}`

/** The message of the E_PAYOUTS_INVALID_CONFIG `validate` throws, or a failure. */
function refusal(validate: () => unknown): string {
  try {
    validate()
  } catch (error) {
    const { code, message } = error as { code?: string; message: string }
    if (code !== 'E_PAYOUTS_INVALID_CONFIG') throw error
    return message
  }
  throw new Error('the config was accepted')
}

/**
 * A host app on the suite's database with the payouts tables and, with `redis`, the app's
 * `@adonisjs/redis` (one connection, `cache`, under a key prefix of this test). The keys under
 * the prefix are the Redis side of the locks; `keys().plugin` the table side.
 */
async function hostApp(
  cleanup: (fn: () => Promise<void>) => void,
  options: { redis?: boolean; jobs: Record<string, unknown> }
) {
  const prefix = `r${randomUUID().slice(0, 6)}_`
  const keyPrefix = `svc-test:${prefix}`
  const admin = new Redis(REDIS_URL)
  const app: ApplicationService = await bootHostApp({
    root: BASE_URL,
    connection: connectionConfig('jobs-redis'),
    providers: options.redis ? [() => import('@adonisjs/redis/redis_provider')] : [],
    config: options.redis
      ? {
          redis: defineRedisConfig({
            connection: 'cache',
            connections: { cache: { host: REDIS_HOST, port: REDIS_PORT, keyPrefix } },
          }),
        }
      : {},
    payouts: {
      ...base,
      ledger: { tablePrefix: prefix },
      jobs: { reconcileEveryMs: 0, escrowEveryMs: 0, recoverEveryMs: 0, ...options.jobs },
    },
  })
  const db = await app.container.make('lucid.db')
  await createAllPayoutsTables(db.connection().schema, prefix)
  const payouts = await app.container.make('payouts.manager')
  cleanup(async () => {
    await payouts.close()
    await dropPayoutsTables(db.connection().schema, prefix)
    await app.terminate()
    const left = await admin.keys(`${keyPrefix}*`)
    if (left.length) await admin.del(...left)
    await admin.quit()
  })
  const keys = async () => ({
    redis: await admin.keys(`${keyPrefix}*`),
    plugin: (await db.from(tableNames(prefix).locks).select('key')).map((row) => row.key),
  })
  const tick = async () => {
    const scheduler = await payouts.startJobs()
    return scheduler.tick({ name: 'reconcile', intervalMs: 60_000, run: async () => 'done' })
  }
  return { app, keyPrefix, keys, tick }
}

test.group('Config | jobs.redis and jobs.redisUrl', () => {
  test('jobs.redis names a connection; jobs.redisUrl holds a URL, as a string or a Secret', ({
    assert,
  }) => {
    const named = validateConfig({ ...base, jobs: { redis: 'cache' } }).jobs
    assert.equal(named.redis, 'cache')
    assert.isUndefined(named.redisUrl)
    const url = 'rediss://:pw@cache.internal:6380/2'
    const own = validateConfig({ ...base, jobs: { redisUrl: url } }).jobs
    assert.equal(own.redisUrl, url)
    assert.isUndefined(own.redis)
    assert.equal(
      validateConfig({ ...base, jobs: { redisUrl: new Secret(url) } }).jobs.redisUrl,
      url
    )
    // Shown, the URL's password is hidden.
    assert.notInclude(JSON.stringify(validateConfig({ ...base, jobs: { redisUrl: url } })), ':pw@')
  })

  test('a URL in jobs.redis still works, read as jobs.redisUrl, with a deprecation warning once', async ({
    assert,
  }) => {
    const url = 'redis://127.0.0.1:6379/1'
    const jobs = validateConfig({ ...base, jobs: { redis: url } }).jobs
    assert.equal(jobs.redisUrl, url)
    assert.isUndefined(jobs.redis)
    // A fresh module in a thread of its own (this process may have warned already).
    const worker = new Worker(
      `const { parentPort } = require('node:worker_threads')
      const warnings = []
      process.on('warning', (w) => warnings.push({ name: w.name, code: w.code, message: w.message }))
      import(${JSON.stringify(new URL('../../src/define_config.ts', import.meta.url).href)}).then(
        async ({ validateConfig }) => {
          const config = ${JSON.stringify({ ...base, jobs: { redis: url } })}
          validateConfig(config)
          validateConfig(config)
          await new Promise((resolve) => setTimeout(resolve, 50))
          parentPort.postMessage(warnings)
        }
      )`,
      { eval: true }
    )
    const warnings = await new Promise<any[]>((resolve, reject) => {
      worker.once('message', resolve)
      worker.once('error', reject)
    })
    await worker.terminate()
    assert.deepEqual(warnings, [
      {
        name: 'DeprecationWarning',
        code: 'SVC_PAYOUTS_JOBS_REDIS_URL',
        message:
          'jobs.redis with a redis:// URL is deprecated: name a connection of @adonisjs/redis, or set jobs.redisUrl',
      },
    ])
  })

  test('what jobs.redis and jobs.redisUrl refuse, each named', ({ assert }) => {
    assert.match(
      refusal(() => validateConfig({ ...base, jobs: { redis: 'two words' } })),
      /: jobs\.redis must name a connection of config\/redis\.ts \(a redis:\/\/ URL goes in jobs\.redisUrl\)$/
    )
    assert.match(
      refusal(() => validateConfig({ ...base, jobs: { redis: 'http://127.0.0.1:6379' } })),
      /: jobs\.redis must name a connection/
    )
    assert.match(
      refusal(() => validateConfig({ ...base, jobs: { redisUrl: 'http://127.0.0.1:6379' } })),
      /: jobs\.redisUrl /
    )
    const both = refusal(() =>
      validateConfig({ ...base, jobs: { redis: 'cache', redisUrl: 'redis://:pw@h:6379' } })
    )
    assert.match(both, /: jobs\.redisUrl is set with jobs\.redis: keep one/)
    assert.notInclude(both, 'pw')
  })
})

test.group(`Config | jobs.redis in a host app (${TEST_DB})`, () => {
  test("jobs.redis naming a connection of the app's @adonisjs/redis: the locks go through it", async ({
    assert,
    cleanup,
  }) => {
    const { keys, keyPrefix, tick } = await hostApp(cleanup, {
      redis: true,
      jobs: { redis: 'cache' },
    })
    assert.equal(await tick(), 'ran')
    assert.deepEqual(await keys(), { redis: [`${keyPrefix}svc-payouts:reconcile`], plugin: [] })
    assert.equal(await tick(), 'skipped')
  })
    .skip(redisDown, SKIP_REASON)
    .timeout(15_000)

  test('jobs.redisUrl (and the deprecated URL in jobs.redis): a client of their own', async ({
    assert,
    cleanup,
  }) => {
    for (const key of ['redisUrl', 'redis']) {
      const keyPrefix = `svc-test:${randomUUID().slice(0, 8)}:`
      const url = `${REDIS_URL}?keyPrefix=${encodeURIComponent(keyPrefix)}`
      const { keys, tick } = await hostApp(cleanup, { jobs: { [key]: url } })
      assert.equal(await tick(), 'ran', key)
      const { plugin } = await keys()
      assert.deepEqual(plugin, [], `${key}: no lock in the table`)
      const admin = new Redis(REDIS_URL)
      try {
        assert.deepEqual(await admin.keys(`${keyPrefix}*`), [`${keyPrefix}svc-payouts:reconcile`])
        await admin.del(`${keyPrefix}svc-payouts:reconcile`)
      } finally {
        await admin.quit()
      }
    }
  })
    .skip(redisDown, SKIP_REASON)
    .timeout(15_000)
})
