import { setTimeout as sleep } from 'node:timers/promises'
import { test } from '@japa/runner'
import type { PayoutsFake } from '../../src/testing/main.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'

const EU_API_KEY = `sk_test_${'E'.repeat(43)}`

function fiat(fake: PayoutsFake) {
  return {
    fromCurrency: 'USD',
    toCurrency: 'MXN',
    amount: 100,
    recipientId: fake.seedRecipient().id,
    userPaymentMethodId: fake.paymentMethodId,
  }
}

test.group(`payouts.fake() | await using (${TEST_DB})`, () => {
  test('the fake stands in inside the block; after it the real service is back and the handle is closed', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    cleanup(() => app.payouts.restore())
    const live = app.payouts.client
    let handle: PayoutsFake
    {
      await using fake = await app.payouts.fake()
      handle = fake
      assert.isTrue(app.payouts.toJSON().faked)
      assert.strictEqual(app.payouts.client, fake.client)
      const { payout } = await app.payouts.execute(fiat(fake))
      fake.assertExecuted({ payoutId: payout.payoutUuid })
    }
    assert.isFalse(app.payouts.toJSON().faked)
    assert.strictEqual(app.payouts.client, live)
    await assert.rejects(() => handle.settle(), /this fake was restored/)
  })

  test('a block that throws restores too', async ({ assert, cleanup }) => {
    const app = await startHttpApp(cleanup)
    cleanup(() => app.payouts.restore())
    await assert.rejects(async () => {
      await using fake = await app.payouts.fake()
      assert.isTrue(app.payouts.toJSON().faked)
      void fake
      throw new Error('test failed midway')
    }, 'test failed midway')
    assert.isFalse(app.payouts.toJSON().faked)
  })

  test('a fake replaced inside the block leaves the newer fake in place when the block ends', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    cleanup(() => app.payouts.restore())
    let newer: PayoutsFake
    {
      await using first = await app.payouts.fake()
      void first
      newer = await app.payouts.fake()
    }
    assert.isTrue(app.payouts.toJSON().faked)
    assert.strictEqual(app.payouts.client, newer.client)
    await newer.settle()
  })

  test("the manager's fake restores every account", async ({ assert, cleanup }) => {
    const app = await startHttpApp(cleanup, {
      default: 'main',
      accounts: {
        main: {},
        eu: { apiKey: EU_API_KEY, webhook: { secret: 'whsec_eu_secret' } },
      },
    } as any)
    cleanup(() => app.payouts.restore())
    const eu = app.payouts.use('eu')
    {
      await using fake = await app.payouts.fake()
      assert.strictEqual(eu.client, fake.account('eu').client)
    }
    assert.deepEqual([app.payouts.toJSON().faked, eu.toJSON().faked], [false, false])
  })

  test('each move returns once the payouts:webhook_received listeners of its deliveries are done', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    cleanup(() => app.payouts.restore())
    const emitter = await app.app.container.make('emitter')
    const done: string[] = []
    emitter.on('payouts:webhook_received', async (event) => {
      await sleep(500)
      done.push(`${event.type} ${event.source}`)
    })
    await using fake = await app.payouts.fake()
    const { payout } = await app.payouts.execute(fiat(fake))
    await fake.settle()
    assert.deepEqual(done, ['payout.created webhook'])
    await fake.complete(payout)
    assert.deepEqual(done.slice(1), ['payout.status.updated webhook'])
  })
})
