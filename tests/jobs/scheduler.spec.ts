import { test } from '@japa/runner'
import { Logger } from '@adonisjs/core/logger'
import { Database } from '@adonisjs/lucid/database'
import { Emitter } from '@adonisjs/core/events'
import { AppFactory } from '@adonisjs/core/factories/app'
import { Verrou } from '@verrou/core'
import { knexStore } from '@verrou/core/drivers/knex'
import { tableNames } from '../../src/database/schema.ts'
import { JobScheduler } from '../../src/jobs/scheduler.ts'
import { connectionConfig, setupDatabase, TEST_DB } from '../helpers/database.ts'
import { tickTogether } from './helpers.ts'
import { SCRATCH_URL } from '../helpers/scratch.ts'

const logger = new Logger({ enabled: false })

/** A second, independent connection pool on the same database: another app instance. */
async function secondInstance(cleanup: (fn: () => Promise<void>) => void) {
  const app = new AppFactory().create(SCRATCH_URL)
  await app.init()
  const db = new Database(
    { connection: 'primary', connections: { primary: connectionConfig('scheduler') } },
    logger,
    new Emitter(app)
  )
  cleanup(() => db.manager.closeAll())
  return db
}

function lockFactory(db: Database, prefix: string) {
  const verrou = new Verrou({
    default: 'db',
    stores: {
      db: {
        driver: knexStore({
          connection: db.connection().getWriteClient(),
          tableName: tableNames(prefix).locks,
          autoCreateTable: false,
        }),
      },
    },
  })
  return verrou.use('db')
}

test.group(`Jobs | scheduler across instances (${TEST_DB})`, () => {
  test('two instances on one database: each job runs once per interval', async ({
    assert,
    cleanup,
  }) => {
    const { db: first, prefix } = await setupDatabase(cleanup, 'scheduler')
    const second = await secondInstance(cleanup)
    const runs: string[] = []
    const job = (instance: string) => ({
      name: 'reconcile',
      intervalMs: 400,
      run: async () => void runs.push(instance),
    })
    const a = new JobScheduler({ locks: lockFactory(first, prefix), logger, jobs: [job('a')] })
    const b = new JobScheduler({ locks: lockFactory(second, prefix), logger, jobs: [job('b')] })

    const { round, outcomes } = await tickTogether(a, b, job)
    assert.deepEqual(outcomes[0].toSorted(), ['ran', 'skipped'])
    assert.deepEqual(outcomes[1], ['skipped', 'skipped'])
    assert.deepEqual(outcomes[2], ['skipped', 'skipped'])
    assert.lengthOf(runs, 1)

    await new Promise((resolve) => setTimeout(resolve, 450))
    const next = await round()
    assert.deepEqual(next.toSorted(), ['ran', 'skipped'])
    assert.lengthOf(runs, 2)
    await a.stop()
    await b.stop()
  })

  test('a failing job is logged and does not stop the scheduler', async ({ assert, cleanup }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'scheduler')
    const errors: unknown[] = []
    const scheduler = new JobScheduler({
      locks: lockFactory(db, prefix),
      logger: { info: () => {}, error: (obj) => void errors.push(obj) },
      jobs: [],
    })
    const outcome = await scheduler.tick({
      name: 'escrow',
      intervalMs: 1000,
      run: async () => {
        throw new Error('boom')
      },
    })
    assert.equal(outcome, 'failed')
    assert.lengthOf(errors, 1)
  })

  test('a run longer than its interval overlaps no other run, here or on another instance', async ({
    assert,
    cleanup,
  }) => {
    const { db: first, prefix } = await setupDatabase(cleanup, 'scheduler')
    const second = await secondInstance(cleanup)
    let running = 0
    let overlaps = 0
    const runs: string[] = []
    const job = (instance: string) => ({
      name: 'recover',
      // Long enough that a loaded machine cannot starve the lease extension.
      intervalMs: 900,
      run: async () => {
        if (++running > 1) overlaps++
        runs.push(instance)
        // Three intervals long: without the lock being extended, others would start.
        await new Promise((resolve) => setTimeout(resolve, 2700))
        running--
      },
    })
    const a = new JobScheduler({ locks: lockFactory(first, prefix), logger, jobs: [job('a')] })
    const b = new JobScheduler({ locks: lockFactory(second, prefix), logger, jobs: [job('b')] })
    const ticks: Array<Promise<string>> = []
    for (let i = 0; i < 10; i++) {
      ticks.push(a.tick(job('a')), b.tick(job('b')))
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
    const outcomes = await Promise.all(ticks)
    assert.equal(overlaps, 0)
    assert.lengthOf(runs, 1, 'one run while it lasts, however many ticks')
    assert.equal(outcomes.filter((o) => o === 'ran').length, 1)
    await a.stop()
    await b.stop()
  })
})
