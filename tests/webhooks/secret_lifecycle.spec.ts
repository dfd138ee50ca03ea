import { randomUUID } from 'node:crypto'
import { setTimeout } from 'node:timers/promises'
import { test } from '@japa/runner'
import { Logger } from '@adonisjs/core/logger'
import { request } from 'undici'
import { WebhookDelivery } from '../../src/models/main.ts'
import { signPayload } from '../../src/signature/main.ts'
import { SecretStore } from '../../src/webhooks/secret_store.ts'
import { PayoutsService } from '../../src/service/payouts_service.ts'
import { createClient } from '../../src/service/client_factory.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startAppOnEmulator, type HttpApp } from '../helpers/http_app.ts'

/**
 * The emulator as the service and an app subscribed through the plugin: `secret()` is what
 * the service signs with now.
 */
async function setup(cleanup: (fn: () => Promise<void>) => void) {
  const { emu, app } = await startAppOnEmulator(cleanup)
  const { id } = await app.payouts.webhooks.create({ url: 'https://hooks.example.com/w' })
  const secret = () => emu.webhooks.subscriptions.get(id)!.secret
  return { emu, app, id, secret }
}

/** POSTs a `payout.created` signed with `secret` to the real route; answers the status. */
async function deliver(app: HttpApp, secret: string) {
  const raw = JSON.stringify({
    type: 'payout.created',
    createdAt: new Date().toISOString(),
    data: { payoutId: randomUUID(), status: 'pending' },
  })
  const deliveryId = `dlv_${randomUUID()}`
  const response = await request(`${app.url}/webhooks/payouts`, {
    method: 'POST',
    body: raw,
    headers: {
      'content-type': 'application/json',
      'svc-signature': signPayload(secret, Math.floor(Date.now() / 1000), raw),
      'svc-delivery-id': deliveryId,
      'svc-event-type': 'payout.created',
    },
  })
  await response.body.dump()
  const stored = await WebhookDelivery.findBy('deliveryId', deliveryId)
  return { status: response.statusCode, stored: stored !== null }
}

test.group(`Webhooks | secret lifecycle (${TEST_DB})`, () => {
  test('a rotation through the plugin refuses the old secret at once', async ({
    assert,
    cleanup,
  }) => {
    const { app, id, secret } = await setup(cleanup)
    const old = secret()
    assert.deepEqual(await deliver(app, old), { status: 200, stored: true })

    await app.payouts.webhooks.rotateSecret(id)
    const fresh = secret()
    assert.notEqual(fresh, old)
    assert.deepEqual(await deliver(app, old), { status: 400, stored: false })
    assert.deepEqual(await deliver(app, fresh), { status: 200, stored: true })
    assert.notInclude(await app.payouts.webhookSecrets(), old)
  })

  test('a secret rotated by another process is accepted within a second, not after the 30 s cache lifetime', async ({
    assert,
    cleanup,
  }) => {
    const { app, secret, id } = await setup(cleanup)
    // The route's cache is warm with the current secret.
    assert.equal((await deliver(app, secret())).status, 200)
    // Another process (the rotate-secret command, another instance) rotates it.
    const logger = new Logger({ enabled: false })
    const other = new PayoutsService(app.payouts.config, {
      logger,
      createClient: () => createClient(app.payouts.config, logger),
      database: async () => await app.app.container.make('lucid.db'),
      encryption: async () => await app.app.container.make('encryption'),
    })
    cleanup(() => other.close())
    await other.webhooks.rotateSecret(id)
    // The route reads the stored secrets again on a miss, at most once a second.
    await setTimeout(1100)
    // The service signs with the new one from now on: the route must not refuse it.
    assert.deepEqual(await deliver(app, secret()), { status: 200, stored: true })
  })

  test('another instance refuses a rotated-out or deleted secret once its cache lifetime ends', async ({
    assert,
    cleanup,
  }) => {
    const { app, id, secret } = await setup(cleanup)
    const old = secret()
    // A second instance: its own store over the same table, with a short cache lifetime.
    const ttlMs = 100
    const db = await app.app.container.make('lucid.db')
    const encryption = await app.app.container.make('encryption')
    const other = new SecretStore(db, `${app.prefix}webhook_secrets`, encryption, undefined, ttlMs)
    assert.include(await other.activeSecrets(), old)

    await app.payouts.webhooks.rotateSecret(id)
    const fresh = secret()
    await setTimeout(ttlMs + 50)
    assert.deepEqual(await other.activeSecrets(), [fresh])

    await app.payouts.webhooks.delete(id)
    await setTimeout(ttlMs + 50)
    assert.deepEqual(await other.activeSecrets(), [])
  })

  test("a deleted subscription's secrets are refused, the rotated-out one included", async ({
    assert,
    cleanup,
  }) => {
    const { emu, app, id, secret } = await setup(cleanup)
    const first = secret()
    await app.payouts.webhooks.rotateSecret(id)
    const second = secret()
    assert.equal((await deliver(app, second)).status, 200)

    const result = await app.payouts.webhooks.delete(id)
    assert.deepEqual(result, { id, deletedAtService: true, removedLocally: true })
    assert.isFalse(emu.webhooks.subscriptions.has(id))
    for (const dead of [first, second]) {
      assert.deepEqual(await deliver(app, dead), { status: 400, stored: false })
    }
    // The configured secret is untouched.
    assert.equal((await deliver(app, 'whsec_current_secret')).status, 200)
  })

  test('a subscription the service already deleted (404) is deleted here and said so', async ({
    assert,
    cleanup,
  }) => {
    const { app, id, secret: current } = await setup(cleanup)
    const secret = current()
    await app.payouts.client.webhooks.subscriptions.delete(id)

    const result = await app.payouts.webhooks.delete(id)
    assert.deepEqual(result, { id, deletedAtService: false, removedLocally: true })
    assert.deepEqual(await deliver(app, secret), { status: 400, stored: false })
  })

  test('a delete the service refuses deletes nothing here; an id nobody knows is an error', async ({
    assert,
    cleanup,
  }) => {
    const { emu, app, id, secret: current } = await setup(cleanup)
    const secret = current()

    emu.admin.setFaults({ errorRate: 1, pathPrefixes: ['/webhooks/subscriptions'] })
    const refused = await app.payouts.webhooks.delete(id).catch((error) => error)
    assert.instanceOf(refused, Error)
    assert.isAtLeast(refused.status, 500)
    emu.admin.setFaults({})
    assert.isTrue(emu.webhooks.subscriptions.has(id))
    assert.equal((await deliver(app, secret)).status, 200, 'still subscribed, still accepted')

    const unknown = await app.payouts.webhooks.delete('sub_unknown').catch((error) => error)
    assert.equal(unknown.code, 'E_PAYOUTS_WEBHOOK_SUBSCRIPTION_NOT_FOUND')
    assert.include(unknown.message, 'sub_unknown')
  })

  test('a rotation whose answer is lost says the service may sign with a secret this app lacks', async ({
    assert,
    cleanup,
  }) => {
    const { app, emu, id } = await setup(cleanup)
    emu.admin.setFaults({ errorRate: 1, pathPrefixes: ['/webhooks/subscriptions'] })
    const error = await app.payouts.webhooks.rotateSecret(id).catch((e) => e)
    emu.admin.setFaults({})
    assert.equal(error.code, 'E_PAYOUTS_WEBHOOK_ROTATION_UNCONFIRMED')
    assert.include(error.message, 'rotate it again')
    assert.isAtLeast(error.cause.status, 500)
    // Rotating again brings the app and the service back to one secret.
    await app.payouts.webhooks.rotateSecret(id)
    assert.deepEqual(await app.payouts.webhookSecrets(), [
      'whsec_current_secret',
      emu.webhooks.subscriptions.get(id)!.secret,
    ])
  })

  test('rotating a subscription whose secret is not stored here fails before the service is asked', async ({
    assert,
    cleanup,
  }) => {
    const { emu, app } = await setup(cleanup)
    // Made at the service by someone else: its secret never reached this app.
    const elsewhere = await app.payouts.client.webhooks.subscriptions.create({
      url: 'https://hooks.example.com/other',
      events: ['payout.created'],
    })
    const error = await app.payouts.webhooks.rotateSecret(elsewhere.id).catch((e) => e)
    assert.equal(error.code, 'E_PAYOUTS_WEBHOOK_SECRET_NOT_STORED')
    assert.include(error.message, elsewhere.id)
    assert.equal(
      emu.webhooks.subscriptions.get(elsewhere.id)!.secret,
      elsewhere.secret,
      'the service still signs with the secret its owner holds'
    )
  })
})
