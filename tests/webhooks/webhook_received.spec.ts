import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import type { EventsList } from '@adonisjs/core/types'
import { request } from 'undici'
import { WebhookDelivery } from '../../src/models/main.ts'
import { partsOf } from '../../src/service/payouts_service.ts'
import { signPayload } from '../../src/signature/main.ts'
import { streamToInbox } from '../../src/stream/stream_to_inbox.ts'
import type {
  PayoutsWebhookTypes,
  WebhookReceivedEvent,
  WithEventKey,
} from '../../src/types/events.ts'
import '../../src/types/extended.ts'
import { waitFor } from '../chaos/helpers.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startHttpApp, type HttpApp } from '../helpers/http_app.ts'

const SECRET = 'whsec_current_secret'

function envelope(type: string, data: Record<string, unknown>) {
  return { type, createdAt: '2026-03-01T10:00:00.000Z', data }
}

/** POSTs `body` to the app's route, signed with `secret` under `deliveryId`. */
async function deliver(
  app: HttpApp,
  body: unknown,
  options: { id?: string; secret?: string; type?: string } = {}
) {
  const raw = typeof body === 'string' ? body : JSON.stringify(body)
  const t = Math.floor(Date.now() / 1000)
  const response = await request(`${app.url}/webhooks/payouts`, {
    method: 'POST',
    body: raw,
    headers: {
      'content-type': 'application/json',
      'svc-signature': signPayload(options.secret ?? SECRET, t, raw),
      'svc-delivery-id': options.id ?? `dlv_${randomUUID()}`,
      'svc-event-type': options.type ?? 'payout.created',
    },
  })
  return { status: response.statusCode, body: await response.body.text() }
}

/** The app's `payouts:webhook_received` events so far. */
const received = (app: HttpApp) =>
  app.events.filter((e) => e.name === 'payouts:webhook_received').map((e) => e.data)

/** The app logger's error lines from now on (the notifier logs through it). */
async function loggedErrors(app: HttpApp) {
  const logger = await app.app.container.make('logger')
  const lines: Array<Record<string, any>> = []
  const error = logger.error.bind(logger)
  logger.error = ((fields: Record<string, any>, msg?: string) => {
    lines.push({ ...fields, msg })
    return error(fields, msg)
  }) as typeof logger.error
  return lines
}

/** Every delivery the route stored has been told (its listeners done or given up). */
async function told(app: HttpApp) {
  const { receiver } = await partsOf(app.payouts)
  await receiver.told()
}

test.group('Webhooks | payouts:webhook_received, its types', () => {
  test('declared in EventsList with its key and account; onWebhook types data by PayoutsWebhookTypes', ({
    expectTypeOf,
  }) => {
    expectTypeOf<EventsList['payouts:webhook_received']>().toEqualTypeOf<
      WithEventKey<WebhookReceivedEvent>
    >()
    type Received = EventsList['payouts:webhook_received']
    expectTypeOf<Received['deliveryId']>().toEqualTypeOf<string>()
    expectTypeOf<Received['type']>().toEqualTypeOf<string>()
    expectTypeOf<Received['source']>().toEqualTypeOf<'webhook' | 'websocket'>()
    expectTypeOf<Received['createdAt']>().toEqualTypeOf<string | null>()
    expectTypeOf<Received['data']>().toEqualTypeOf<Record<string, unknown>>()
    expectTypeOf<Received['account']>().toEqualTypeOf<string>()
    expectTypeOf<Received['eventKey']>().toEqualTypeOf<string>()
    expectTypeOf<Received>().not.toHaveProperty('signature')
    expectTypeOf<Received>().not.toHaveProperty('headers')

    // A type the plugin declares: its data as the service sends it (payoutId required).
    expectTypeOf<WebhookReceivedEvent<'payout.created'>['data']>().toEqualTypeOf<
      PayoutsWebhookTypes['payout.created']
    >()
    expectTypeOf<
      WebhookReceivedEvent<'payout.created'>['data']['payoutId']
    >().toEqualTypeOf<string>()
    expectTypeOf<
      WebhookReceivedEvent<'payout.status.updated'>['data']['status']
    >().toEqualTypeOf<string>()
    // Any other: a JSON object, its type kept as a literal.
    expectTypeOf<WebhookReceivedEvent<'payout.delivered'>['data']>().toEqualTypeOf<
      Record<string, unknown>
    >()
    expectTypeOf<
      WebhookReceivedEvent<'payout.delivered'>['type']
    >().toEqualTypeOf<'payout.delivered'>()

    // Never called: what an app writes, checked by the compiler.
    const listen = (payouts: HttpApp['payouts']) => {
      const stop = payouts.onWebhook('payout.created', (event) => {
        expectTypeOf(event.type).toEqualTypeOf<'payout.created'>()
        expectTypeOf(event.data.payoutId).toEqualTypeOf<string>()
        expectTypeOf(event.eventKey).toEqualTypeOf<string>()
      })
      payouts.onWebhook('payout.delivered', (event) => {
        expectTypeOf(event.type).toEqualTypeOf<'payout.delivered'>()
        expectTypeOf(event.data).toEqualTypeOf<Record<string, unknown>>()
      })
      expectTypeOf(stop).toEqualTypeOf<() => void>()
    }
    void listen
  })
})

test.group(`Webhooks | payouts:webhook_received (${TEST_DB})`, () => {
  test('a verified delivery fires it once, after its row is committed, with the delivery and nothing of its signature', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const emitter = await app.app.container.make('emitter')
    const rowsSeen: Array<string | undefined> = []
    emitter.on('payouts:webhook_received', async (event) => {
      const row = await WebhookDelivery.findBy('deliveryId', event.deliveryId)
      rowsSeen.push(row?.state)
    })
    const deliveryId = `dlv_${randomUUID()}`
    const data = { payoutId: randomUUID(), status: 'pending', payoutAmount: 12.5, extra: { a: 1 } }
    const res = await deliver(app, envelope('payout.created', data), { id: deliveryId })
    assert.equal(res.status, 200)
    await told(app)

    assert.deepEqual(received(app), [
      {
        deliveryId,
        type: 'payout.created',
        source: 'webhook',
        createdAt: '2026-03-01T10:00:00.000Z',
        data,
        account: 'main',
        eventKey: `${deliveryId}:payouts:webhook_received`,
      },
    ])
    assert.lengthOf(rowsSeen, 1)
    assert.isDefined(rowsSeen[0], 'the row was committed when the listener ran')
  })

  test('a redelivery of a stored delivery id answers 200 and fires nothing again', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const id = `dlv_${randomUUID()}`
    const body = envelope('payout.created', { payoutId: randomUUID() })
    assert.equal((await deliver(app, body, { id })).status, 200)
    await told(app)
    const again = await deliver(app, body, { id })
    assert.equal(again.status, 200)
    assert.include(again.body, 'duplicate')
    await app.payouts.drainInbox()
    await told(app)
    assert.deepEqual(
      received(app).map((e) => e.deliveryId),
      [id]
    )
  })

  test('deliveries arriving together (group commit; the same id twice among them) fire once per stored row', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const ids = Array.from({ length: 6 }, () => `dlv_${randomUUID()}`)
    const twice = ids[0]
    const answers = await Promise.all(
      [...ids, twice].map((id) =>
        deliver(app, envelope('payout.delivered', { payoutId: randomUUID() }), { id })
      )
    )
    assert.deepEqual(
      answers.map((a) => a.status),
      Array(7).fill(200)
    )
    await told(app)
    assert.sameMembers(
      received(app).map((e) => e.deliveryId),
      ids
    )
  })

  test('a refused signature is not stored and fires nothing; neither does a body that is no event', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const forged = await deliver(app, envelope('payout.delivered', { payoutId: 'x' }), {
      secret: 'whsec_someone_else',
    })
    assert.equal(forged.status, 400)
    // Authentic but unusable: stored (and dead-lettered by the processor), never told as a type.
    const notJson = await deliver(app, 'not json', { id: 'dlv_not_json' })
    const noPayoutId = await deliver(app, envelope('payout.created', { status: 'pending' }), {
      id: 'dlv_no_payout_id',
    })
    assert.deepEqual([notJson.status, noPayoutId.status], [200, 200])
    await told(app)
    await app.payouts.drainInbox()
    assert.lengthOf(await WebhookDelivery.all(), 2)
    assert.deepEqual(received(app), [])
  })

  test('a type the plugin does not map fires it (and nothing else); onWebhook hears only its type, until stopped', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const delivered: Array<{ payoutId: unknown; type: string }> = []
    const stop = app.payouts.onWebhook('payout.delivered', (event) => {
      delivered.push({ payoutId: event.data.payoutId, type: event.type })
    })
    const payoutId = randomUUID()
    await deliver(app, envelope('payout.delivered', { payoutId }), { type: 'payout.delivered' })
    await deliver(app, envelope('payout.created', { payoutId }))
    await told(app)
    await app.payouts.drainInbox()

    assert.deepEqual(
      received(app).map((e) => e.type),
      ['payout.delivered', 'payout.created']
    )
    assert.deepEqual(delivered, [{ payoutId, type: 'payout.delivered' }])
    const unmapped = await WebhookDelivery.findByOrFail('eventType', 'payout.delivered')
    assert.equal(unmapped.state, 'processed', 'stored and kept, not applied')
    assert.deepEqual(
      app.events
        .filter((e) => e.name.startsWith('payouts:'))
        .map((e) => e.name)
        .sort(),
      ['payouts:created', 'payouts:webhook_received', 'payouts:webhook_received'],
      'the unmapped type changed no payout'
    )

    stop()
    await deliver(app, envelope('payout.delivered', { payoutId }), { type: 'payout.delivered' })
    await told(app)
    assert.lengthOf(delivered, 1, 'stopped')
    assert.lengthOf(received(app), 3)
  })

  test("a listener that throws changes no answer: 200, the other listeners run, its failure logged with the event's key", async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const failures = await loggedErrors(app)
    const emitter = await app.app.container.make('emitter')
    const heard: string[] = []
    emitter.on('payouts:webhook_received', () => {
      throw new Error('listener bug')
    })
    emitter.on('payouts:webhook_received', (event) => void heard.push(event.deliveryId))

    const id = `dlv_${randomUUID()}`
    assert.equal((await deliver(app, envelope('payout.x', {}), { id })).status, 200)
    await told(app)
    assert.deepEqual(heard, [id])
    assert.deepEqual(
      failures.map(({ msg, event, eventKey, timedOut, err }) => ({
        msg,
        event,
        eventKey,
        timedOut,
        message: err?.message,
      })),
      [
        {
          msg: 'payouts listener failed',
          event: 'payouts:webhook_received',
          eventKey: `${id}:payouts:webhook_received`,
          timedOut: false,
          message: 'listener bug',
        },
      ]
    )
  })

  test('a listener that never ends holds nothing: 200 each time, the other listeners run, and it is given up at listenerTimeoutMs', async ({
    assert,
    cleanup,
  }) => {
    // A bound above the route's: an answer that waited for the listener would be a 503.
    const app = await startHttpApp(cleanup, {
      events: { listenerTimeoutMs: 1500 },
      webhook: { ackTimeoutMs: 1000 },
    })
    const failures = await loggedErrors(app)
    const emitter = await app.app.container.make('emitter')
    const heard: string[] = []
    emitter.on('payouts:webhook_received', () => new Promise<void>(() => {}))
    emitter.on('payouts:webhook_received', (event) => void heard.push(event.deliveryId))

    const first = `dlv_${randomUUID()}`
    const second = `dlv_${randomUUID()}`
    const answers = [
      await deliver(app, envelope('payout.x', {}), { id: first }),
      await deliver(app, envelope('payout.x', {}), { id: second }),
    ]
    assert.deepEqual(
      answers.map((answer) => answer.status),
      [200, 200]
    )
    await told(app)
    assert.deepEqual(heard, [first, second])
    assert.deepEqual(
      failures.filter((line) => line.event === 'payouts:webhook_received').map((l) => l.timedOut),
      [true, true],
      'each given up at the bound'
    )
  })

  test('worker mode: the web process that stored the delivery fires it, before any worker applies it', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup, { webhook: { processing: 'worker' } })
    const id = `dlv_${randomUUID()}`
    assert.equal(
      (await deliver(app, envelope('payout.created', { payoutId: randomUUID() }), { id })).status,
      200
    )
    await told(app)
    assert.deepEqual(
      received(app).map((e) => e.deliveryId),
      [id]
    )
    const row = await WebhookDelivery.findByOrFail('deliveryId', id)
    assert.equal(row.state, 'pending', 'not applied here')
  })

  test('a stream message stored in the inbox fires it with source websocket; the same message again fires nothing', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const { inbox, processor, deliveries } = await partsOf(app.payouts)
    const onMessage = streamToInbox(inbox, processor, deliveries)
    const raw = Buffer.from(JSON.stringify(envelope('payout.delivered', { payoutId: 'p1' })))
    await onMessage(raw)
    await onMessage(raw)
    const event = await waitFor('the stream message told', () => received(app)[0], {
      timeoutMs: 5000,
      everyMs: 20,
    })
    await app.payouts.drainInbox()
    assert.deepInclude(event, {
      type: 'payout.delivered',
      source: 'websocket',
      data: { payoutId: 'p1' },
      account: 'main',
    })
    assert.match(event.deliveryId, /^ws_[0-9a-f]{64}$/)
    assert.lengthOf(received(app), 1)
  })
})
