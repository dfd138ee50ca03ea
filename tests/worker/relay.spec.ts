import { randomUUID } from 'node:crypto'
import { rm } from 'node:fs/promises'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { test } from '@japa/runner'
import type { Database } from '@adonisjs/lucid/database'
import { PayoutEvent } from '../../src/models/main.ts'
import { BroadcastRelay } from '../../src/service/broadcast_relay.ts'
import { openDatabase, readLog, sleep, waitFor } from '../chaos/helpers.ts'
import { BASE_URL } from '../helpers/app.ts'
import { connectionConfig, sqlitePath, TEST_DB } from '../helpers/database.ts'
import { serveHostApp } from '../helpers/host_app.ts'
import { listen, payoutsConfig, postEvent, spawnChild, type ChildOptions } from './helpers.ts'
import { partsOf } from '../../src/service/payouts_service.ts'

/**
 * The browser hears every change in every deployment shape: web processes with Transmit and
 * a `payouts:work` beside them, on one database, real Transmit subscribers on the web
 * processes. Without a transport each web process relays what the worker applied (one
 * broadcast per change per subscriber); with Transmit's Redis transport the worker's own
 * broadcast travels and the relay stays off.
 */

type Cleanup = (fn: () => Promise<void>) => void

async function setup(cleanup: Cleanup, extra: Partial<ChildOptions> = {}) {
  const stamp = `${process.pid}-${Date.now()}`
  const sqliteFile = sqlitePath(`svc-payouts-relay-${stamp}.sqlite`)
  const eventsFile = join(tmpdir(), `svc-payouts-relay-events-${stamp}.jsonl`)
  cleanup(async () => {
    await Promise.all([sqliteFile, eventsFile].map((file) => rm(file, { force: true })))
  })
  const { db, prefix } = await openDatabase(cleanup, sqliteFile, () => false)
  const env: Record<string, string> = TEST_DB !== 'sqlite' ? {} : { SVC_TEST_SQLITE: sqliteFile }
  const options: ChildOptions = {
    prefix,
    batchSize: 50,
    eventsFile,
    transmit: 'memory',
    redisChannel: `svc-payouts-relay-${stamp}`,
    ...extra,
  }
  const startWeb = async () => {
    const web = spawnChild(cleanup, 'web_app.ts', options, env)
    const { url } = await web.nextMessage('ready')
    return { web, url: url as string }
  }
  const startWorker = () => spawnChild(cleanup, 'worker_app.ts', options, env)
  return { db, options, startWeb, startWorker }
}

/** The status updates the suite posts for a payout after its `payout.created`. */
const UPDATES = [
  { status: 'processing', step: 'compliance_cleared' },
  { status: 'processing', step: 'instructions_sent' },
  { status: 'completed', step: 'delivered' },
]

/** Posts status updates of a payout, `gapMs` apart. */
async function postUpdates(url: string, payoutId: string, updates: typeof UPDATES, gapMs = 300) {
  for (const update of updates) {
    await sleep(gapMs)
    await postEvent(url, 'payout.status.updated', {
      payoutId,
      ...update,
      stepChangedAt: new Date().toISOString(),
    })
  }
}

/** The applied changes of a payout in the ledger, in order, once `count` are there. */
function appliedChanges(payoutId: string, count: number) {
  return waitFor(
    `${count} changes of ${payoutId} applied`,
    async () => {
      const rows = await PayoutEvent.query()
        .where('payout_uuid', payoutId)
        .where('applied', true)
        .orderBy('id', 'asc')
      return rows.length >= count && rows.map((row) => String(row.id))
    },
    { timeoutMs: 30_000 }
  )
}

/** Waits for `count` messages of `payoutId` (30 s at most), then a while for any extra one. */
async function messagesOf(
  received: Array<{ at: number; message: any }>,
  payoutId: string,
  count: number,
  timeoutMs = 30_000
) {
  const of = () => received.filter(({ message }) => message.payoutId === payoutId)
  await waitFor(`${count} broadcasts of ${payoutId}`, () => of().length >= count, {
    timeoutMs,
    everyMs: 20,
  }).catch(() => {})
  // Long enough for a doubled broadcast (a relay tick, a Redis hop) to show up.
  await sleep(800)
  return of()
}

test.group(`Relay | web + worker, no Redis (${TEST_DB})`, () => {
  test('a subscriber on the web process hears each change once, in order', async ({
    assert,
    cleanup,
  }) => {
    const { options, startWeb, startWorker } = await setup(cleanup)
    const { url } = await startWeb()
    startWorker()
    const channel = (id: string) => `payouts/${id}`
    const payoutId = randomUUID()
    const { received } = await listen(cleanup, url, channel(payoutId))
    await postEvent(url, 'payout.created', { payoutId })
    await postUpdates(url, payoutId, UPDATES, 400)

    const ids = await appliedChanges(payoutId, 4)
    const heard = await messagesOf(received, payoutId, 4)
    assert.deepEqual(
      heard.map(({ message }) => message.eventId),
      ids,
      'each change once, in commit order'
    )
    assert.deepEqual(
      heard.map(({ message }) => [message.status, message.step]),
      [['pending', 'initiated'], ...UPDATES.map((u) => [u.status, u.step])]
    )
    assert.deepEqual(
      heard.map(({ message }) => message.previousStatus),
      [null, 'pending', 'processing', 'processing']
    )
    // The worker fires the change's app events right after its COMMIT.
    const fired = readLog(options.eventsFile!) as unknown as Array<{ eventId: string; at: number }>
    const delays = heard.map(({ at, message }) => {
      const committed = Math.min(
        ...fired.filter((line) => line.eventId === message.eventId).map((line) => line.at)
      )
      return at - committed
    })
    // Logged, not asserted: a loaded machine delays anything.
    console.log(`relay delays after the worker's commit (ms): ${delays.join(', ')}`)
  }).timeout(90_000)

  test('two web processes and a worker: a subscriber on each hears each change once', async ({
    assert,
    cleanup,
  }) => {
    const { startWeb, startWorker } = await setup(cleanup)
    const [first, second] = await Promise.all([startWeb(), startWeb()])
    startWorker()
    const payoutId = randomUUID()
    const one = await listen(cleanup, first.url, `payouts/${payoutId}`)
    const two = await listen(cleanup, second.url, `payouts/${payoutId}`)
    // Deliveries through both web processes, as a load balancer spreads them.
    await postEvent(first.url, 'payout.created', { payoutId })
    await postUpdates(second.url, payoutId, UPDATES)

    const ids = await appliedChanges(payoutId, 4)
    for (const { received } of [one, two]) {
      const heard = await messagesOf(received, payoutId, 4)
      assert.deepEqual(
        heard.map(({ message }) => message.eventId),
        ids
      )
    }
  }).timeout(90_000)

  test('a web process restarted mid-run: later changes arrive once, none from before', async ({
    assert,
    cleanup,
  }) => {
    const { startWeb, startWorker } = await setup(cleanup)
    const [restarted, stays] = await Promise.all([startWeb(), startWeb()])
    startWorker()
    const payoutId = randomUUID()
    const before = await listen(cleanup, restarted.url, `payouts/${payoutId}`)
    await postEvent(stays.url, 'payout.created', { payoutId })
    await postUpdates(stays.url, payoutId, UPDATES.slice(0, 1))
    const first = await appliedChanges(payoutId, 2)
    assert.lengthOf(await messagesOf(before.received, payoutId, 2), 2)

    // Down while a change is applied, then back (a new process: a deploy, a crash).
    before.close()
    restarted.web.process.kill('SIGTERM')
    await restarted.web.exited
    await postUpdates(stays.url, payoutId, UPDATES.slice(1, 2), 0)
    const whileDown = await appliedChanges(payoutId, 3)
    const back = await startWeb()
    const after = await listen(cleanup, back.url, `payouts/${payoutId}`)
    await postUpdates(stays.url, payoutId, UPDATES.slice(2))

    const ids = await appliedChanges(payoutId, 4)
    const heard = await messagesOf(after.received, payoutId, 1)
    assert.deepEqual(
      heard.map(({ message }) => message.eventId),
      ids.slice(3),
      'the change after the restart, once; nothing applied before it'
    )
    assert.deepEqual(whileDown.slice(0, 2), first)
  }).timeout(90_000)
})

test.group(`Relay | owner attached after the change went out (${TEST_DB})`, () => {
  test('inline, relay on: the owner hears the payout once when the execute response comes late', async ({
    assert,
    cleanup,
  }) => {
    const { startWeb } = await setup(cleanup, { processing: 'inline', relay: true })
    const { web, url } = await startWeb()
    const owner = await listen(cleanup, url, 'payouts/owners/tenant-a', 'tenant-a')
    const apply = async (observation: Record<string, unknown>) => {
      web.process.send({ type: 'apply', observation })
      return web.nextMessage('applied')
    }
    const late = randomUUID()
    const payout = await listen(cleanup, url, `payouts/${late}`)
    // The webhook first, relayed without an owner; the execute response after the relay read it.
    await apply({ payoutId: late, status: 'pending', step: 'initiated', source: 'webhook' })
    await messagesOf(payout.received, late, 1)
    const executed = { payoutId: late, status: 'pending', step: 'initiated', source: 'execute' }
    const attached = await apply({ ...executed, fields: { ownerId: 'tenant-a' } })
    assert.isTrue(attached.ownerAttached, JSON.stringify(attached))
    // Both before one read: the change goes out with its owner, and no announcement follows.
    const quick = randomUUID()
    await apply({ payoutId: quick, status: 'pending', step: 'initiated', source: 'webhook' })
    await apply({ ...executed, payoutId: quick, fields: { ownerId: 'tenant-a' } })
    // A later duplicate attaches nothing; a later change goes out on both channels.
    await apply({ ...executed, fields: { ownerId: 'tenant-a' } })
    await apply({
      payoutId: late,
      status: 'processing',
      step: 'compliance_cleared',
      source: 'webhook',
    })

    const lateHeard = await messagesOf(owner.received, late, 2)
    assert.deepEqual(
      lateHeard.map(({ message }) => [message.status, message.step, message.ownerId]),
      [
        ['pending', 'initiated', 'tenant-a'],
        ['processing', 'compliance_cleared', 'tenant-a'],
      ]
    )
    const quickHeard = await messagesOf(owner.received, quick, 1)
    assert.lengthOf(quickHeard, 1)
    // The process that applied the changes broadcast none of them itself.
    assert.lengthOf(await messagesOf(payout.received, late, 2), 2)
  }).timeout(60_000)
})

test.group(`Relay | Transmit's Redis transport (${TEST_DB})`, () => {
  test('with the transport, the worker broadcasts, the relay stays off: still once per subscriber', async ({
    assert,
    cleanup,
  }) => {
    const { startWeb, startWorker } = await setup(cleanup, { transmit: 'redis' })
    const [first, second] = await Promise.all([startWeb(), startWeb()])
    startWorker()
    const payoutId = randomUUID()
    const one = await listen(cleanup, first.url, `payouts/${payoutId}`)
    const two = await listen(cleanup, second.url, `payouts/${payoutId}`)
    await postEvent(first.url, 'payout.created', { payoutId })
    await postUpdates(first.url, payoutId, UPDATES)

    const ids = await appliedChanges(payoutId, 4)
    for (const { received } of [one, two]) {
      const heard = await messagesOf(received, payoutId, 4)
      assert.deepEqual(
        heard.map(({ message }) => message.eventId),
        ids
      )
    }
  }).timeout(90_000)

  test('with the transport and transmit.relay: true, each relay sends to its own subscribers: once', async ({
    assert,
    cleanup,
  }) => {
    const { startWeb, startWorker } = await setup(cleanup, { transmit: 'redis', relay: true })
    const [first, second] = await Promise.all([startWeb(), startWeb()])
    startWorker()
    const payoutId = randomUUID()
    const one = await listen(cleanup, first.url, `payouts/${payoutId}`)
    const two = await listen(cleanup, second.url, `payouts/${payoutId}`)
    await postEvent(first.url, 'payout.created', { payoutId })
    await postUpdates(second.url, payoutId, UPDATES)

    const ids = await appliedChanges(payoutId, 4)
    for (const { received } of [one, two]) {
      const heard = await messagesOf(received, payoutId, 4)
      assert.deepEqual(
        heard.map(({ message }) => message.eventId),
        ids,
        'each change once: no copy through Redis'
      )
    }
  }).timeout(90_000)
})

test.group(`Relay | from the channels' registration (${TEST_DB})`, () => {
  test('a change committed after registerChannels, before the app is ready, goes out', async ({
    assert,
    cleanup,
  }) => {
    const prefix = `t${Math.random().toString(36).slice(2, 8)}_`
    const sent: Array<{ payoutId: string }> = []
    const record = (_channel: string, payload: { payoutId: string }) => void sent.push(payload)
    const transmit = { authorize() {}, broadcast: record, broadcastExcept: record }
    const created = { status: 'pending', step: 'initiated', source: 'webhook' as const }
    const [early, later] = [randomUUID(), randomUUID()]
    const host = await serveHostApp({
      root: BASE_URL,
      connection: connectionConfig('relay-start'),
      tablePrefix: prefix,
      payouts: payoutsConfig({ prefix, batchSize: 50 }),
      setup: async ({ payouts }) => {
        const statements = BroadcastRelay.statements
        // As a start file does; the server listens before the providers' ready hooks run:
        // subscribers may be there, and the worker goes on committing.
        payouts.registerChannels(transmit, { payout: () => true })
        await waitFor('the relay reading', () => BroadcastRelay.statements > statements, {
          timeoutMs: 5000,
          everyMs: 10,
        }).catch(() => {})
        const { ledger } = await partsOf(payouts)
        await ledger.apply({ payoutId: early, ...created })
      },
    })
    cleanup(() => host.close())
    const { ledger } = await partsOf(host.payouts)
    await ledger.apply({ payoutId: later, ...created })
    await waitFor('the later change relayed', () => sent.some((e) => e.payoutId === later), {
      timeoutMs: 15_000,
      everyMs: 20,
    }).catch(() => {})
    assert.deepEqual(
      sent.map((event) => event.payoutId),
      [early, later],
      'each once, the one committed before the app was ready too'
    )
  }).timeout(60_000)
})

/** The backends LISTENing for the ledger's commits (its relays' connections). */
async function listeners(db: Database, prefix: string): Promise<number[]> {
  const { rows } = await db
    .connection()
    .rawQuery('SELECT pid FROM pg_stat_activity WHERE query = ?', [
      `LISTEN "${prefix}payout_events"`,
    ])
  return rows.map((row: { pid: number }) => row.pid)
}

/** The relay's poll in this group: far longer than any wait below, so a notice must wake it. */
const SLOW_POLL_MS = 60_000
/** How long a change may take to arrive: a notice does it within a second or so. */
const NOTICE_WAIT_MS = 15_000

/** A web process with a slow poll and a worker, once the relay LISTENs; its connection's pid. */
async function listeningShape(cleanup: Cleanup) {
  const shape = await setup(cleanup, { relayIntervalMs: SLOW_POLL_MS })
  const { url } = await shape.startWeb()
  shape.startWorker()
  const [pid] = await waitFor(
    'the relay listening',
    async () => {
      const pids = await listeners(shape.db, shape.options.prefix)
      return pids.length === 1 && pids
    },
    { timeoutMs: 30_000 }
  )
  return { ...shape, url, pid }
}

test.group(`Relay | PostgreSQL LISTEN/NOTIFY (${TEST_DB})`, () => {
  test("the worker's NOTIFY wakes the relay: its changes arrive long before its poll", async ({
    assert,
    cleanup,
  }) => {
    const { options, url } = await listeningShape(cleanup)
    const payoutId = randomUUID()
    const { received } = await listen(cleanup, url, `payouts/${payoutId}`)
    await postEvent(url, 'payout.created', { payoutId })
    await postUpdates(url, payoutId, UPDATES.slice(0, 1))

    const ids = await appliedChanges(payoutId, 2)
    const heard = await messagesOf(received, payoutId, 2, NOTICE_WAIT_MS)
    assert.deepEqual(
      heard.map(({ message }) => message.eventId),
      ids,
      'each change once, woken by the notice'
    )
    const fired = readLog(options.eventsFile!) as unknown as Array<{ eventId: string; at: number }>
    const delays = heard.map(
      ({ at, message }) => at - fired.find((line) => line.eventId === message.eventId)!.at
    )
    console.log(
      `relay delays after the worker's commit, poll ${SLOW_POLL_MS} ms (ms): ${delays.join(', ')}`
    )
  })
    .skip(TEST_DB !== 'pg', "LISTEN/NOTIFY is PostgreSQL's")
    .timeout(90_000)

  test('a LISTEN connection terminated is opened again, and the changes still arrive', async ({
    assert,
    cleanup,
  }) => {
    const { db, options, url, pid: first } = await listeningShape(cleanup)
    const payoutId = randomUUID()
    const { received } = await listen(cleanup, url, `payouts/${payoutId}`)
    await postEvent(url, 'payout.created', { payoutId })
    assert.lengthOf(await messagesOf(received, payoutId, 1, NOTICE_WAIT_MS), 1)

    await db.connection().rawQuery('SELECT pg_terminate_backend(?)', [first])
    await waitFor(
      'the relay listening again',
      async () => {
        const pids = await listeners(db, options.prefix)
        return pids.length === 1 && pids[0] !== first
      },
      { timeoutMs: NOTICE_WAIT_MS }
    )
    await postUpdates(url, payoutId, UPDATES)

    const ids = await appliedChanges(payoutId, 4)
    const heard = await messagesOf(received, payoutId, 4, NOTICE_WAIT_MS)
    assert.deepEqual(
      heard.map(({ message }) => message.eventId),
      ids,
      'each change once, the later ones through the new connection'
    )
  })
    .skip(TEST_DB !== 'pg', "LISTEN/NOTIFY is PostgreSQL's")
    .timeout(90_000)
})
