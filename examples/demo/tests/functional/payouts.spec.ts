import { test } from '@japa/runner'
import transmit from '@adonisjs/transmit/services/main'
import { Payout } from '@svc/adonis-payouts/models'

/**
 * A payout through the app's own controller, completed by the Payout Service, heard by the
 * app's listener and its Transmit channels. `payouts` is this test's fake (tests/bootstrap.ts).
 */
test.group('Payouts', () => {
  test('a payout executed, completed, heard by the listener and the channels', async ({
    client,
    payouts,
    assert,
    cleanup,
  }) => {
    const channels: string[] = []
    cleanup(transmit.on('broadcast', ({ channel }) => void channels.push(channel)))

    const created = await client
      .post('/api/payouts')
      .header('Idempotency-Key', 'order-1001')
      .json({ flow: 'fiat_to_fiat', amount: 120, userPaymentMethodId: payouts.paymentMethodId })
    created.assertStatus(200)
    const { payoutId } = created.body()
    payouts.assertExecuted({ payoutId, sourceAmount: 120, sourceCurrency: 'USD' })

    // The service completes it: a signed webhook into the app's route, inbox, ledger.
    await payouts.complete(payoutId)

    const payout = await Payout.findByOrFail('payoutUuid', payoutId)
    assert.equal(payout.status, 'completed')
    const activity = await client.get('/api/activity')
    activity.assertBodyContains([{ payoutId, status: 'completed', ownerId: 'demo-tenant' }])
    assert.includeMembers(channels, [`payouts/${payoutId}`, 'payouts/owners/demo-tenant'])
  })

  test('a retried request creates no second payout', async ({ client, payouts, assert }) => {
    const send = () =>
      client
        .post('/api/payouts')
        .header('Idempotency-Key', 'order-1002')
        .json({ flow: 'fiat_to_fiat', amount: 80, userPaymentMethodId: payouts.paymentMethodId })

    const first = await send()
    const retried = await send()

    first.assertStatus(200)
    retried.assertStatus(200)
    assert.equal(retried.body().payoutId, first.body().payoutId)
    payouts.assertExecutedCount(1)
    assert.lengthOf(await Payout.all(), 1)
  })
})
