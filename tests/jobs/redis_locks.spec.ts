import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { Redis } from 'ioredis'
import { validateConfig } from '../../src/define_config.ts'
import { createJobLocks } from '../../src/jobs/locks.ts'
import { JobScheduler, type ScheduledJob } from '../../src/jobs/scheduler.ts'
import { PayoutsService } from '../../src/service/payouts_service.ts'
import { createClient } from '../../src/service/client_factory.ts'
import { TEST_API_KEY } from '../helpers/app.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'
import { tickTogether } from './helpers.ts'
import { partsOf } from '../../src/service/payouts_service.ts'

const REDIS_URL = `redis://${process.env.REDIS_HOST ?? '127.0.0.1'}:${process.env.REDIS_PORT ?? 6379}`

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

/** A key prefix of its own per test, its keys deleted in cleanup. */
function redisNamespace(cleanup: (fn: () => Promise<void>) => void) {
  const prefix = `svc-test:${randomUUID().slice(0, 8)}:`
  const admin = new Redis(REDIS_URL)
  cleanup(async () => {
    const keys = await admin.keys(`${prefix}*`)
    if (keys.length) await admin.del(...keys)
    await admin.quit()
  })
  return { prefix, url: `${REDIS_URL}?keyPrefix=${encodeURIComponent(prefix)}`, admin }
}

interface LogLine {
  level: 'info' | 'error'
  obj: any
  msg?: string
}

/** The slice of the AdonisJS logger the service uses, recording what it is given. */
function recordingLogger(lines: LogLine[]) {
  const logger: any = {
    info: (obj: any, msg?: string) => void lines.push({ level: 'info', obj, msg }),
    error: (obj: any, msg?: string) => void lines.push({ level: 'error', obj, msg }),
    warn: () => {},
    debug: () => {},
    trace: () => {},
  }
  logger.child = () => logger
  return logger
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

test.group(`Jobs | locks on Redis (${TEST_DB})`, () => {
  test('two schedulers on one Redis: each job runs once per interval', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'redis-locks')
    const { url, prefix, admin } = redisNamespace(cleanup)
    const lines: LogLine[] = []
    const logger = recordingLogger(lines)
    const options = { redis: url, db, tableName: 'unused', logger }
    const [first, second] = [await createJobLocks(options), await createJobLocks(options)]
    cleanup(async () => {
      await first.close()
      await second.close()
    })
    assert.equal(first.store, 'redis')
    const runs: string[] = []
    const job = (instance: string): ScheduledJob => ({
      name: 'reconcile',
      intervalMs: 400,
      run: async () => void runs.push(instance),
    })
    const a = new JobScheduler({ locks: first.locks, logger, jobs: [] })
    const b = new JobScheduler({ locks: second.locks, logger, jobs: [] })

    const { round, outcomes } = await tickTogether(a, b, job)
    assert.deepEqual(outcomes[0].toSorted(), ['ran', 'skipped'])
    assert.deepEqual(outcomes[1], ['skipped', 'skipped'])
    assert.deepEqual(outcomes[2], ['skipped', 'skipped'])
    assert.lengthOf(runs, 1)
    // The lock is a Redis key under the test's prefix, expiring with the interval.
    const ttl = await admin.pttl(`${prefix}svc-payouts:reconcile`)
    assert.isAbove(ttl, 0)
    assert.isAtMost(ttl, 350)

    await sleep(450)
    assert.deepEqual((await round()).toSorted(), ['ran', 'skipped'])
    assert.lengthOf(runs, 2)
    assert.lengthOf(
      lines.filter((line) => line.msg === 'payouts job ran'),
      2
    )
  }).skip(redisDown, SKIP_REASON)

  test('two services with jobs.redisUrl: each job runs once per interval, not once per instance', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix: tablePrefix } = await setupDatabase(cleanup, 'redis-locks')
    const { url, prefix, admin } = redisNamespace(cleanup)
    const intervalMs = 500
    const config = validateConfig({
      apiKey: TEST_API_KEY,
      baseUrl: 'http://127.0.0.1:9',
      jobs: {
        redisUrl: url,
        reconcileEveryMs: intervalMs,
        escrowEveryMs: intervalMs,
        recoverEveryMs: intervalMs,
      },
      ledger: { tablePrefix },
    })
    /** Each run, `at` its start: when it was logged, less how long it ran. */
    const runs: Array<{ instance: string; job: string; at: number }> = []
    const service = (instance: string) => {
      const lines: LogLine[] = []
      const logger = recordingLogger(lines)
      const info = logger.info
      logger.info = (obj: any, msg?: string) => {
        if (msg === 'payouts job ran') {
          runs.push({ instance, job: obj.job, at: Date.now() - obj.ms })
        }
        info(obj, msg)
      }
      const created = new PayoutsService(config, {
        logger,
        createClient: () => createClient(config, logger),
        database: async () => db,
      })
      cleanup(() => created.close())
      return { service: created, lines }
    }
    const a = service('a')
    const b = service('b')
    // Built first, so the first ticks do not wait on the ledger's lazy imports.
    await Promise.all([partsOf(a.service), partsOf(b.service)])
    const started = Date.now()
    await Promise.all([a.service.startJobs(), b.service.startJobs()])
    // Live locks are Redis keys under this test's prefix (none in the database), looked for
    // through the runs: a lock lives for its interval, and a busy machine may tick late.
    const keys = new Set<string>()
    while (Date.now() - started < intervalMs * 5 + 100) {
      for (const key of await admin.keys(`${prefix}svc-payouts:*`)) keys.add(key)
      await sleep(50)
    }
    await Promise.all([a.service.close(), b.service.close()])
    const elapsed = Date.now() - started
    assert.isNotEmpty([...keys])
    for (const { lines } of [a, b]) {
      const announced = lines.find((line) => line.msg === 'payouts jobs started')
      assert.deepEqual(announced?.obj, {
        account: 'main',
        locks: 'redis',
        intervals: {
          reconcile: intervalMs,
          escrow: intervalMs,
          recover: intervalMs,
          prune: 3_600_000,
        },
      })
    }

    for (const name of ['reconcile', 'escrow', 'recover']) {
      const ofJob = runs.filter((run) => run.job === name)
      // Without the lock both instances would run it every interval (10 runs).
      assert.isAtLeast(ofJob.length, 3, `${name} ran`)
      assert.isAtMost(ofJob.length, Math.floor(elapsed / (intervalMs - 50)) + 1, `${name} runs`)
      // Two runs never start close together: without the lock both instances start within
      // milliseconds of each other. Half the TTL, as when a start is seen after the lock's
      // round trip moves with a busy machine (how long a run lasts no longer counts).
      for (let i = 1; i < ofJob.length; i++) {
        assert.isAtLeast(ofJob[i].at - ofJob[i - 1].at, intervalMs / 2, `${name} gap`)
      }
    }
    assert.notExists(
      [...a.lines, ...b.lines].find((line) => line.level === 'error'),
      'no job failed'
    )
  })
    .skip(redisDown, SKIP_REASON)
    .timeout(10_000)

  test('Redis unreachable: the tick fails and is logged, never runs the job unlocked', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'redis-locks')
    const lines: LogLine[] = []
    const logger = recordingLogger(lines)
    // Nothing listens on port 1: every command fails after its retries.
    const locks = await createJobLocks({
      redis: 'redis://127.0.0.1:1',
      db,
      tableName: 'unused',
      logger,
    })
    cleanup(() => locks.close())
    let ran = 0
    const scheduler = new JobScheduler({ locks: locks.locks, logger, jobs: [] })
    const outcome = await scheduler.tick({
      name: 'escrow',
      intervalMs: 1000,
      run: async () => void ran++,
    })
    assert.equal(outcome, 'failed')
    assert.equal(ran, 0)
    assert.isTrue(lines.some((line) => line.msg === 'payouts job lock unavailable'))
    assert.lengthOf(
      lines.filter((line) => line.msg === 'payouts job locks: redis unavailable'),
      1,
      'one line per outage, not per reconnect attempt'
    )
  }).timeout(10_000)

  test("jobs.redis naming a connection: the app's Redis client is used, and never closed here", async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'redis-locks')
    const { url, prefix, admin } = redisNamespace(cleanup)
    // Stands for `redis.connection('main').ioConnection` of @adonisjs/redis.
    const appClient = new Redis(url)
    cleanup(async () => void (await appClient.quit()))
    const asked: string[] = []
    const locks = await createJobLocks({
      redis: 'main',
      redisConnection: async (name) => {
        asked.push(name)
        return appClient
      },
      db,
      tableName: 'unused',
      logger: recordingLogger([]),
    })
    assert.equal(locks.store, 'redis')
    assert.isTrue(await locks.locks.createLock('svc-payouts:probe', 10_000).acquireImmediately())
    assert.deepEqual(asked, ['main'])
    assert.deepEqual(await admin.keys(`${prefix}*`), [`${prefix}svc-payouts:probe`])
    await locks.close()
    assert.equal(appClient.status, 'ready', "the app's client stays open")
  }).skip(redisDown, SKIP_REASON)

  test('jobs.redisUrl takes a redis:// URL; without it the locks stay in the database', async ({
    assert,
    cleanup,
  }) => {
    const base = { apiKey: TEST_API_KEY, baseUrl: 'http://127.0.0.1:9' }
    assert.throws(
      () => validateConfig({ ...base, jobs: { redisUrl: 'http://127.0.0.1:6379' } }),
      /jobs\.redisUrl/
    )
    assert.equal(
      validateConfig({ ...base, jobs: { redisUrl: 'rediss://cache.internal:6380/2' } }).jobs
        .redisUrl,
      'rediss://cache.internal:6380/2'
    )
    const { db, prefix } = await setupDatabase(cleanup, 'redis-locks')
    const locks = await createJobLocks({
      db,
      tableName: `${prefix}locks`,
      logger: recordingLogger([]),
    })
    assert.equal(locks.store, 'database')
    assert.isTrue(await locks.locks.createLock('svc-payouts:probe', 1000).acquireImmediately())
  })
})
