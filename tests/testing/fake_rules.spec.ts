import { test } from '@japa/runner'
import { request } from 'undici'
import type { PayoutsConfigInput } from '../../src/define_config.ts'
import { PayoutsEmulator } from '../../src/emulator/main.ts'
import type { PayoutsFake } from '../../src/testing/main.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'

/** URLs the service refuses: http, loopback, private, link-local and metadata targets. */
const REFUSED = [
  'http://localhost/x',
  'http://127.0.0.1:3333/webhooks/payouts',
  'https://localhost/x',
  'https://10.0.0.5/x',
  'https://192.168.1.20/webhooks/payouts',
  'https://[fd00::1]/x',
  'https://169.254.169.254/x',
  'http://app.example.com/webhooks/payouts',
]

/** What a caller can tell of a refusal: the error's class, code, status, field and text. */
async function refusal(call: () => Promise<unknown>) {
  try {
    await call()
  } catch (error: any) {
    return {
      class: error.constructor.name,
      code: error.code,
      status: error.status,
      field: error.field ?? error.details?.field,
      message: error.message,
    }
  }
  return null
}

/**
 * One app, first on a strict emulator over TCP (the service's rules, names not resolved),
 * then faked: the same calls are compared on both.
 */
async function appOnStrictEmulator(
  cleanup: (fn: () => Promise<void>) => void,
  config: Partial<PayoutsConfigInput> = {}
) {
  const emu = await PayoutsEmulator.start({
    port: 0,
    clock: { mode: 'manual' },
    rateLimits: false,
    lookup: async () => [],
  })
  cleanup(() => emu.close())
  const app = await startHttpApp(cleanup, {
    apiKey: emu.apiKey,
    baseUrl: emu.baseUrl,
    clientRateLimiter: false,
    ...config,
  })
  return { emu, app }
}

async function refusalsOf(payouts: { webhooks: { create: (i: { url: string }) => unknown } }) {
  const refusals: Record<string, Awaited<ReturnType<typeof refusal>>> = {}
  for (const url of REFUSED) {
    refusals[url] = await refusal(async () => payouts.webhooks.create({ url }))
  }
  return refusals
}

/** The app's subscriptions at the fake: every one but the fake's own. */
function appSubscriptions(fake: PayoutsFake) {
  return [...fake.emulator.webhooks.subscriptions.values()].filter(
    (s) => s.label !== 'payouts.fake()'
  )
}

test.group(`payouts.fake() keeps the service's rules (${TEST_DB})`, () => {
  test('a local or private webhook URL is refused as over TCP, with the same error', async ({
    assert,
    cleanup,
  }) => {
    const { emu, app } = await appOnStrictEmulator(cleanup)
    const overTcp = await refusalsOf(app.payouts)
    assert.lengthOf(emu.webhooks.subscriptions, 0, 'the service took none')

    const fake = await app.payouts.fake()
    cleanup(() => app.payouts.restore())
    const faked = await refusalsOf(app.payouts)
    for (const url of REFUSED) {
      assert.isNotNull(faked[url], `${url} is accepted under the fake`)
      assert.deepEqual(faked[url], overTcp[url], url)
    }
    assert.lengthOf(appSubscriptions(fake), 0, 'the fake took none')
    // An update to a local URL is refused too.
    const { id } = await app.payouts.webhooks.create({ url: 'https://app.example.com/hooks' })
    const update = await refusal(() =>
      app.payouts.client.webhooks.subscriptions.update(id, { url: 'http://localhost/x' })
    )
    assert.include(update, { class: 'PayoutsValidationError', field: 'url' })
  })

  test('the service itself refuses them: a client that lets loopback through gets the API error', async ({
    assert,
    cleanup,
  }) => {
    const { app } = await appOnStrictEmulator(cleanup, { allowInsecureLoopbackWebhooks: true })
    const url = 'http://localhost:3333/webhooks/payouts'
    const overTcp = await refusal(() => app.payouts.webhooks.create({ url }))
    assert.include(overTcp, { class: 'InvalidParameterError', status: 400, field: 'url' })

    const fake = await app.payouts.fake()
    cleanup(() => app.payouts.restore())
    assert.deepEqual(await refusal(() => app.payouts.webhooks.create({ url })), overTcp)
    // And over the fake's wire, without any client: the emulator's own rule.
    const raw = await request(`${fake.emulator.baseUrl}/webhooks/subscriptions`, {
      method: 'POST',
      headers: {
        'authorization': `Bearer ${fake.emulator.apiKey}`,
        'content-type': 'application/json',
      },
      body: JSON.stringify({ url: 'http://127.0.0.1/x', events: ['payout.created'] }),
      dispatcher: fake.emulator.dispatcher,
    })
    assert.equal(raw.statusCode, 400)
    assert.equal(((await raw.body.json()) as any).details.field, 'url')
    assert.lengthOf(appSubscriptions(fake), 0)
  })

  test('an https URL is accepted, and its deliveries come into the app, applied once', async ({
    assert,
    cleanup,
  }) => {
    const { app } = await appOnStrictEmulator(cleanup)
    const fake = await app.payouts.fake()
    cleanup(() => app.payouts.restore())
    const created = await app.payouts.webhooks.create({
      url: 'https://app.example.com/webhooks/payouts',
    })
    assert.equal(created.url, 'https://app.example.com/webhooks/payouts')

    const { payout } = await app.payouts.execute({
      fromCurrency: 'USD',
      toCurrency: 'MXN',
      amount: 100,
      recipientId: fake.seedRecipient().id,
      userPaymentMethodId: fake.paymentMethodId,
    })
    await fake.complete(payout)

    const mine = fake.emulator.admin.deliveries().filter((d) => d.subscriptionId === created.id)
    assert.sameMembers(
      mine.map((d) => `${d.eventType} ${d.status} ${d.lastStatusCode}`),
      ['payout.created succeeded 200', 'payout.status.updated succeeded 200']
    )
    await payout.refresh()
    assert.equal(payout.status, 'completed')
    // Two subscriptions, each event twice into the route: the ledger applies it once.
    assert.lengthOf(
      app.events.filter((e) => e.name === 'payouts:completed'),
      1
    )
  })

  test('a subscribed URL the app does not serve: settle() names the path', async ({
    assert,
    cleanup,
  }) => {
    const { app } = await appOnStrictEmulator(cleanup)
    const fake = await app.payouts.fake()
    cleanup(() => app.payouts.restore())
    await app.payouts.webhooks.create({ url: 'https://hooks.example.com/elsewhere' })
    await app.payouts.execute({
      fromCurrency: 'USD',
      toCurrency: 'MXN',
      amount: 100,
      recipientId: fake.seedRecipient().id,
      userPaymentMethodId: fake.paymentMethodId,
    })
    await assert.rejects(
      () => fake.settle(),
      /got 404 from POST \/elsewhere \(a subscription to https:\/\/hooks\.example\.com\/elsewhere/
    )
  })
})
