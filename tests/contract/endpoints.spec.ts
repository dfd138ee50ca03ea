import { test } from '@japa/runner'
import { DEFAULT_PATHS, ENDPOINTS } from '../../src/contract/endpoints.ts'
import { compilePathTemplate } from '../../src/emulator/api.ts'

test.group('Endpoint contract', () => {
  test('the default paths a client can override are the documented ones', ({ assert }) => {
    assert.deepEqual(DEFAULT_PATHS, {
      coverage: '/config/coverage',
      quotesFiatToStablecoin: '/quotes/fiat-to-stablecoin/all',
      quotesOnramp: '/quotes/onramp/all',
      quotesOnrampBest: '/quotes/onramp/best',
      execute: '/rfq/execute',
      executeBatch: '/rfq/execute-batch',
      confirmEscrowDeposit: '/rfq/confirm-escrow-deposit',
      quoteStatus: '/rfq/status/{id}',
      payouts: '/payouts',
      payout: '/payouts/{id}',
      recipients: '/recipients',
      recipientsBulk: '/recipients/bulk',
      recipient: '/recipients/{id}',
      subscriptions: '/webhooks/subscriptions',
      subscription: '/webhooks/subscriptions/{id}',
      subscriptionRotateSecret: '/webhooks/subscriptions/{id}/rotate-secret',
      deliveries: '/webhooks/deliveries',
      delivery: '/webhooks/deliveries/{id}',
      deliveryReplay: '/webhooks/deliveries/{id}/replay',
    })
  })

  test('a path template matches the whole path, its {id} one segment', ({ assert }) => {
    const status = compilePathTemplate('/rfq/status/{id}')
    assert.deepEqual(status.exec('/rfq/status/q%201')?.slice(1), ['q%201'])
    assert.isNull(status.exec('/rfq/status/a/b'))
    assert.isNull(status.exec('/rfq/status/'))
    assert.isNull(status.exec('/api/rfq/status/a'))
    const rotate = compilePathTemplate(ENDPOINTS.rotateSubscriptionSecret.path)
    assert.deepEqual(rotate.exec('/webhooks/subscriptions/s_1/rotate-secret')?.slice(1), ['s_1'])
    assert.isNull(compilePathTemplate('/config/coverage').exec('/config/coverageX'))
  })

  test('no request matches two endpoints of the same method', ({ assert }) => {
    const samples = Object.values(ENDPOINTS).map((e) => [e.method, e.path.replace('{id}', 'x1')])
    for (const [method, path] of samples) {
      const matches = Object.values(ENDPOINTS).filter(
        (e) => e.method === method && compilePathTemplate(e.path).test(path)
      )
      assert.lengthOf(matches, 1, `${method} ${path}`)
    }
  })
})
