import { tracingChannel } from 'node:diagnostics_channel'
import { test } from '@japa/runner'
import { request } from 'undici'
import { signPayload } from '../../src/signature/main.ts'
import { CHANNEL_NAMES, channels } from '../../src/tracing/channels.ts'
import { TEST_API_KEY } from '../helpers/app.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'

type Name = keyof typeof CHANNEL_NAMES

/** Every trace of every plugin channel while subscribed: its context at its end, or its error. */
function recordTraces(cleanup: (fn: () => void) => void) {
  const traces: Array<{ channel: Name; context: any; failed: boolean }> = []
  for (const name of Object.keys(CHANNEL_NAMES) as Name[]) {
    const handlers = {
      start() {},
      end() {},
      asyncStart() {},
      asyncEnd: (context: any) => void traces.push({ channel: name, context, failed: false }),
      error: (context: any) => void traces.push({ channel: name, context, failed: true }),
    }
    tracingChannel(CHANNEL_NAMES[name]).subscribe(handlers)
    cleanup(() => tracingChannel(CHANNEL_NAMES[name]).unsubscribe(handlers))
  }
  return traces
}

const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i

test.group(`Observability | tracing channels in a host app (${TEST_DB})`, () => {
  test('an execute, its webhooks, their processing and events are traced, with nothing secret', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup, { webhook: { secret: 'whsec_configured_secret' } })
    const fake = await app.payouts.fake()
    cleanup(() => app.payouts.restore())
    const traces = recordTraces(cleanup)
    const body = {
      fromCurrency: 'USD',
      toCurrency: 'MXN',
      amount: 321,
      recipientId: fake.seedRecipient().id,
      userPaymentMethodId: fake.paymentMethodId,
      reference: 'order-secret-ref-77',
    }
    const { payout } = await app.payouts.execute(body, { idempotencyKey: 'payout-order-77' })
    await fake.complete(payout)
    // A forged delivery at the same route: refused, and traced as refused.
    const forged = JSON.stringify({
      type: 'payout.created',
      createdAt: new Date().toISOString(),
      data: {},
    })
    const refused = await request(`${app.url}/webhooks/payouts`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'svc-delivery-id': 'dlv_forged_1',
        'svc-event-type': 'payout.created',
        'svc-signature': signPayload('whsec_not_ours', Math.floor(Date.now() / 1000), forged),
      },
      body: forged,
    })
    await refused.body.text()
    assert.equal(refused.statusCode, 400)

    const of = (name: Name) => traces.filter((trace) => trace.channel === name)
    const [execute] = of('execute')
    assert.deepInclude(execute.context, {
      keyOrigin: 'app',
      payoutId: payout.payoutUuid,
      flow: 'fiat_to_fiat',
      outcome: 'succeeded',
    })
    assert.isNumber(execute.context.intentId)

    const received = of('webhookReceive')
    const stored = received.filter((trace) => trace.context.outcome === 'stored')
    assert.isAbove(stored.length, 0, 'the fake delivered through the route')
    assert.isTrue(stored.every((trace) => trace.context.status === 200))
    assert.deepInclude(
      received.find((trace) => trace.context.deliveryId === 'dlv_forged_1')!.context,
      { outcome: 'rejected', reason: 'no_matching_signature', status: 400 }
    )

    const batches = of('inboxBatch')
    const processed = batches.flatMap((trace) => trace.context.deliveryIds)
    for (const trace of stored) assert.include(processed, trace.context.deliveryId)
    assert.isTrue(batches.every((trace) => trace.context.rows >= 1))

    const told = of('notify').filter((trace) => trace.context.payoutId === payout.payoutUuid)
    const names = told.flatMap((trace) => trace.context.events)
    assert.includeMembers(names, ['payouts:created', 'payouts:completed'])
    assert.isTrue(told.every((trace) => trace.context.listenerFailures === 0))
    assert.isTrue(
      told.every((trace) =>
        trace.context.eventKeys.every((key: string) => key.startsWith(`${trace.context.eventId}:`))
      )
    )

    const requests = of('clientRequest')
    // The client's own calls (the execute among them): templates, never ids.
    assert.isAbove(requests.length, 0)
    assert.include(
      requests.map((trace) => `${trace.context.method} ${trace.context.route}`),
      'POST /rfq/execute'
    )
    assert.isTrue(requests.every((trace) => !UUID.test(trace.context.route)))

    // Nothing secret in any context: the key, the secrets, a signature, the request's body.
    const everything = JSON.stringify(traces.map((trace) => trace.context))
    for (const secret of [
      TEST_API_KEY,
      fake.webhookSecret,
      'whsec_configured_secret',
      'v1=',
      'order-secret-ref-77',
      'payout-order-77',
    ]) {
      assert.notInclude(everything, secret)
    }
  })

  test('with nothing subscribed, no channel has subscribers and the same work runs', async ({
    assert,
    cleanup,
  }) => {
    for (const channel of Object.values(channels)) assert.isFalse(channel.hasSubscribers)
    const app = await startHttpApp(cleanup)
    const fake = await app.payouts.fake()
    cleanup(() => app.payouts.restore())
    const { payout } = await app.payouts.execute({
      fromCurrency: 'USD',
      toCurrency: 'MXN',
      amount: 10,
      recipientId: fake.seedRecipient().id,
      userPaymentMethodId: fake.paymentMethodId,
    })
    await fake.complete(payout)
    assert.isTrue(app.events.some((event) => event.name === 'payouts:completed'))
  })
})
