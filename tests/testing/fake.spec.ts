import { AssertionError } from 'node:assert'
import { randomUUID } from 'node:crypto'
import { inspect } from 'node:util'
import { test } from '@japa/runner'
import { request } from 'undici'
import { PayoutsApiError } from '../../src/client/errors.ts'
import Payout from '../../src/models/payout.ts'
import PayoutEvent from '../../src/models/payout_event.ts'
import WebhookDelivery from '../../src/models/webhook_delivery.ts'
import { signPayload } from '../../src/signature/main.ts'
import type { PayoutsFake } from '../../src/testing/main.ts'
import type { PayoutsConfigInput } from '../../src/define_config.ts'
import { dropPayoutsTables } from '../../src/database/schema.ts'
import { BASE_URL, TEST_API_KEY } from '../helpers/app.ts'
import { connectionConfig, createAllPayoutsTables, TEST_DB } from '../helpers/database.ts'
import { bootHostApp } from '../helpers/host_app.ts'
import { startHttpApp, type HttpApp } from '../helpers/http_app.ts'
import { partsOf } from '../../src/service/payouts_service.ts'

/** An app whose configured service is unreachable (127.0.0.1:9): only the fake answers. */
async function fakedApp(
  cleanup: (fn: () => Promise<void>) => void,
  config: Partial<PayoutsConfigInput> = {}
) {
  const broadcasts: Array<{ channel: string; payload: any }> = []
  const app = await startHttpApp(cleanup, config, async (adonis) => {
    const transmit = await adonis.container.make('transmit')
    transmit.on('broadcast', ({ channel, payload }) => void broadcasts.push({ channel, payload }))
    const payouts = await adonis.container.make('payouts.manager')
    payouts.registerChannels(transmit, { payout: () => true })
  })
  const fake = await app.payouts.fake()
  cleanup(() => app.payouts.restore())
  return { app, fake, broadcasts }
}

function fiat(fake: PayoutsFake, overrides: Record<string, unknown> = {}) {
  return {
    fromCurrency: 'USD',
    toCurrency: 'MXN',
    amount: 100,
    recipientId: fake.seedRecipient().id,
    userPaymentMethodId: fake.paymentMethodId,
    ...overrides,
  }
}

async function row(app: HttpApp, payoutUuid: string) {
  await partsOf(app.payouts)
  return Payout.query().where('payout_uuid', payoutUuid).firstOrFail()
}

test.group(`payouts.fake() (${TEST_DB})`, () => {
  test('executes against an in-process emulator: no network, the configured service is never asked', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake } = await fakedApp(cleanup)
    // The app is configured for 127.0.0.1:9, where nothing listens; the fake has no TCP port.
    assert.equal(app.payouts.config.baseUrl, 'http://127.0.0.1:9')
    assert.match(fake.emulator.baseUrl, /\.invalid$/)
    assert.strictEqual(app.payouts.client, fake.client)

    const { payout } = await app.payouts.execute(fiat(fake, { amount: 250 }), { ownerId: 'u1' })
    fake.assertExecuted({ payoutId: payout.payoutUuid, sourceAmount: 250 })
    fake.assertExecutedCount(1)
    assert.equal((await row(app, payout.payoutUuid)).ownerId, 'u1')
  })

  test('complete() delivers a signed webhook through the app route, inbox and ledger; listeners and channels run', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake, broadcasts } = await fakedApp(cleanup)
    const { payout } = await app.payouts.execute(fiat(fake), { ownerId: 'u1' })
    await fake.settle()
    app.events.length = 0
    broadcasts.length = 0

    await fake.complete(payout)

    assert.equal((await row(app, payout.payoutUuid)).status, 'completed')
    // Through the real receiver: the delivery is in the app's inbox, processed.
    const stored = await WebhookDelivery.query().where('event_type', 'payout.status.updated')
    assert.isAbove(stored.length, 0)
    assert.isTrue(stored.every((delivery) => delivery.state === 'processed'))
    const completed = app.events.filter((event) => event.name === 'payouts:completed')
    assert.lengthOf(completed, 1)
    assert.equal(completed[0].data.payoutId, payout.payoutUuid)
    assert.includeMembers(
      broadcasts.map((b) => b.channel),
      [`payouts/${payout.payoutUuid}`, 'payouts/owners/u1']
    )
    assert.equal(
      broadcasts.find((b) => b.channel === `payouts/${payout.payoutUuid}`)?.payload.status,
      'completed'
    )
  })

  test('a payouts:created listener that completes the payout through the fake: execute returns, every event heard in order', async ({
    assert,
    cleanup,
  }) => {
    let fake!: PayoutsFake
    let completing: Promise<void> | undefined
    // A lease and a listener bound of an hour: had the completion to wait for the listener
    // that asked for it, it would wait 20 minutes.
    const app = await startHttpApp(
      cleanup,
      {
        events: { notifyLeaseMs: 3_600_000, listenerTimeoutMs: 3_600_000 },
      } as Partial<PayoutsConfigInput>,
      async (adonis) => {
        const emitter = await adonis.container.make('emitter')
        emitter.on('payouts:created', async (event: any) => {
          completing ??= fake.complete(event.payoutId)
          await completing
        })
      }
    )
    fake = await app.payouts.fake()
    cleanup(() => app.payouts.restore())
    const { payout } = await app.payouts.execute(fiat(fake))
    await completing
    assert.equal((await row(app, payout.payoutUuid)).status, 'completed')
    const heard = app.events
      .filter((event) => event.data?.payoutId === payout.payoutUuid)
      .map((event) => event.name)
    assert.equal(heard[0], 'payouts:created')
    assert.equal(heard.filter((name) => name === 'payouts:completed').length, 1)
    assert.equal(heard.at(-1), 'payouts:completed')
  })

  test('an app in worker mode (the route only stores): the fake processes its inbox itself', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake } = await fakedApp(cleanup, {
      webhook: { processing: 'worker', secret: 'whsec_current_secret' },
    })
    const { payout } = await app.payouts.execute(fiat(fake))
    await fake.complete(payout)
    assert.equal((await row(app, payout.payoutUuid)).status, 'completed')
    assert.isTrue(app.events.some((e) => e.name === 'payouts:completed'))
  })

  test('fail() with a reason, cancel() of a pending payout, and a refused cancel', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake } = await fakedApp(cleanup)
    const first = await app.payouts.execute(fiat(fake))
    const second = await app.payouts.execute(fiat(fake))
    await fake.advance(2000) // the lifecycle's first step: processing, compliance_cleared

    await fake.fail(first.payout, { reason: 'recipient_bank_closed' })
    const failed = await row(app, first.payout.payoutUuid)
    assert.equal(failed.status, 'failed')
    assert.equal(failed.step, 'compliance_cleared')
    assert.isTrue(app.events.some((e) => e.name === 'payouts:failed'))
    const read = await app.payouts.client.getPayout(first.payout.payoutUuid)
    assert.equal((read.providerMetadata as any).offramp.status, 'recipient_bank_closed')

    // The service cancels only pending payouts; the fake says so instead of pretending.
    await assert.rejects(() => fake.cancel(second.payout), /only pending payouts/)
    const third = await app.payouts.execute(fiat(fake))
    await fake.cancel(third.payout.payoutUuid)
    assert.equal((await row(app, third.payout.payoutUuid)).status, 'cancelled')
    await assert.rejects(() => fake.complete(third.payout), /already cancelled/)
    await assert.rejects(() => fake.complete(randomUUID()), /has no payout/)
  })

  test('advance() runs the lifecycle on the emulated clock to completion', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake } = await fakedApp(cleanup)
    const { payout } = await app.payouts.execute(fiat(fake))
    await fake.advance(2000 * 7)
    const stored = await row(app, payout.payoutUuid)
    assert.equal(stored.status, 'completed')
    assert.equal(stored.step, 'delivered')
    const steps = await PayoutEvent.query()
      .where('payout_uuid', payout.payoutUuid)
      .where('applied', true)
      .orderBy('id')
    assert.includeMembers(
      steps.map((s) => s.step),
      [
        'compliance_cleared',
        'instructions_sent',
        'collected',
        'converting',
        'settling',
        'delivered',
      ]
    )
  })

  test('faults: a failing service fails execute with nothing executed; duplicated webhooks apply once', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake } = await fakedApp(cleanup)
    fake.faults({ errorRate: 1 })
    const error = await app.payouts.execute(fiat(fake)).catch((e) => e)
    assert.instanceOf(error, PayoutsApiError)
    assert.isAtLeast(error.status, 500)
    fake.assertNotExecuted()

    fake.faults({ webhookDuplicateRate: 1 })
    const { payout } = await app.payouts.execute(fiat(fake))
    await fake.complete(payout)
    const stats = fake.emulator.admin.faultStats()
    assert.isAbove(stats.webhooks.duplicated, 0)
    const completions = app.events.filter(
      (e) => e.name === 'payouts:completed' && e.data.payoutId === payout.payoutUuid
    )
    assert.lengthOf(completions, 1)
  })

  test('an idempotency key of the app: a repeated execute sends no second payout', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake } = await fakedApp(cleanup)
    const body = fiat(fake)
    const first = await app.payouts.execute(body, { idempotencyKey: 'order-42', ownerId: 'u1' })
    const again = await app.payouts.execute(body, { idempotencyKey: 'order-42', ownerId: 'u1' })
    assert.equal(again.payout.payoutUuid, first.payout.payoutUuid)
    assert.deepEqual(again.result, first.result)
    // Two at once with a fresh key: still one payout.
    const both = await Promise.all([
      app.payouts.execute(body, { idempotencyKey: 'order-43', ownerId: 'u1' }),
      app.payouts.execute(body, { idempotencyKey: 'order-43', ownerId: 'u1' }),
    ])
    assert.equal(both[0].payout.payoutUuid, both[1].payout.payoutUuid)
    fake.assertExecutedCount(2)

    await assert.rejects(
      () =>
        app.payouts.execute({ ...body, amount: 7 }, { idempotencyKey: 'order-42', ownerId: 'u1' }),
      /already used for a different payout/
    )
    await assert.rejects(
      () => app.payouts.execute(body, { idempotencyKey: 'order-42', ownerId: 'u2' }),
      /already used for a different payout/
    )
    await assert.rejects(
      () => app.payouts.execute(body, { idempotencyKey: 'no' }),
      /idempotencyKey/
    )
    fake.assertExecutedCount(2)
  })

  test('assertions name what they expected and what happened', async ({ assert, cleanup }) => {
    const { app, fake } = await fakedApp(cleanup)
    const caught = (fn: () => void) => {
      try {
        fn()
      } catch (error) {
        return error as AssertionError
      }
      assert.fail('the assertion did not fail')
    }
    let error = caught(() => fake.assertExecuted())
    assert.instanceOf(error, AssertionError)
    assert.match(error!.message, /Expected a payout to be executed; none was/)

    const { payout } = await app.payouts.execute(fiat(fake, { amount: 100 }))
    error = caught(() => fake.assertExecuted({ sourceAmount: 999 }))
    assert.match(error!.message, /sourceAmount: 999/)
    assert.include(error!.message, payout.payoutUuid)
    error = caught(() => fake.assertExecutedCount(2))
    assert.match(error!.message, /Expected 2 executed payout\(s\); found 1/)
    error = caught(() => fake.assertNotExecuted({ sourceAmount: 100 }))
    assert.include(error!.message, payout.payoutUuid)
    error = caught(() => fake.assertRecipientCreated({ name: 'Ana' }))
    assert.match(error!.message, /recipient matching .*Ana.* the 0 created/)
    error = caught(() => fake.assertEscrowConfirmed())
    assert.match(error!.message, /Expected an escrow deposit to be confirmed/)

    fake.assertExecuted((p) => p.payoutId === payout.payoutUuid)
    fake.assertNotExecuted({ sourceAmount: 5 })
  })

  test('recipients and escrow: assertRecipientCreated and assertEscrowConfirmed pass on what the app did', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake } = await fakedApp(cleanup)
    const recipient = await app.payouts.recipients.create({ name: 'Ana', currency: 'MXN' })
    fake.assertRecipientCreated({ name: 'Ana' })
    fake.assertRecipientCreated((r) => r.id === recipient.remoteId)

    const { result, payout } = await app.payouts.execute({
      fromCurrency: 'USDC',
      toCurrency: 'MXN',
      amount: 100,
      recipientId: recipient.remoteId,
      walletAddress: '0x' + '3'.repeat(40),
    })
    assert.equal(result.flow, 'stablecoin_to_fiat')
    const quoteId = result.quoteId
    assert.throws(() => fake.assertEscrowConfirmed(quoteId), /awaiting_escrow_deposit/)
    // The wallet pays the escrow; the service detects it after its detection delay.
    fake.deposit(quoteId)
    await fake.advance(30_000 + 2000) // detection, then the first lifecycle step
    fake.assertEscrowConfirmed(quoteId)
    assert.notEqual((await row(app, payout.payoutUuid)).status, 'pending')
    assert.isTrue(app.events.some((e) => e.name === 'payouts:escrow_confirmed'))
  })

  test('settle() names a delivery the app refused: no webhook route', async ({
    assert,
    cleanup,
  }) => {
    // A host app that forgot `payouts.registerRoutes(router)`.
    const prefix = `n${Math.random().toString(36).slice(2, 8)}_`
    const app = await bootHostApp({
      root: BASE_URL,
      connection: connectionConfig('noroute'),
      payouts: {
        apiKey: TEST_API_KEY,
        baseUrl: 'http://127.0.0.1:9',
        webhook: { secret: 'whsec_current_secret' },
        jobs: { enabled: false },
        ledger: { tablePrefix: prefix },
      },
    })
    const db = await app.container.make('lucid.db')
    await createAllPayoutsTables(db.connection().schema, prefix)
    const payouts = await app.container.make('payouts.manager')
    cleanup(async () => {
      await payouts.close()
      await dropPayoutsTables(db.connection().schema, prefix)
      await app.terminate()
    })
    const fake = await payouts.fake()
    await payouts.execute(fiat(fake))
    await assert.rejects(
      () => fake.settle(),
      /refused 1 webhook delivery\(ies\): payout.created .* got 404 from POST \/webhooks\/payouts \(the route is missing: is `#start\/payouts` in the preloads/
    )
  })

  test('restore() puts the real client back and the route refuses the fake secret again', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake } = await fakedApp(cleanup)
    const secret = fake.webhookSecret
    const raw = JSON.stringify({
      type: 'payout.created',
      createdAt: new Date().toISOString(),
      data: { payoutId: randomUUID(), status: 'pending' },
    })
    const post = (deliveryId: string, signingSecret = secret) =>
      request(`${app.url}${app.payouts.config.webhook.path}`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'svc-delivery-id': deliveryId,
          'svc-event-type': 'payout.created',
          'svc-signature': signPayload(signingSecret, Math.floor(Date.now() / 1000), raw),
        },
        body: raw,
      })
    assert.equal((await post(`dlv_${randomUUID()}`)).statusCode, 200)
    await app.payouts.restore()
    assert.notStrictEqual(app.payouts.client, fake.client)
    assert.equal(app.payouts.client.baseUrl, 'http://127.0.0.1:9')
    // Refused (the receiver answers 400 to any bad signature); the configured secret still works.
    assert.equal((await post(`dlv_${randomUUID()}`)).statusCode, 400)
    assert.equal((await post(`dlv_${randomUUID()}`, 'whsec_current_secret')).statusCode, 200)
    await app.payouts.restore() // a second restore is a no-op
  })

  test('a restored or replaced fake answers nothing, so its assertions cannot pass by mistake', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake: first } = await fakedApp(cleanup)
    const second = await app.payouts.fake()
    await app.payouts.execute(fiat(second))
    second.assertExecutedCount(1)
    assert.throws(() => first.assertNotExecuted(), /this fake was restored/)
    assert.throws(() => first.executed(), /this fake was restored/)
    assert.throws(() => first.seedRecipient(), /this fake was restored/)
    await assert.rejects(() => first.complete(randomUUID()), /this fake was restored/)
    await app.payouts.restore()
    assert.throws(() => second.assertExecutedCount(1), /this fake was restored/)
  })

  test('nothing secret when the service, its config or the fake is printed or serialized', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake } = await fakedApp(cleanup, {
      webhook: {
        secret: 'whsec_current_secret',
        previousSecret: 'whsec_previous_one',
        previousSecretValidUntil: new Date(Date.now() + 3600_000).toISOString(),
      },
      jobs: { enabled: false, redis: 'redis://user:hunter2-secret@127.0.0.1:6379' },
    })
    const secrets = [
      TEST_API_KEY,
      'whsec_current_secret',
      'whsec_previous_one',
      'hunter2-secret',
      fake.emulator.apiKey,
      fake.webhookSecret,
    ]
    const shown = [
      inspect(app.payouts, { depth: 10 }),
      JSON.stringify(app.payouts),
      inspect(app.payouts.config, { depth: 10 }),
      JSON.stringify(app.payouts.config),
      inspect(app.payouts.config.webhook),
      JSON.stringify({ webhook: app.payouts.config.webhook }),
      inspect(app.payouts.config.jobs),
      inspect(fake.client),
    ]
    // A failing assertion on the config prints a diff of it.
    try {
      assert.deepEqual(app.payouts.config.webhook, {} as any)
    } catch (error) {
      shown.push(String((error as Error).message), inspect(error, { depth: 10 }))
    }
    for (const text of shown) {
      for (const secret of secrets) assert.notInclude(text, secret)
    }
    assert.include(inspect(app.payouts.config), '[redacted]')
    // The values themselves are intact.
    assert.equal(app.payouts.config.webhook.secret, 'whsec_current_secret')
    assert.equal(app.payouts.config.apiKey, TEST_API_KEY)
  })

  test('an app without the ledger: the client is faked, no webhook is sent', async ({
    assert,
    cleanup,
  }) => {
    const app = await bootHostApp({
      root: BASE_URL,
      payouts: { apiKey: TEST_API_KEY, baseUrl: 'http://127.0.0.1:9', ledger: { enabled: false } },
    })
    const payouts = await app.container.make('payouts.manager')
    cleanup(async () => {
      await payouts.close()
      await app.terminate()
    })
    const fake = await payouts.fake()
    const recipient = await payouts.client.recipients.create({ name: 'Ana', currency: 'MXN' })
    fake.assertRecipientCreated({ id: recipient.id })
    assert.equal(fake.emulator.webhooks.subscriptions.size, 0)
    assert.deepEqual(await payouts.webhookSecrets(), [])
  })
})
