import { test } from '@japa/runner'
import Payout from '../../src/models/payout.ts'
import type { PayoutsFake } from '../../src/testing/main.ts'
import { partsOf } from '../../src/service/payouts_service.ts'
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

/** An app with two accounts whose services are unreachable (127.0.0.1:9): only fakes answer. */
async function twoAccountsFaked(cleanup: (fn: () => Promise<void>) => void) {
  const app = await startHttpApp(cleanup, {
    default: 'main',
    accounts: {
      main: {},
      eu: { apiKey: EU_API_KEY, webhook: { secret: 'whsec_eu_secret' } },
    },
  } as any)
  const fake = await app.payouts.fake()
  cleanup(() => app.payouts.restore())
  return { app, fake }
}

test.group(`payouts.fake() with several accounts (${TEST_DB})`, () => {
  test("fakes every account, each on its own emulator; fake.account('eu') is eu's handle", async ({
    assert,
    cleanup,
  }) => {
    const { app, fake } = await twoAccountsFaked(cleanup)
    const eu = app.payouts.use('eu')
    const euFake = fake.account('eu')

    assert.equal(fake.accountName, 'main')
    assert.equal(euFake.accountName, 'eu')
    assert.strictEqual(fake.account('main'), fake)
    assert.strictEqual(euFake.account('main'), fake)
    assert.notStrictEqual(euFake.emulator, fake.emulator)
    assert.strictEqual(app.payouts.client, fake.client)
    assert.strictEqual(eu.client, euFake.client)

    const main = await app.payouts.execute(fiat(fake))
    const other = await eu.execute(fiat(euFake))
    fake.assertExecutedCount(1)
    fake.assertExecuted({ payoutId: main.payout.payoutUuid })
    euFake.assertExecutedCount(1)
    euFake.assertExecuted({ payoutId: other.payout.payoutUuid })

    // eu's payout completes by eu's webhooks, through eu's route, into eu's rows.
    await euFake.complete(other.payout)
    await partsOf(app.payouts)
    const rows = await Payout.query()
      .whereIn('payout_uuid', [main.payout.payoutUuid, other.payout.payoutUuid])
      .orderBy('account', 'asc')
    assert.deepEqual(
      rows.map((row) => [row.account, row.status]),
      [
        ['eu', 'completed'],
        ['main', main.payout.status],
      ]
    )
    const completed = app.events.filter((event) => event.name === 'payouts:completed')
    assert.deepEqual(
      completed.map((event) => event.data.account),
      ['eu']
    )
  }).timeout(30_000)

  test('an account the app does not have is refused; restore() restores every account', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake } = await twoAccountsFaked(cleanup)
    assert.throws(() => fake.account('us'), /no account "us" is faked here \(faked: main, eu\)/)

    await app.payouts.restore()
    assert.isFalse(app.payouts.toJSON().faked)
    assert.isFalse(app.payouts.use('eu').toJSON().faked)
  }).timeout(30_000)
})
