import { rm } from 'node:fs/promises'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { test } from '@japa/runner'
import { PayoutEvent, WebhookDelivery } from '../../src/models/main.ts'
import { openDatabase, readLog, waitFor } from '../chaos/helpers.ts'
import { sqlitePath, TEST_DB } from '../helpers/database.ts'
import { postDeliveries, spawnChild, type ChildOptions } from './helpers.ts'

/**
 * A change is announced by one live process: `payouts:work` processes on one database, with
 * slow or hanging listeners, killed mid-batch or right after a COMMIT. Counted per eventKey
 * across every worker, from the JSONL file each appends its app events to.
 */

interface EventLine {
  name: string
  payoutId: string
  eventKey: string
  pid: number
  at: number
}

async function setup(cleanup: (fn: () => Promise<void>) => void, count: number) {
  const stamp = `${process.pid}-${Date.now()}`
  const sqliteFile = sqlitePath(`svc-payouts-notify-${stamp}.sqlite`)
  const eventsFile = join(tmpdir(), `svc-payouts-notify-events-${stamp}.jsonl`)
  cleanup(async () => {
    await Promise.all([sqliteFile, eventsFile].map((file) => rm(file, { force: true })))
  })
  const { prefix } = await openDatabase(cleanup, sqliteFile, () => false)
  const env: Record<string, string> = TEST_DB !== 'sqlite' ? {} : { SVC_TEST_SQLITE: sqliteFile }
  const base: ChildOptions = { prefix, batchSize: 100, eventsFile }
  const web = spawnChild(cleanup, 'web_app.ts', base, env)
  const { url } = await web.nextMessage('ready')
  const payoutIds = await postDeliveries(url, count)
  web.process.kill('SIGKILL')
  const events = () => readLog(eventsFile) as unknown as EventLine[]
  return { base, env, payoutIds, events }
}

/** The eventKeys fired more than once, with how often. */
/** When a child logged `message` (pino's `time`, ms since the epoch), from its stdout. */
function startTimeOf(stdout: string, message: string): number {
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{') || !line.includes(message)) continue
    const entry = JSON.parse(line) as { msg?: string; time?: number }
    if (entry.msg === message && typeof entry.time === 'number') return entry.time
  }
  throw new Error(`the child never logged "${message}"`)
}

function repeated(events: EventLine[]) {
  const counts = new Map<string, number>()
  for (const event of events) counts.set(event.eventKey, (counts.get(event.eventKey) ?? 0) + 1)
  return [...counts].filter(([, times]) => times > 1)
}

async function processedCount() {
  const [row] = await WebhookDelivery.query().where('state', 'processed').count('* as total')
  return Number(row.$extras.total)
}

/** Every applied change notified, every delivery processed. */
function allNotified(count: number, timeoutMs: number) {
  return waitFor(
    'every delivery processed and every change notified',
    async () => {
      if ((await processedCount()) !== count) return false
      const left = await PayoutEvent.query().where('applied', true).whereNull('notified_at')
      return left.length === 0
    },
    { timeoutMs, everyMs: 250 }
  )
}

test.group(`Worker | two live workers announce each change once (${TEST_DB})`, () => {
  test('slow listeners (60 ms) over a backlog of 200: no eventKey twice', async ({
    assert,
    cleanup,
  }) => {
    const { base, env, payoutIds, events } = await setup(cleanup, 200)
    // The first to claim takes 150 changes, about 9 s of listeners: three of its 3 s leases,
    // renewed meanwhile; the other takes the 50 left, then sweeps every 100 ms while the
    // first still holds changes it has not told. Both start together: each is alive long
    // before the other is done, however slowly either boots.
    const options = { ...base, batchSize: 150, listenerDelayMs: 60, notifyLeaseMs: 3000 }
    spawnChild(cleanup, 'worker_app.ts', options, env)
    spawnChild(cleanup, 'worker_app.ts', options, env)
    await allNotified(200, 60_000)
    // A while longer, so a sweep that would fire a change again had its chance.
    await new Promise((resolve) => setTimeout(resolve, 1500))
    const fired = events()
    assert.deepEqual(repeated(fired), [], 'no eventKey twice')
    assert.sameMembers([...new Set(fired.map((e) => e.payoutId))], payoutIds)
    assert.lengthOf(new Set(fired.map((e) => e.pid)), 2, 'both workers fired changes')
  }).timeout(120_000)

  test('a listener hanging until listenerTimeoutMs, past the lease: no eventKey twice', async ({
    assert,
    cleanup,
  }) => {
    const { base, env, payoutIds, events } = await setup(cleanup, 100)
    // The first worker's first listener hangs 9 s, holding its batch of 100 behind it, three
    // times its own 3 s lease, which it keeps renewing.
    const first = spawnChild(
      cleanup,
      'worker_app.ts',
      { ...base, hangFirstListener: true, listenerTimeoutMs: 9000, notifyLeaseMs: 3000 },
      env
    )
    await waitFor('the first worker to hang', () => events().length > 0, { timeoutMs: 30_000 })
    spawnChild(cleanup, 'worker_app.ts', { ...base, notifyLeaseMs: 3000 }, env)
    await allNotified(100, 60_000)
    await new Promise((resolve) => setTimeout(resolve, 1500))
    const fired = events()
    assert.deepEqual(repeated(fired), [], 'no eventKey twice')
    assert.sameMembers([...new Set(fired.map((e) => e.payoutId))], payoutIds)
    assert.deepEqual([...new Set(fired.map((e) => e.pid))], [first.process.pid])
  }).timeout(120_000)
})

test.group(`Worker | a killed worker's work is taken over after its lease (${TEST_DB})`, () => {
  test('SIGKILL mid-batch on the row-by-row path: rows taken within the lease, none applied twice', async ({
    assert,
    cleanup,
  }) => {
    const { base, env, payoutIds } = await setup(cleanup, 20)
    const eventsOf = () => readLog(base.eventsFile!) as unknown as EventLine[]
    // A 3 s lease on the claimed rows (renewed every second while the batch runs).
    const leased = { ...base, batchSize: 20, processingLeaseMs: 3000 }
    const options = { ...leased, rowByRow: true, listenerDelayMs: 120 }
    const first = spawnChild(cleanup, 'worker_app.ts', options, env)
    await waitFor('five rows applied', () => eventsOf().length >= 5, { timeoutMs: 30_000 })
    first.process.kill('SIGKILL')
    await first.exited
    const killedAt = Date.now()
    const applied = await processedCount()
    assert.isAbove(applied, 3, 'rows are marked as they are applied')
    assert.isBelow(applied, 20, 'killed mid-batch')

    const second = spawnChild(cleanup, 'worker_app.ts', leased, env)
    await waitFor('every row processed', async () => (await processedCount()) === 20, {
      timeoutMs: 25_000,
    })
    const doneAt = Date.now()
    // Within a few seconds of the later of the lease's end and the second worker's start (its
    // boot takes seconds of its own on a loaded machine): the 15 s default would miss it.
    await waitFor(
      'the second worker logged its start',
      () => /"msg":"payouts worker started"[^\n]*\n/.test(second.stdout()),
      { timeoutMs: 15_000 }
    )
    const startedAt = startTimeOf(second.stdout(), 'payouts worker started')
    assert.isBelow(doneAt - Math.max(killedAt + 3000, startedAt), 5000)
    const logged = await PayoutEvent.query().whereNotNull('delivery_id')
    assert.equal(logged.length, 20, 'one payout_events row per delivery')
    assert.sameMembers(
      logged.map((row) => row.deliveryId),
      payoutIds.map((id) => `dlv_${id}`)
    )
  }).timeout(120_000)

  test('a notifier killed after COMMIT, before its events: another worker fires them once, after the lease', async ({
    assert,
    cleanup,
  }) => {
    const { base, env, payoutIds, events } = await setup(cleanup, 20)
    const options = { ...base, batchSize: 20, notifyLeaseMs: 3000 }
    const dying = spawnChild(cleanup, 'worker_app.ts', { ...options, killAfterCommit: true }, env)
    await dying.exited
    const killedAt = Date.now()
    assert.equal(await processedCount(), 20, 'the batch committed')
    assert.lengthOf(events(), 0, 'no event fired before the kill')

    const second = spawnChild(cleanup, 'worker_app.ts', options, env)
    await allNotified(20, 30_000)
    const fired = events()
    assert.deepEqual(repeated(fired), [])
    assert.sameMembers(
      fired.map((e) => e.payoutId),
      payoutIds
    )
    // After the dead worker's lease (3 s), not the sweep's old 10 s (MySQL keeps whole seconds),
    // counted from when both the lease had passed and the second worker had started: its boot
    // takes seconds of its own on a loaded machine.
    const first = Math.min(...fired.map((e) => e.at))
    // Its start is logged after its first sweep may already have told them: wait for the line.
    await waitFor(
      'the second worker logged its start',
      () => /"msg":"payouts worker started"[^\n]*\n/.test(second.stdout()),
      { timeoutMs: 15_000 }
    )
    const startedAt = startTimeOf(second.stdout(), 'payouts worker started')
    assert.isBelow(first - Math.max(killedAt + 3000, startedAt), 5000)
  }).timeout(90_000)
})
