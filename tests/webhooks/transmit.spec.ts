import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { request } from 'undici'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { signPayload } from '../../src/signature/main.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startHttpApp, type HttpApp } from '../helpers/http_app.ts'
import { subscriber } from '../worker/helpers.ts'
import { partsOf } from '../../src/service/payouts_service.ts'

test.group(`Transmit | payout channels (${TEST_DB})`, (group) => {
  // One app for the group: @adonisjs/transmit's controllers use a module-level singleton
  // bound to the first app that served them, as a real process has one app.
  let app: HttpApp
  const teardown: Array<() => Promise<void>> = []
  group.setup(async () => {
    app = await startHttpApp(
      (fn) => void teardown.push(fn),
      {},
      async (adonis) => {
        const transmit = await adonis.container.make('transmit')
        transmit.registerRoutes()
        const payouts = await adonis.container.make('payouts.manager')
        payouts.registerChannels(transmit, {
          owner: (ctx, ownerId) => ctx.request.header('x-owner') === ownerId,
        })
      }
    )
  })
  group.teardown(async () => {
    for (const fn of teardown.reverse()) await fn()
  })

  test('a subscriber receives the broadcast of a webhook it posted; another owner is refused', async ({
    assert,
    cleanup,
  }) => {
    const payoutId = randomUUID()
    // The payout belongs to tenant-a (as execute would have stored it).
    const { db } = await partsOf(app.payouts)
    await new PayoutLedger(db).apply({
      payoutId,
      status: 'pending',
      step: 'initiated',
      source: 'execute',
      fields: { ownerId: 'tenant-a', instructions: { paymentUrl: 'https://secret.example/pay' } },
    })

    const mine = subscriber(app.url, 'tenant-a')
    const refused: number[] = []
    const theirs = subscriber(app.url, 'tenant-b', refused)
    cleanup(async () => {
      mine.close()
      theirs.close()
    })
    const received: any[] = []
    const subscription = mine.subscription('payouts/owners/tenant-a')
    subscription.onMessage((message) => received.push(message))
    await subscription.create()
    await theirs.subscription('payouts/owners/tenant-a').create()
    // No payout callback was given: nobody may listen to a single payout's channel.
    await theirs.subscription(`payouts/${payoutId}`).create()
    // Transmit answers every refusal with 400; the control below proves it is authorization.
    assert.deepEqual(refused, [400, 400])
    await theirs.subscription('payouts/owners/tenant-b').create()
    assert.lengthOf(refused, 2, 'tenant-b may listen to its own channel')

    const raw = JSON.stringify({
      type: 'payout.status.updated',
      createdAt: new Date().toISOString(),
      data: {
        payoutId,
        status: 'processing',
        step: 'compliance_cleared',
        stepChangedAt: new Date().toISOString(),
      },
    })
    const t = Math.floor(Date.now() / 1000)
    const response = await request(`${app.url}/webhooks/payouts`, {
      method: 'POST',
      body: raw,
      headers: {
        'content-type': 'application/json',
        'svc-signature': signPayload('whsec_current_secret', t, raw),
        'svc-delivery-id': 'dlv_transmit_1',
        'svc-event-type': 'payout.status.updated',
      },
    })
    assert.equal(response.statusCode, 200)
    const started = Date.now()
    while (received.length === 0 && Date.now() - started < 5000)
      await new Promise((r) => setTimeout(r, 10))
    assert.lengthOf(received, 1)
    assert.deepInclude(received[0], {
      payoutId,
      ownerId: 'tenant-a',
      status: 'processing',
      step: 'compliance_cleared',
      previousStatus: 'pending',
    })
    assert.notInclude(JSON.stringify(received[0]), 'secret.example')
  })

  test('a payout.created that beats the execute response still reaches the owner channel', async ({
    assert,
    cleanup,
  }) => {
    const mine = subscriber(app.url, 'tenant-a')
    cleanup(async () => mine.close())
    const received: any[] = []
    const subscription = mine.subscription('payouts/owners/tenant-a')
    subscription.onMessage((message) => received.push(message))
    await subscription.create()

    const payoutId = randomUUID()
    const { ledger } = await partsOf(app.payouts)
    // The webhook first: nobody knows the owner yet, so only the payout channel hears it.
    await ledger.apply({ payoutId, status: 'pending', step: 'initiated', source: 'webhook' })
    // Then the execute response: no new position, but now the owner is known.
    const executeResponse = {
      payoutId,
      status: 'pending',
      step: 'initiated',
      source: 'execute' as const,
      fields: { ownerId: 'tenant-a' },
    }
    const stored = await ledger.apply(executeResponse)
    assert.isFalse(stored.changed)
    assert.isTrue(stored.ownerAttached)
    const started = Date.now()
    while (received.length === 0 && Date.now() - started < 5000)
      await new Promise((r) => setTimeout(r, 10))
    assert.lengthOf(received, 1)
    assert.deepInclude(received[0], { payoutId, ownerId: 'tenant-a', status: 'pending' })
    // A later duplicate attaches nothing and announces nothing.
    const again = await ledger.apply(executeResponse)
    assert.isFalse(again.ownerAttached)
    await new Promise((r) => setTimeout(r, 200))
    assert.lengthOf(received, 1)
  })
})
