import { test } from '@japa/runner'
import { PayoutsTimeoutError, RateLimiter } from '../../src/client/main.ts'
import { COARSE_TIMER_MIN_MS } from '../../src/client/transport.ts'
import { startScriptedServer, type Reply } from '../helpers/scripted_server.ts'
import { executeBodies, executeData, scriptedClient, testClient } from './fixtures.ts'

const ok: Reply = { status: 200, body: { success: true, data: executeData.fiat_to_fiat } }
const httpDate = (secondsFromNow: number) =>
  new Date(Date.now() + secondsFromNow * 1000).toUTCString()

/**
 * Retry classification (spec, Errors rules 2 and 3). `waits` are the recorded sleeps with
 * baseDelayMs = 10 and a jitter source fixed at 0.5 (no jitter) unless stated.
 */
const classification: Array<{
  name: string
  replies: Reply[]
  attempts: number
  waits: number[]
  fails?: boolean
}> = [
  { name: '500 retries', replies: [{ status: 500 }, ok], attempts: 2, waits: [10] },
  { name: '502 retries', replies: [{ status: 502 }, ok], attempts: 2, waits: [10] },
  { name: '503 retries', replies: [{ status: 503 }, ok], attempts: 2, waits: [10] },
  { name: '504 retries', replies: [{ status: 504 }, ok], attempts: 2, waits: [10] },
  { name: 'connection reset retries', replies: ['reset', ok], attempts: 2, waits: [10] },
  { name: 'timeout retries', replies: ['hang', ok], attempts: 2, waits: [10] },
  {
    name: '5xx backs off 1, 2, 4, 8, 16 x base and gives up after the 5th retry',
    replies: [{ status: 500 }],
    attempts: 6,
    waits: [10, 20, 40, 80, 160],
    fails: true,
  },
  {
    name: '429 waits Retry-After in seconds',
    replies: [
      { status: 429, body: { error: 'rate limit exceeded' }, headers: { 'retry-after': '3' } },
      ok,
    ],
    attempts: 2,
    waits: [3000],
  },
  {
    name: '429 waits Retry-After given as an HTTP date',
    replies: [
      {
        status: 429,
        body: { error: 'rate limit exceeded' },
        headers: { 'retry-after': 'HTTP_DATE_30' },
      },
      ok,
    ],
    attempts: 2,
    waits: [30000],
  },
  {
    name: '429 Retry-After above the ceiling ends the call, never a shorter wait',
    replies: [
      { status: 429, body: { error: 'rate limit exceeded' }, headers: { 'retry-after': '86400' } },
      ok,
    ],
    attempts: 1,
    waits: [],
    fails: true,
  },
  {
    name: '409 IDEMPOTENCY_REQUEST_IN_FLIGHT waits Retry-After',
    replies: [
      {
        status: 409,
        body: { code: 'IDEMPOTENCY_REQUEST_IN_FLIGHT', error: 'in flight' },
        headers: { 'retry-after': '2' },
      },
      ok,
    ],
    attempts: 2,
    waits: [2000],
  },
  {
    name: '400 is never retried',
    replies: [{ status: 400, body: { code: 'INVALID_PARAMETER', error: 'x' } }],
    attempts: 1,
    waits: [],
    fails: true,
  },
  {
    name: '401 is never retried',
    replies: [{ status: 401, body: { code: 'UNAUTHORIZED', error: 'x' } }],
    attempts: 1,
    waits: [],
    fails: true,
  },
  {
    name: '403 is never retried',
    replies: [{ status: 403, body: { code: 'FORBIDDEN', error: 'x' } }],
    attempts: 1,
    waits: [],
    fails: true,
  },
  {
    name: '404 is never retried',
    replies: [{ status: 404, body: { error: 'x' } }],
    attempts: 1,
    waits: [],
    fails: true,
  },
  {
    name: '409 IDEMPOTENCY_KEY_REUSED is never retried',
    replies: [{ status: 409, body: { code: 'IDEMPOTENCY_KEY_REUSED', error: 'x' } }],
    attempts: 1,
    waits: [],
    fails: true,
  },
  {
    name: '422 is never retried',
    replies: [{ status: 422, body: { error: 'x' } }],
    attempts: 1,
    waits: [],
    fails: true,
  },
]

test.group('Client | retry classification', () => {
  test('{name}')
    .with(classification)
    .run(async ({ assert, cleanup }, row) => {
      // The HTTP date is made when the request arrives, not when the table was built.
      const { client, server, sleeps } = await scriptedClient(
        cleanup,
        () => {
          const index = Math.min(server.requests.length - 1, row.replies.length - 1)
          const reply = row.replies[index]
          if (typeof reply === 'object' && reply.headers?.['retry-after'] === 'HTTP_DATE_30') {
            return { ...reply, headers: { 'retry-after': httpDate(30) } }
          }
          return reply
        },
        {
          retry: { baseDelayMs: 10 },
          timeoutMs: 300,
        }
      )
      const outcome = await client.execute(executeBodies.fiat_to_fiat).then(
        () => 'ok',
        () => 'failed'
      )
      assert.equal(outcome, row.fails ? 'failed' : 'ok')
      assert.lengthOf(server.requests, row.attempts)
      // An HTTP date has whole seconds: the wait may be up to 2 s shorter than asked.
      const waits = sleeps.map((ms) =>
        row.name.includes('HTTP date') && ms >= 28_000 && ms <= 30_000 ? 30_000 : ms
      )
      assert.deepEqual(waits, row.waits)
      const keys = new Set(server.requests.map((req) => req.headers['idempotency-key']))
      assert.equal(keys.size, 1, 'the same Idempotency-Key on every attempt')
      assert.isString([...keys][0])
    })

  test('jitter stays within ±20% of each backoff step', async ({ assert, cleanup }) => {
    let flip = 0
    const { client, sleeps } = await scriptedClient(cleanup, [{ status: 500 }], {
      retry: { baseDelayMs: 1000 },
      random: () => (flip++ % 2 === 0 ? 0 : 0.999999),
    })
    await client.getPayout('po_1').catch(() => {})
    assert.deepEqual(sleeps, [800, 2400, 3200, 9600, 12800])
  })

  test('rotate-secret is not repeated after a 5xx (not idempotent)', async ({
    assert,
    cleanup,
  }) => {
    const { client, server } = await scriptedClient(cleanup, [
      { status: 502, body: { error: 'bad gateway' } },
    ])
    const error = await client.webhooks.subscriptions.rotateSecret('sub_1').catch((e) => e)
    assert.equal(error.status, 502)
    assert.isTrue(error.outcomeUnknown)
    assert.lengthOf(server.requests, 1)
  })

  test('rotate-secret is not repeated after a reset; a refused connection is', async ({
    assert,
    cleanup,
  }) => {
    const { client, server, sleeps } = await scriptedClient(cleanup, ['reset'])
    const error = await client.webhooks.subscriptions.rotateSecret('sub_1').catch((e) => e)
    assert.equal(error.code, 'NETWORK_ERROR')
    assert.isTrue(error.outcomeUnknown)
    assert.lengthOf(server.requests, 1)

    const refused = testClient('http://127.0.0.1:9', { retry: { maxRetries: 2, baseDelayMs: 1 } })
    cleanup(() => refused.client.close())
    const refusedError = await refused.client.webhooks.subscriptions
      .rotateSecret('sub_1')
      .catch((e) => e)
    assert.equal(refusedError.code, 'NETWORK_ERROR')
    assert.isFalse(refusedError.outcomeUnknown)
    assert.lengthOf(refused.sleeps, 2)
    assert.lengthOf(sleeps, 0)
  })

  test('a call whose first attempt may have arrived stays outcome-unknown when a retry is refused', async ({
    assert,
    cleanup,
  }) => {
    // The first execute reaches the server and the connection drops before the answer; the
    // server is then gone, so every retry is refused before it is sent.
    const server = await startScriptedServer(['reset'])
    cleanup(() => server.close())
    let closed = false
    const { client } = testClient(server.baseUrl, {
      retry: { maxRetries: 2, baseDelayMs: 1, jitter: 0 },
      sleep: async () => {
        if (!closed) await server.close()
        closed = true
      },
    })
    cleanup(() => client.close())
    const error = await client.execute(executeBodies.fiat_to_fiat).catch((e) => e)
    assert.lengthOf(server.requests, 1)
    assert.equal(error.code, 'NETWORK_ERROR')
    assert.include(error.message, 'ECONNREFUSED')
    // The request that arrived may have created the payout: never "not sent".
    assert.isTrue(error.outcomeUnknown)
  })

  test('a caller abort is not retried', async ({ assert, cleanup }) => {
    const { client, server } = await scriptedClient(cleanup, ['hang'], { timeoutMs: 5000 })
    const controller = new AbortController()
    setTimeout(() => controller.abort(), 50)
    const error = await client
      .execute(executeBodies.fiat_to_fiat, { signal: controller.signal })
      .catch((e) => e)
    assert.equal(error.code, 'ABORTED')
    assert.lengthOf(server.requests, 1)
  })

  test('a caller abort during the wait before a retry ends the call ABORTED, not sent again', async ({
    assert,
    cleanup,
  }) => {
    const controller = new AbortController()
    const { client, server } = await scriptedClient(cleanup, [{ status: 503 }], {
      retry: { maxRetries: 3, baseDelayMs: 1, jitter: 0 },
      sleep: async () => controller.abort(),
    })
    const error = await client.getPayout('po_1', { signal: controller.signal }).catch((e) => e)
    assert.equal(error.name, 'PayoutsAbortedError')
    assert.equal(error.code, 'ABORTED')
    assert.lengthOf(server.requests, 1)
  })

  test("long timeouts run on undici's timers: silent headers and a stalled body both time out", async ({
    assert,
    cleanup,
  }) => {
    const silent = await startScriptedServer(['hang'])
    const stalled = await startScriptedServer(['stall-body'])
    const options = { timeoutMs: COARSE_TIMER_MIN_MS, retry: { maxRetries: 0 } }
    const a = testClient(silent.baseUrl, options).client
    const b = testClient(stalled.baseUrl, options).client
    cleanup(async () => {
      await Promise.all([a.close(), b.close(), silent.close(), stalled.close()])
    })
    const started = Date.now()
    const [headers, body] = await Promise.all([
      a.getPayout('po_1').catch((e) => e),
      b.getPayout('po_1').catch((e) => e),
    ])
    for (const error of [headers, body]) {
      assert.instanceOf(error, PayoutsTimeoutError)
      assert.isTrue(error.outcomeUnknown)
    }
    // Coarse timers may fire late, never much early.
    assert.isAtLeast(Date.now() - started, COARSE_TIMER_MIN_MS - 1000)
    assert.lengthOf(silent.requests, 1)
    assert.lengthOf(stalled.requests, 1)
  })
})

test.group('Client | rate limiter', () => {
  test('a burst over the execute bucket waits instead of sending', async ({ assert }) => {
    let now = 0
    const waits: number[] = []
    const limiter = new RateLimiter(
      {},
      () => now,
      async (ms) => {
        waits.push(ms)
        now += ms
      }
    )
    for (let i = 0; i < 12; i++) await limiter.acquire('execute')
    // Burst 10 passes at once; the 11th and 12th wait one refill each (30/min = 2 s).
    assert.deepEqual(waits, [2000, 2000])
    for (let i = 0; i < 40; i++) await limiter.acquire('quotes')
    assert.lengthOf(waits, 2, 'quotes has its own bucket of 40')
  })

  test('the client waits on its limiter before sending', async ({ assert, cleanup }) => {
    const { client, server } = await scriptedClient(
      cleanup,
      [{ status: 200, body: { id: 'po_1', status: 'pending' } }],
      {
        rateLimiter: { default: { perMinute: 600, burst: 2 } },
      }
    )
    const started = performance.now()
    await Promise.all([client.getPayout('a'), client.getPayout('b'), client.getPayout('c')])
    assert.lengthOf(server.requests, 3)
    assert.isAtLeast(performance.now() - started, 90, 'the third call waited for a refill (100 ms)')
  })
})
