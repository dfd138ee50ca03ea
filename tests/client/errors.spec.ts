import { inspect } from 'node:util'
import { test } from '@japa/runner'
import {
  BusinessRuleError,
  EscrowConfirmationFailedError,
  ForbiddenError,
  IdempotencyKeyReusedError,
  IdempotencyRequestInFlightError,
  InvalidJsonError,
  InvalidParameterError,
  MaxActiveSubscriptionsExceededError,
  NotFoundError,
  PayoutsApiError,
  PayoutsClient,
  PayoutsConfigError,
  PayoutsValidationError,
  RateLimitedError,
  ServerError,
  UnauthorizedError,
  WrongEnvironmentError,
} from '../../src/client/main.ts'
import { executeBodies, KEY, QUOTE, scriptedClient } from './fixtures.ts'

const errorCases = [
  {
    status: 400,
    body: { code: 'INVALID_JSON', error: 'bad json' },
    type: InvalidJsonError,
    code: 'INVALID_JSON',
  },
  {
    status: 400,
    body: {
      code: 'INVALID_PARAMETER',
      error: 'amount too long',
      details: { field: 'reference', bound: 255 },
    },
    type: InvalidParameterError,
    code: 'INVALID_PARAMETER',
  },
  {
    status: 401,
    body: { code: 'UNAUTHORIZED', error: 'invalid key' },
    type: UnauthorizedError,
    code: 'UNAUTHORIZED',
  },
  {
    status: 403,
    body: { code: 'FORBIDDEN', error: 'missing scope' },
    type: ForbiddenError,
    code: 'FORBIDDEN',
  },
  {
    status: 403,
    body: { error: 'environment_scope mismatch' },
    type: WrongEnvironmentError,
    code: 'ENVIRONMENT_SCOPE_MISMATCH',
  },
  { status: 404, body: { error: 'no such payout' }, type: NotFoundError, code: 'NOT_FOUND' },
  {
    status: 409,
    body: { code: 'IDEMPOTENCY_KEY_REUSED', error: 'reused' },
    type: IdempotencyKeyReusedError,
    code: 'IDEMPOTENCY_KEY_REUSED',
  },
  {
    status: 409,
    body: { code: 'MAX_ACTIVE_SUBSCRIPTIONS_EXCEEDED', error: '25 max' },
    type: MaxActiveSubscriptionsExceededError,
    code: 'MAX_ACTIVE_SUBSCRIPTIONS_EXCEEDED',
  },
  {
    status: 422,
    body: {
      code: 'AMOUNT_OUT_OF_BOUNDS',
      error: 'below minimum',
      details: { field: 'amount', min: 10 },
    },
    type: BusinessRuleError,
    code: 'AMOUNT_OUT_OF_BOUNDS',
  },
  {
    status: 400,
    body: { success: false, error: 'invalid request' },
    type: InvalidParameterError,
    code: 'INVALID_PARAMETER',
  },
  { status: 418, body: { error: 'teapot' }, type: PayoutsApiError, code: 'HTTP_418' },
]

test.group('Client | errors', () => {
  test('{status} {code} maps to its typed error')
    .with(errorCases)
    .run(async ({ assert, cleanup }, row) => {
      const { client, server } = await scriptedClient(cleanup, [
        { status: row.status, body: row.body },
      ])
      const error = await client.execute(executeBodies.fiat_to_fiat).catch((e) => e)
      assert.instanceOf(error, row.type)
      assert.instanceOf(error, PayoutsApiError)
      assert.equal(error.status, row.status)
      assert.equal(error.code, row.code)
      assert.equal(error.message, row.body.error)
      assert.deepEqual(error.details, (row.body as any).details)
      assert.lengthOf(server.requests, 1)
    })

  test('429 with only { error } is RATE_LIMITED with retryAfter', async ({ assert, cleanup }) => {
    const { client } = await scriptedClient(
      cleanup,
      [{ status: 429, body: { error: 'rate limit exceeded' }, headers: { 'retry-after': '7' } }],
      { retry: { maxRetries: 0 } }
    )
    const error = await client.getPayout('po_1').catch((e) => e)
    assert.instanceOf(error, RateLimitedError)
    assert.equal(error.code, 'RATE_LIMITED')
    assert.equal(error.retryAfter, 7)
  })

  test('409 IDEMPOTENCY_REQUEST_IN_FLIGHT after the last retry', async ({ assert, cleanup }) => {
    const { client, server } = await scriptedClient(
      cleanup,
      [
        {
          status: 409,
          body: { code: 'IDEMPOTENCY_REQUEST_IN_FLIGHT', error: 'in flight' },
          headers: { 'retry-after': '1' },
        },
      ],
      { retry: { maxRetries: 1 } }
    )
    const error = await client.execute(executeBodies.fiat_to_fiat).catch((e) => e)
    assert.instanceOf(error, IdempotencyRequestInFlightError)
    assert.lengthOf(server.requests, 2)
  })

  test('the escrow confirmation 500 is its own error and is not retried', async ({
    assert,
    cleanup,
  }) => {
    const { client, server } = await scriptedClient(cleanup, [
      { status: 500, body: { success: false, error: 'escrow deposit confirmation failed' } },
    ])
    const error = await client
      .confirmEscrowDeposit(
        { quoteId: QUOTE, txHash: '0x' + 'a'.repeat(64) },
        { idempotencyKey: 'confirm-1234' }
      )
      .catch((e) => e)
    assert.instanceOf(error, EscrowConfirmationFailedError)
    assert.equal(error.code, 'ESCROW_CONFIRMATION_FAILED')
    assert.lengthOf(server.requests, 1)
  })

  test('a 5xx after the last retry is a ServerError whose outcome is unknown', async ({
    assert,
    cleanup,
  }) => {
    const { client, server } = await scriptedClient(
      cleanup,
      [{ status: 503, body: { error: 'down' } }],
      { retry: { maxRetries: 2 } }
    )
    const error = await client.execute(executeBodies.fiat_to_fiat).catch((e) => e)
    assert.instanceOf(error, ServerError)
    assert.isTrue(error.outcomeUnknown)
    assert.lengthOf(server.requests, 3)
  })

  test('malformed 2xx bodies end in a typed error: {$i}')
    .with(
      [
        { raw: 'not json' },
        { raw: '{"success":true,"data":{"payoutId":1}}' },
        { raw: '[]' },
        {
          raw: '{"success":true,"data":{"payoutId":"x","quoteId":"q","status":"s","toAmount":1,"partnerFxRate":1,"effectiveRate":1,"fees":{"serviceFee":1,"serviceFeeBps":1},"bankingInstructions":{"a":1}}}',
        },
      ].map((row, i) => ({ ...row, i }))
    )
    .run(async ({ assert, cleanup }, row) => {
      const { client } = await scriptedClient(cleanup, [{ status: 200, raw: row.raw }])
      const error = await client.execute(executeBodies.fiat_to_fiat).catch((e) => e)
      assert.instanceOf(error, PayoutsApiError)
      assert.equal(error.code, 'INVALID_RESPONSE')
    })
})

test.group('Client | validation before sending', () => {
  const invalid = [
    {
      name: 'amount must be > 0',
      input: { ...executeBodies.fiat_to_fiat, amount: 0 },
      field: 'amount',
    },
    {
      name: 'recipientId must be a UUID',
      input: { ...executeBodies.fiat_to_fiat, recipientId: 'abc' },
      field: 'recipientId',
    },
    {
      name: 'fiat-to-fiat needs userPaymentMethodId',
      input: { ...executeBodies.fiat_to_fiat, userPaymentMethodId: undefined },
      field: 'userPaymentMethodId',
    },
    {
      name: 'stablecoin-to-fiat needs walletAddress',
      input: { ...executeBodies.stablecoin_to_fiat, walletAddress: undefined },
      field: 'walletAddress',
    },
    {
      name: 'onramp needs userPaymentMethodId',
      input: { ...executeBodies.onramp, userPaymentMethodId: undefined },
      field: 'userPaymentMethodId',
    },
    {
      name: 'routeProtocol must be an rt_ token',
      input: { ...executeBodies.fiat_to_fiat, routeProtocol: 'x' },
      field: 'routeProtocol',
    },
    {
      name: 'an unknown flow is refused',
      input: { ...executeBodies.fiat_to_fiat, flow: 'teleport' },
      field: 'flow',
    },
  ]

  test('{name}')
    .with(invalid)
    .run(async ({ assert, cleanup }, row) => {
      const { client, server } = await scriptedClient(cleanup, [{ status: 200, body: {} }])
      const error = await client.execute(row.input as any).catch((e) => e)
      assert.instanceOf(error, PayoutsValidationError)
      assert.equal(error.field, row.field)
      assert.lengthOf(server.requests, 0)
    })

  test('other inputs: Idempotency-Key, https webhook URL, tx hash, event types', async ({
    assert,
    cleanup,
  }) => {
    const { client, server } = await scriptedClient(cleanup, [{ status: 200, body: {} }])
    const attempts: Array<[Promise<unknown>, string]> = [
      [client.execute(executeBodies.fiat_to_fiat, { idempotencyKey: 'short' }), ''],
      [client.execute(executeBodies.fiat_to_fiat, { idempotencyKey: 'has spaces in it' }), ''],
      [
        client.webhooks.subscriptions.create({
          url: 'http://app.example.test/h',
          events: ['payout.created'],
        }),
        'url',
      ],
      [
        client.webhooks.subscriptions.create({
          url: 'https://app.example.test/h',
          events: ['payout.delivered' as any],
        }),
        'events.0',
      ],
      [client.confirmEscrowDeposit({ quoteId: QUOTE, txHash: 'abc' }), 'txHash'],
      [client.confirmEscrowDeposit({ quoteId: 'nope', txHash: '0x' + 'a'.repeat(64) }), 'quoteId'],
      [
        client.quotes.fiatToStablecoin({ fromCurrency: 'USD', toCurrency: 'USDC', amount: -1 }),
        'amount',
      ],
    ]
    for (const [promise, field] of attempts) {
      const error = (await promise.catch((e) => e)) as PayoutsValidationError
      assert.instanceOf(error, PayoutsValidationError)
      assert.equal(error.field, field)
    }
    assert.lengthOf(server.requests, 0)
  })
})

test.group('Client | API key', () => {
  test('format and environment are checked at construction', ({ assert }) => {
    assert.throws(
      () => new PayoutsClient({ apiKey: 'sk_test_tooshort', baseUrl: 'http://x.test' }),
      PayoutsConfigError as any
    )
    assert.throws(
      () => new PayoutsClient({ apiKey: KEY, baseUrl: 'http://x.test', environment: 'production' }),
      /sandbox key \(sk_test_\) but environment is "production"/
    )
    const live = new PayoutsClient({
      apiKey: `sk_live_${'x'.repeat(43)}`,
      baseUrl: 'http://x.test',
    })
    assert.equal(live.environment, 'production')
  })

  test('the key never appears in logs, errors, JSON or inspect output', async ({
    assert,
    cleanup,
  }) => {
    const logged: string[] = []
    const logger = {
      debug: (obj: object, msg?: string) => logged.push(JSON.stringify(obj) + String(msg)),
      warn: (obj: object, msg?: string) => logged.push(JSON.stringify(obj) + String(msg)),
    }
    const { client, server } = await scriptedClient(
      cleanup,
      [
        { status: 503, body: { error: 'down' } },
        { status: 401, body: { code: 'UNAUTHORIZED', error: 'invalid key' } },
      ],
      { logger }
    )
    const error = await client.execute(executeBodies.fiat_to_fiat).catch((e) => e)
    assert.instanceOf(error, UnauthorizedError)
    assert.equal(server.requests[0].headers.authorization, `Bearer ${KEY}`)
    assert.isAbove(logged.length, 0)
    const surfaces = [
      ...logged,
      error.message,
      error.stack,
      JSON.stringify(error),
      inspect(error, { depth: 10, showHidden: true }),
      JSON.stringify(client),
      inspect(client, { depth: 10, showHidden: true }),
      String(client),
    ]
    const secret = KEY.slice('sk_test_'.length)
    for (const surface of surfaces) assert.notInclude(String(surface), secret)
    const badKey = `sk_test_${'s'.repeat(42)}`
    let configError: unknown
    try {
      new PayoutsClient({ apiKey: badKey, baseUrl: 'http://x.test' })
    } catch (e) {
      configError = e
    }
    assert.instanceOf(configError, PayoutsConfigError)
    assert.notInclude(String(configError) + inspect(configError), badKey)
  })
})
