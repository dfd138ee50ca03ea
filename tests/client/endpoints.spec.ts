import { test } from '@japa/runner'
import { startScriptedServer } from '../helpers/scripted_server.ts'
import {
  deliveryBody,
  executeBodies,
  executeData,
  KEY,
  onrampQuoteBody,
  recipientBody,
  stableQuoteBody,
  subscriptionBody,
  METHOD,
  PAYOUT,
  QUOTE,
  RECIPIENT,
  scriptedClient,
  testClient,
} from './fixtures.ts'

const recipient = recipientBody
const subscription = subscriptionBody
const delivery = deliveryBody
const coverage = {
  fiat: [
    {
      code: 'JPY',
      decimals: 0,
      onramp: true,
      offramp: true,
      minAmount: 100,
      rails: [{ code: 'zengin', label: 'Zengin' }],
    },
  ],
  wallet: { tokens: ['USDC'], chains: [{ code: 'polygon', label: 'Polygon' }] },
}
const stableQuote = stableQuoteBody
const onrampQuote = onrampQuoteBody

/** Each row: call, scripted answer, expected request, check of the parsed result. */
const cases: Array<{
  name: string
  reply: { status: number; body?: unknown }
  call: (client: ReturnType<typeof testClient>['client']) => Promise<unknown>
  method: string
  path: string
  query?: Record<string, string>
  body?: unknown
  auth?: boolean
  idempotent?: boolean
  check?: (result: any, assert: any) => void
}> = [
  {
    name: 'getCoverage: GET /config/coverage without a key',
    reply: { status: 200, body: coverage },
    call: (c) => c.getCoverage(),
    method: 'GET',
    path: '/config/coverage',
    auth: false,
    check: (r, assert) => assert.equal(r.fiat[0].decimals, 0),
  },
  {
    name: 'quotes.fiatToStablecoin: GET /quotes/fiat-to-stablecoin/all',
    reply: { status: 200, body: [stableQuote] },
    call: (c) =>
      c.quotes.fiatToStablecoin({ fromCurrency: 'USD', toCurrency: 'USDC', amount: 100 }),
    method: 'GET',
    path: '/quotes/fiat-to-stablecoin/all',
    query: { fromCurrency: 'USD', toCurrency: 'USDC', amount: '100' },
    check: (r, assert) => assert.equal(r[0].protocol, 'rt_abc'),
  },
  {
    name: 'quotes.onramp: GET /quotes/onramp/all unwraps data',
    reply: { status: 200, body: { success: true, data: [onrampQuote] } },
    call: (c) => c.quotes.onramp({ sourceCurrency: 'USD', amount: 100 }),
    method: 'GET',
    path: '/quotes/onramp/all',
    query: { sourceCurrency: 'USD', amount: '100' },
    check: (r, assert) => assert.equal(r[0].toToken, 'USDC'),
  },
  {
    name: 'quotes.bestOnramp: GET /quotes/onramp/best',
    reply: { status: 200, body: { success: true, data: onrampQuote } },
    call: (c) =>
      c.quotes.bestOnramp({ sourceCurrency: 'USD', amount: 100, payoutCurrency: 'USDT' }),
    method: 'GET',
    path: '/quotes/onramp/best',
    query: { sourceCurrency: 'USD', amount: '100', payoutCurrency: 'USDT' },
    check: (r, assert) => assert.equal(r.protocol, 'rt_on'),
  },
  {
    name: 'execute (fiat_to_fiat): banking instructions',
    reply: { status: 200, body: { success: true, data: executeData.fiat_to_fiat } },
    call: (c) => c.execute(executeBodies.fiat_to_fiat),
    method: 'POST',
    path: '/rfq/execute',
    body: executeBodies.fiat_to_fiat,
    idempotent: true,
    check: (r, assert) => {
      assert.equal(r.flow, 'fiat_to_fiat')
      assert.equal(r.bankingInstructions.swiftCode, 'EMUBUS33')
    },
  },
  {
    name: 'execute (stablecoin_to_fiat): depositAmountAtomic becomes a bigint',
    reply: { status: 200, body: { success: true, data: executeData.stablecoin_to_fiat } },
    call: (c) => c.execute(executeBodies.stablecoin_to_fiat),
    method: 'POST',
    path: '/rfq/execute',
    body: executeBodies.stablecoin_to_fiat,
    idempotent: true,
    check: (r, assert) => {
      assert.equal(r.flow, 'stablecoin_to_fiat')
      assert.equal(r.depositAmountAtomic, 250000000000000000001n)
      assert.equal(r.chainId, 137)
    },
  },
  {
    name: 'execute (onramp): payment URL, flow never sent',
    reply: { status: 200, body: { success: true, data: executeData.onramp } },
    call: (c) => c.execute({ ...executeBodies.onramp, flow: 'onramp' }),
    method: 'POST',
    path: '/rfq/execute',
    body: executeBodies.onramp,
    idempotent: true,
    check: (r, assert) => assert.equal(r.paymentUrl, 'https://pay.example.test/p/123'),
  },
  {
    name: 'executeBatch: POST /rfq/execute-batch',
    reply: {
      status: 200,
      body: {
        success: true,
        data: {
          results: [
            { index: 0, success: true, data: executeData.fiat_to_fiat },
            { index: 1, success: false, error: { code: 'INVALID_PARAMETER', error: 'bad' } },
          ],
        },
      },
    },
    call: (c) => c.executeBatch({ items: [executeBodies.fiat_to_fiat, executeBodies.onramp] }),
    method: 'POST',
    path: '/rfq/execute-batch',
    body: { items: [executeBodies.fiat_to_fiat, executeBodies.onramp] },
    idempotent: true,
    check: (r, assert) => assert.deepEqual([r[0].success, r[1].success], [true, false]),
  },
  {
    name: 'confirmEscrowDeposit: POST /rfq/confirm-escrow-deposit, no automatic key',
    reply: { status: 200, body: { success: true } },
    call: (c) => c.confirmEscrowDeposit({ quoteId: QUOTE, txHash: '0x' + 'e'.repeat(64) }),
    method: 'POST',
    path: '/rfq/confirm-escrow-deposit',
    body: { quoteId: QUOTE, txHash: '0x' + 'e'.repeat(64) },
    idempotent: false,
    check: (r, assert) => assert.isTrue(r.success),
  },
  {
    name: 'getQuoteStatus: GET /rfq/status/{quoteId}',
    reply: { status: 200, body: { quoteId: QUOTE, status: 'awaiting_escrow_deposit' } },
    call: (c) => c.getQuoteStatus(QUOTE),
    method: 'GET',
    path: `/rfq/status/${QUOTE}`,
    check: (r, assert) => assert.equal(r.status, 'awaiting_escrow_deposit'),
  },
  {
    name: 'getPayout: GET /payouts/{id}, unwrapped',
    reply: {
      status: 200,
      body: { id: 'po_1', status: 'completed', completedAt: '2026-01-01T00:00:00Z' },
    },
    call: (c) => c.getPayout(PAYOUT),
    method: 'GET',
    path: `/payouts/${PAYOUT}`,
    check: (r, assert) => assert.equal(r.completedAt, '2026-01-01T00:00:00Z'),
  },
  {
    name: 'listPayouts: GET /payouts with cursor',
    reply: { status: 200, body: { data: [{ id: 'po_1', status: 'pending' }], nextCursor: 'c2' } },
    call: (c) => c.listPayouts({ limit: 10, cursor: 'c1' }),
    method: 'GET',
    path: '/payouts',
    query: { limit: '10', cursor: 'c1' },
    check: (r, assert) => assert.equal(r.nextCursor, 'c2'),
  },
  {
    name: 'recipients.create: POST /recipients',
    reply: { status: 201, body: recipient },
    call: (c) => c.recipients.create({ name: 'Ada' }),
    method: 'POST',
    path: '/recipients',
    body: { name: 'Ada', type: 'individual' },
    idempotent: true,
    check: (r, assert) => assert.equal(r.paymentMethods[0].id, METHOD),
  },
  {
    name: 'recipients.bulkCreate: POST /recipients/bulk',
    reply: { status: 201, body: { data: [recipient] } },
    call: (c) => c.recipients.bulkCreate({ recipients: [{ name: 'Ada' }] }),
    method: 'POST',
    path: '/recipients/bulk',
    body: { recipients: [{ name: 'Ada', type: 'individual' }] },
    idempotent: true,
    check: (r, assert) => assert.lengthOf(r, 1),
  },
  {
    name: 'recipients.list: GET /recipients',
    reply: { status: 200, body: [recipient] },
    call: (c) => c.recipients.list(),
    method: 'GET',
    path: '/recipients',
    check: (r, assert) => assert.deepEqual([r.data.length, r.nextCursor], [1, null]),
  },
  {
    name: 'recipients.get: GET /recipients/{id}',
    reply: { status: 200, body: recipient },
    call: (c) => c.recipients.get(RECIPIENT),
    method: 'GET',
    path: `/recipients/${RECIPIENT}`,
  },
  {
    name: 'recipients.update: PATCH /recipients/{id} without a key',
    reply: { status: 200, body: { ...recipient, name: 'Ada L.' } },
    call: (c) => c.recipients.update(RECIPIENT, { name: 'Ada L.' }),
    method: 'PATCH',
    path: `/recipients/${RECIPIENT}`,
    body: { name: 'Ada L.' },
    idempotent: false,
    check: (r, assert) => assert.equal(r.name, 'Ada L.'),
  },
  {
    name: 'recipients.delete: DELETE /recipients/{id}',
    reply: { status: 204 },
    call: (c) => c.recipients.delete(RECIPIENT),
    method: 'DELETE',
    path: `/recipients/${RECIPIENT}`,
    idempotent: false,
  },
  {
    name: 'webhooks.subscriptions.create: POST, secret once',
    reply: { status: 201, body: { ...subscription, secret: 'whsec_abc' } },
    call: (c) =>
      c.webhooks.subscriptions.create({ url: subscription.url, events: ['payout.created'] }),
    method: 'POST',
    path: '/webhooks/subscriptions',
    body: { url: subscription.url, events: ['payout.created'] },
    idempotent: true,
    check: (r, assert) => assert.equal(r.secret, 'whsec_abc'),
  },
  {
    name: 'webhooks.subscriptions.list: GET',
    reply: { status: 200, body: { data: [subscription] } },
    call: (c) => c.webhooks.subscriptions.list(),
    method: 'GET',
    path: '/webhooks/subscriptions',
    check: (r, assert) => assert.equal(r[0].id, 'sub_1'),
  },
  {
    name: 'webhooks.subscriptions.get: GET by id',
    reply: { status: 200, body: subscription },
    call: (c) => c.webhooks.subscriptions.get('sub_1'),
    method: 'GET',
    path: '/webhooks/subscriptions/sub_1',
  },
  {
    name: 'webhooks.subscriptions.update: PATCH',
    reply: { status: 200, body: { ...subscription, active: false } },
    call: (c) => c.webhooks.subscriptions.update('sub_1', { active: false }),
    method: 'PATCH',
    path: '/webhooks/subscriptions/sub_1',
    body: { active: false },
    idempotent: false,
  },
  {
    name: 'webhooks.subscriptions.delete: DELETE',
    reply: { status: 204 },
    call: (c) => c.webhooks.subscriptions.delete('sub_1'),
    method: 'DELETE',
    path: '/webhooks/subscriptions/sub_1',
  },
  {
    name: 'webhooks.subscriptions.rotateSecret: POST, no key',
    reply: { status: 200, body: { id: 'sub_1', secret: 'whsec_new' } },
    call: (c) => c.webhooks.subscriptions.rotateSecret('sub_1'),
    method: 'POST',
    path: '/webhooks/subscriptions/sub_1/rotate-secret',
    idempotent: false,
    check: (r, assert) => assert.equal(r.secret, 'whsec_new'),
  },
  {
    name: 'webhooks.deliveries.list: GET with filters',
    reply: { status: 200, body: { data: [delivery] } },
    call: (c) => c.webhooks.deliveries.list({ status: 'permanently_failed' }),
    method: 'GET',
    path: '/webhooks/deliveries',
    query: { status: 'permanently_failed' },
  },
  {
    name: 'webhooks.deliveries.get: GET by id',
    reply: { status: 200, body: delivery },
    call: (c) => c.webhooks.deliveries.get('dlv_1'),
    method: 'GET',
    path: '/webhooks/deliveries/dlv_1',
  },
  {
    name: 'webhooks.deliveries.replay: POST, 202 with a new id',
    reply: { status: 202, body: { id: 'dlv_2', replayOf: 'dlv_1', status: 'pending' } },
    call: (c) => c.webhooks.deliveries.replay('dlv_1'),
    method: 'POST',
    path: '/webhooks/deliveries/dlv_1/replay',
    idempotent: false,
    check: (r, assert) => assert.equal(r.id, 'dlv_2'),
  },
]

test.group('Client | endpoints', () => {
  test('{name}')
    .with(cases)
    .run(async ({ assert, cleanup }, row) => {
      const { client, server } = await scriptedClient(cleanup, [row.reply])
      const result = await row.call(client)
      assert.lengthOf(server.requests, 1)
      const [req] = server.requests
      assert.equal(req.method, row.method)
      assert.equal(req.url.pathname, row.path)
      assert.deepEqual(Object.fromEntries(req.url.searchParams), row.query ?? {})
      if (row.body !== undefined) assert.deepEqual(req.json, row.body)
      if (row.auth === false) assert.notProperty(req.headers, 'authorization')
      else assert.equal(req.headers.authorization, `Bearer ${KEY}`)
      if (row.idempotent === true)
        assert.match(String(req.headers['idempotency-key']), /^[\w-]{8,255}$/)
      if (row.idempotent === false) assert.notProperty(req.headers, 'idempotency-key')
      assert.match(String(req.headers['user-agent']), /^@svc\/adonis-payouts\/\d+\.\d+\.\d+/)
      row.check?.(result, assert)
    })

  test('the /api prefix is part of baseUrl and paths can be overridden', async ({
    assert,
    cleanup,
  }) => {
    const server = await startScriptedServer([
      { status: 200, body: { id: 'po_1', status: 'pending' } },
    ])
    const { client } = testClient(`${server.baseUrl}/api`, {
      paths: { payout: '/v2/payouts/{id}' },
    })
    cleanup(async () => {
      await client.close()
      await server.close()
    })
    await client.getPayout('po 1/x')
    assert.equal(server.requests[0].url.pathname, '/api/v2/payouts/po%201%2Fx')
  })

  test('a caller-supplied Idempotency-Key is sent as is', async ({ assert, cleanup }) => {
    const { client, server } = await scriptedClient(cleanup, [
      { status: 200, body: { success: true, data: executeData.fiat_to_fiat } },
    ])
    await client.execute(executeBodies.fiat_to_fiat, { idempotencyKey: 'order-42-attempt' })
    assert.equal(server.requests[0].headers['idempotency-key'], 'order-42-attempt')
  })

  test('rateLimit exposes the last X-RateLimit headers', async ({ assert, cleanup }) => {
    const { client } = await scriptedClient(cleanup, [{ status: 200, body: coverage }])
    assert.isNull(client.rateLimit)
    await client.getCoverage()
    assert.deepEqual(client.rateLimit, { limit: 60, remaining: 59, reset: 1700000000 })
  })
})
