import { rm } from 'node:fs/promises'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { test } from '@japa/runner'
import { Payout, PayoutEvent, WebhookDelivery } from '../../src/models/main.ts'
import { openDatabase, readLog, waitFor } from '../chaos/helpers.ts'
import { fiatBody, startEmulator } from '../emulator/helpers.ts'
import { TEST_API_KEY } from '../helpers/app.ts'
import { sqlitePath, TEST_DB } from '../helpers/database.ts'
import { batchLines, postDeliveries, spawnChild, type ChildOptions } from './helpers.ts'

/**
 * `webhook.processing: 'worker'` and `node ace payouts:work`, as child processes on one
 * database: the web process only stores and acknowledges, the worker applies; a SIGTERM in
 * the middle of a batch finishes that batch and loses nothing; two workers share the work.
 */

async function setup(cleanup: (fn: () => Promise<void>) => void, batchSize: number) {
  const sqliteFile = sqlitePath(`svc-payouts-worker-${process.pid}-${Date.now()}.sqlite`)
  const eventsFile = join(tmpdir(), `svc-payouts-worker-events-${process.pid}-${Date.now()}.jsonl`)
  // Registered first, so it runs last: after the tables are dropped and the children gone.
  cleanup(async () => {
    await Promise.all([sqliteFile, eventsFile].map((file) => rm(file, { force: true })))
  })
  const { prefix } = await openDatabase(cleanup, sqliteFile, () => false)
  const options: ChildOptions = { prefix, batchSize, eventsFile }
  const env: Record<string, string> = TEST_DB !== 'sqlite' ? {} : { SVC_TEST_SQLITE: sqliteFile }
  return { options, env, eventsFile }
}

async function inboxStates() {
  const states: Record<string, number> = {}
  for (const row of await WebhookDelivery.query().select('state')) {
    states[row.state] = (states[row.state] ?? 0) + 1
  }
  return states
}

/** Every delivery applied exactly once: one log entry per delivery, one app event per payout. */
async function assertAppliedOnce(assert: any, payoutIds: string[], eventsFile: string) {
  const logged = await PayoutEvent.query().whereNotNull('delivery_id')
  assert.equal(logged.length, payoutIds.length)
  assert.equal(new Set(logged.map((row) => row.deliveryId)).size, payoutIds.length)
  // The events fire after COMMIT: the last batch's may still be on their way.
  const told = () => new Set(readLog(eventsFile).map((event: any) => event.payoutId))
  await waitFor('every payout told', () => payoutIds.every((id) => told().has(id)), {
    timeoutMs: 10_000,
  }).catch(() => {})
  const events = readLog(eventsFile) as unknown as Array<{ payoutId: string }>
  const perPayout = new Map<string, number>()
  for (const event of events)
    perPayout.set(event.payoutId, (perPayout.get(event.payoutId) ?? 0) + 1)
  assert.deepEqual(
    payoutIds.filter((id) => perPayout.get(id) !== 1),
    [],
    'each payout told exactly once'
  )
}

function allProcessed(count: number) {
  return waitFor(
    'every delivery processed',
    async () => (await inboxStates()).processed === count,
    { timeoutMs: 40_000 }
  )
}

test.group(`Worker | web and worker processes (${TEST_DB})`, () => {
  test('the web process in worker mode stores and acknowledges; the worker applies', async ({
    assert,
    cleanup,
  }) => {
    const { options, env, eventsFile } = await setup(cleanup, 10)
    const web = spawnChild(cleanup, 'web_app.ts', options, env)
    const { url } = await web.nextMessage('ready')
    const payoutIds = await postDeliveries(url, 25)

    web.process.send({ type: 'idle' })
    const { states } = await web.nextMessage('idle')
    assert.deepEqual(states, { pending: 25 }, 'the web process processed nothing')

    const worker = spawnChild(cleanup, 'worker_app.ts', options, env)
    await allProcessed(25)
    await assertAppliedOnce(assert, payoutIds, eventsFile)

    worker.process.kill('SIGTERM')
    assert.equal(await worker.exited, 0)
    const batches = batchLines(worker.stdout())
    assert.isAbove(batches.length, 0, 'one info line per batch')
    assert.equal(
      batches.reduce((sum, line) => sum + line.processed, 0),
      25,
      'the batch lines count every delivery'
    )
    web.process.kill('SIGTERM')
    assert.equal(await web.exited, 0)
  }).timeout(60_000)

  test('SIGTERM in the middle of a batch finishes it, loses nothing and applies nothing twice', async ({
    assert,
    cleanup,
  }) => {
    const { options, env, eventsFile } = await setup(cleanup, 10)
    const web = spawnChild(cleanup, 'web_app.ts', options, env)
    const { url } = await web.nextMessage('ready')
    const payoutIds = await postDeliveries(url, 30)

    const first = spawnChild(
      cleanup,
      'worker_app.ts',
      { ...options, pauseFirstBatch: 'sigterm' },
      env
    )
    const { rows } = await first.nextMessage('in-batch')
    assert.equal(rows, 10)
    first.process.kill('SIGTERM')
    assert.equal(await first.exited, 0, 'exits 0 after the batch in hand')
    assert.deepEqual(
      await inboxStates(),
      { processed: 10, pending: 20 },
      'the batch in hand committed, no further batch taken'
    )

    const second = spawnChild(cleanup, 'worker_app.ts', options, env)
    await allProcessed(30)
    await assertAppliedOnce(assert, payoutIds, eventsFile)
    second.process.kill('SIGINT')
    assert.equal(await second.exited, 0, 'SIGINT stops it as SIGTERM does')
  }).timeout(60_000)

  test('two workers share the inbox and apply nothing twice', async ({ assert, cleanup }) => {
    const { options, env, eventsFile } = await setup(cleanup, 10)
    const web = spawnChild(cleanup, 'web_app.ts', options, env)
    const { url } = await web.nextMessage('ready')
    const payoutIds = await postDeliveries(url, 40)

    // The first worker holds its batch's rows (locked, uncommitted); the second takes the rest.
    const first = spawnChild(cleanup, 'worker_app.ts', { ...options, pauseFirstBatch: 'go' }, env)
    assert.equal((await first.nextMessage('in-batch')).rows, 10)
    const second = spawnChild(cleanup, 'worker_app.ts', options, env)
    await waitFor(
      'the second worker took the other rows',
      async () => (await inboxStates()).processed === 30,
      {
        timeoutMs: 40_000,
      }
    )
    first.process.send({ type: 'go' })
    await allProcessed(40)
    await assertAppliedOnce(assert, payoutIds, eventsFile)

    first.process.kill('SIGTERM')
    second.process.kill('SIGTERM')
    assert.deepEqual(await Promise.all([first.exited, second.exited]), [0, 0])
    const processedBy = (child: typeof first) =>
      batchLines(child.stdout()).reduce((sum, line) => sum + line.processed, 0)
    assert.deepEqual([processedBy(first), processedBy(second)], [10, 30])
  })
    .skip(
      TEST_DB === 'sqlite',
      'PostgreSQL and MySQL only: on SQLite one writer holds the database'
    )
    .timeout(60_000)
})

/**
 * Two processes writing one database at once, each through its real path. On SQLite this
 * is the demo's web + worker on one file: a transaction that read before writing (the execute
 * store, the ledger) used to fail at once with "database is locked" whenever the other process
 * held the write lock, since SQLite refuses that upgrade without waiting out the busy timeout.
 */
test.group(`Worker | web and worker writing one database at once (${TEST_DB})`, () => {
  test('executes and deliveries in the web process, batches in the worker: none fails', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup, { rateLimits: false, apiKey: TEST_API_KEY })
    const { options, env, eventsFile } = await setup(cleanup, 25)
    options.baseUrl = emu.baseUrl
    const web = spawnChild(cleanup, 'web_app.ts', options, env)
    const worker = spawnChild(cleanup, 'worker_app.ts', options, env)
    const { url } = await web.nextMessage('ready')

    // The web process executes one payout after another while four senders deliver webhooks
    // to its route and the worker applies them in batches of 25, all on the same file.
    const executed = web.nextMessage('executed')
    web.process.send({ type: 'execute', bodies: Array.from({ length: 40 }, () => fiatBody(emu)) })
    const payoutIds = (
      await Promise.all(Array.from({ length: 4 }, () => postDeliveries(url, 60)))
    ).flat()
    const { count, errors } = await executed
    assert.deepEqual({ count, errors }, { count: 40, errors: [] }, 'every execute stored')

    await allProcessed(240)
    await assertAppliedOnce(assert, payoutIds, eventsFile)
    assert.equal((await Payout.query().count('* as total').first())!.$extras.total, 280)

    worker.process.kill('SIGTERM')
    web.process.kill('SIGTERM')
    assert.deepEqual(await Promise.all([worker.exited, web.exited]), [0, 0])
  }).timeout(90_000)
})
