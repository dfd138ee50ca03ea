import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { Logger } from '@adonisjs/core/logger'
import type { EventsList } from '@adonisjs/core/types'
import type { PayoutObservation } from '../../src/ledger/vocabulary.ts'
import { EscrowDeposit, PayoutEvent } from '../../src/models/main.ts'
import { PayoutsService, type ChannelBroadcaster } from '../../src/service/payouts_service.ts'
import { createClient } from '../../src/service/client_factory.ts'
import { leasesExpired, waitFor } from '../chaos/helpers.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'
import { partsOf } from '../../src/service/payouts_service.ts'

type ChangeEventName =
  | 'payouts:created'
  | 'payouts:status_updated'
  | 'payouts:completed'
  | 'payouts:failed'
  | 'payouts:cancelled'
const CHANGE_EVENTS: ChangeEventName[] = [
  'payouts:created',
  'payouts:status_updated',
  'payouts:completed',
  'payouts:failed',
  'payouts:cancelled',
]

/**
 * A real AdonisJS app (emitter, Lucid, Transmit) and a way to start "processes" on it:
 * PayoutsService instances on the app's database and emitter, each logging through a real
 * AdonisJS logger into `logs`.
 */
async function setup(cleanup: (fn: () => Promise<void>) => void) {
  const http = await startHttpApp(cleanup)
  const emitter = await http.app.container.make('emitter')
  const transmit = await http.app.container.make('transmit')
  const db = await http.app.container.make('lucid.db')
  const logs: any[] = []
  const logger = new Logger({
    enabled: true,
    name: 'payouts-test',
    level: 'error',
    destination: { write: (line: string) => void logs.push(JSON.parse(line)) },
  })
  const processes: PayoutsService[] = []
  cleanup(async () => {
    for (const service of processes) await service.close()
  })
  const start = () => {
    const service = new PayoutsService(http.payouts.config, {
      logger,
      createClient: () => createClient(http.payouts.config, logger),
      emitter,
      database: async () => db,
    })
    processes.push(service)
    return service
  }
  return { http, emitter, transmit, logs, start }
}

/** A listener with side effects that deduplicates exactly as the README says: on eventKey. */
function dedupingListener() {
  const seen = new Set<string>()
  const received: Array<{ name: string; eventKey: string; eventId?: string }> = []
  const handled: Array<{ name: string; eventKey: string; eventId?: string }> = []
  const on = (name: keyof EventsList) => (event: { eventKey: string; eventId?: string }) => {
    const line = { name, eventKey: event.eventKey, eventId: event.eventId }
    received.push(line)
    if (seen.has(event.eventKey)) return
    seen.add(event.eventKey)
    handled.push(line)
  }
  return { on, received, handled }
}

const pending = (payoutId: string, fields: PayoutObservation['fields'] = {}) => ({
  payoutId,
  status: 'pending',
  step: 'initiated',
  source: 'execute' as const,
  fields: { ownerId: 'tenant-a', ...fields },
})
const completed = (payoutId: string) => ({
  payoutId,
  status: 'completed',
  step: 'delivered',
  source: 'webhook' as const,
})

test.group(`App events | a dedupe key per event (${TEST_DB})`, () => {
  test('a change to completed fires status_updated and completed with their own keys: both survive a deduping listener', async ({
    assert,
    cleanup,
  }) => {
    const { emitter, start } = await setup(cleanup)
    const listener = dedupingListener()
    for (const name of CHANGE_EVENTS) emitter.on(name, listener.on(name))
    const { ledger } = await partsOf(start())
    const payoutId = randomUUID()
    await ledger.apply(pending(payoutId))
    await ledger.apply({ ...completed(payoutId), status: 'processing', step: 'collected' })
    await ledger.apply(completed(payoutId))

    const changes = await PayoutEvent.query().where('payout_uuid', payoutId).orderBy('id', 'asc')
    const [created, moved, done] = changes.map((row) => String(row.id))
    assert.deepEqual(
      listener.handled.map(({ name, eventId }) => [name, eventId]),
      [
        ['payouts:created', created],
        ['payouts:status_updated', moved],
        ['payouts:status_updated', done],
        ['payouts:completed', done],
      ],
      'every event handled once, the change id kept for correlation'
    )
    assert.deepEqual(listener.received, listener.handled, 'nothing fired twice')
    assert.deepEqual(
      listener.handled.slice(2).map(({ eventKey }) => eventKey),
      [`${done}:payouts:status_updated`, `${done}:payouts:completed`]
    )
  })

  test('a process that died between its events: a successor repeats the fired ones under the same keys (dropped) and fires the rest', async ({
    assert,
    cleanup,
  }) => {
    const { emitter, start } = await setup(cleanup)
    const listener = dedupingListener()
    for (const name of [...CHANGE_EVENTS, 'payouts:escrow_confirmed'] as const)
      emitter.on(name, listener.on(name))
    // The process "dies" inside the completed change's status_updated: that event reached
    // the deduping listener, the ones after it never fired.
    let armed = true
    emitter.on('payouts:status_updated', async (event) => {
      if (armed && event.status === 'completed') {
        armed = false
        await new Promise(() => {})
      }
    })
    const payoutId = randomUUID()
    const quoteId = randomUUID()
    const dying = await partsOf(start())
    await dying.ledger.apply(pending(payoutId, { flow: 'stablecoin_to_fiat' }))
    await EscrowDeposit.create({ quoteId, payoutUuid: payoutId, state: 'awaiting_deposit' })
    // The service detected the deposit: the payout completes, the deposit is confirmed.
    void dying.ledger.apply(completed(payoutId))
    await waitFor(
      'the completed change to reach its status_updated',
      () => listener.received.find((e) => e.name === 'payouts:status_updated'),
      { timeoutMs: 5000, everyMs: 10 }
    )
    const change = await PayoutEvent.query()
      .where('payout_uuid', payoutId)
      .where('status', 'completed')
      .firstOrFail()
    const id = String(change.id)
    assert.isNull(change.notifiedAt, 'the change is still in the outbox')
    assert.deepEqual(
      listener.handled.map(({ name }) => name),
      ['payouts:created', 'payouts:escrow_confirmed', 'payouts:status_updated']
    )

    const successor = start()
    await leasesExpired()
    assert.equal(await successor.renotify({ olderThanMs: 0 }), 1)
    const handledForChange = () =>
      listener.handled.filter((e) => e.eventId === id || e.name === 'payouts:escrow_confirmed')
    assert.deepEqual(
      handledForChange().map(({ name, eventKey }) => [name, eventKey]),
      [
        ['payouts:escrow_confirmed', `${quoteId}:payouts:escrow_confirmed`],
        ['payouts:status_updated', `${id}:payouts:status_updated`],
        ['payouts:completed', `${id}:payouts:completed`],
      ],
      'the repeats dropped, the event the crash cut off handled'
    )
    assert.deepEqual(
      listener.received.slice(3).map(({ name }) => name),
      ['payouts:escrow_confirmed', 'payouts:status_updated', 'payouts:completed'],
      'the successor repeated the events fired before the crash'
    )

    // A crash after every event but before the mark: all of them again, all dropped.
    await PayoutEvent.query().where('id', change.id).update({ notified_at: null })
    const before = listener.received.length
    assert.equal(await successor.renotify({ olderThanMs: 0 }), 1)
    assert.lengthOf(listener.received, before + 3)
    assert.lengthOf(handledForChange(), 3)
    assert.equal(new Set(listener.handled.map((e) => e.eventKey)).size, listener.handled.length)
  })
})

test.group(`App events | a failing listener silences nothing (${TEST_DB})`, () => {
  test('a status_updated listener that throws on completed: completed still fires, the broadcasts go out, the failure is logged with the event name and key', async ({
    assert,
    cleanup,
  }) => {
    const { emitter, transmit, logs, start } = await setup(cleanup)
    const service = start()
    service.registerChannels(transmit, {})
    const broadcasts: Array<{ channel: string; payload: any }> = []
    transmit.on('broadcast', (message) => void broadcasts.push(message))
    emitter.on('payouts:status_updated', (event) => {
      if (event.status === 'completed') throw new Error('listener bug')
    })
    // A second listener of the same event, registered after the throwing one.
    const statusUpdates: string[] = []
    emitter.on('payouts:status_updated', (event) => void statusUpdates.push(event.status))
    const completions: Array<EventsList['payouts:completed']> = []
    emitter.on('payouts:completed', (event) => void completions.push(event))

    const { ledger } = await partsOf(service)
    const payoutId = randomUUID()
    await ledger.apply(pending(payoutId))
    await ledger.apply(completed(payoutId))
    const change = await PayoutEvent.query()
      .where('payout_uuid', payoutId)
      .where('status', 'completed')
      .firstOrFail()
    const id = String(change.id)

    assert.deepEqual(statusUpdates, ['completed'], 'the other listener of that event heard it')
    assert.lengthOf(completions, 1)
    assert.deepInclude(completions[0], {
      eventId: id,
      eventKey: `${id}:payouts:completed`,
      status: 'completed',
    })
    assert.sameDeepMembers(
      broadcasts
        .filter(({ payload }) => payload.eventId === id)
        .map(({ channel, payload }) => [channel, payload.status]),
      [
        [`payouts/${payoutId}`, 'completed'],
        ['payouts/owners/tenant-a', 'completed'],
      ]
    )
    const failures = logs.filter((line) => line.msg === 'payouts listener failed')
    assert.lengthOf(failures, 1)
    assert.deepInclude(failures[0], {
      event: 'payouts:status_updated',
      eventKey: `${id}:payouts:status_updated`,
    })
    assert.equal(failures[0].err.message, 'listener bug')
    assert.notInclude(JSON.stringify(logs), String(service.config.apiKey))
    // What fired is done: the outbox repeats nothing.
    assert.isNotNull((await change.refresh()).notifiedAt)
    assert.equal(await service.renotify({ olderThanMs: 0 }), 0)
    assert.lengthOf(completions, 1)
  })

  test("a listener that never ends is given up at its bound: the change's later events still fire", async ({
    assert,
    cleanup,
  }) => {
    const { http, emitter, logs } = await setup(cleanup)
    const service = new PayoutsService(
      { ...http.payouts.config, events: { ...http.payouts.config.events, listenerTimeoutMs: 200 } },
      {
        logger: new Logger({
          enabled: true,
          name: 'payouts-test',
          level: 'error',
          destination: { write: (line: string) => void logs.push(JSON.parse(line)) },
        }),
        createClient: () => createClient(http.payouts.config, new Logger({ enabled: false })),
        emitter,
        database: async () => await http.app.container.make('lucid.db'),
      }
    )
    cleanup(() => service.close())
    // Awaits something that never happens (a lock, a socket with no timeout).
    emitter.on('payouts:status_updated', (event) => {
      if (event.status === 'completed') return new Promise<void>(() => {})
    })
    const completions: string[] = []
    emitter.on('payouts:completed', (event) => void completions.push(event.eventKey))

    const { ledger } = await partsOf(service)
    const payoutId = randomUUID()
    await ledger.apply(pending(payoutId))
    await ledger.apply(completed(payoutId))
    assert.lengthOf(completions, 1)
    const failure = logs.find((line) => line.msg === 'payouts listener failed')
    assert.deepInclude(failure, { event: 'payouts:status_updated', timedOut: true })
  }).timeout(10_000)

  test('a broadcast that throws on one channel does not stop the other', async ({
    assert,
    cleanup,
  }) => {
    const { logs, start } = await setup(cleanup)
    const service = start()
    const sent: string[] = []
    const broadcaster: ChannelBroadcaster = {
      authorize: () => {},
      broadcast: (channel) => {
        if (!channel.includes('/owners/')) throw new Error('subscriber stream gone')
        sent.push(channel)
      },
    }
    service.registerChannels(broadcaster, {})
    const { ledger } = await partsOf(service)
    const payoutId = randomUUID()
    await ledger.apply(pending(payoutId))
    assert.deepEqual(sent, ['payouts/owners/tenant-a'])
    assert.deepInclude(
      logs.find((line) => line.msg === 'payouts broadcast failed'),
      { channel: `payouts/${payoutId}` }
    )
  })
})
