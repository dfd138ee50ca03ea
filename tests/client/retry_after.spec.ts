import { test } from '@japa/runner'
import {
  IdempotencyRequestInFlightError,
  parseRetryAfter,
  PayoutsApiError,
  RateLimitedError,
} from '../../src/client/main.ts'
import { type RecordedRequest, type Reply } from '../helpers/scripted_server.ts'
import { executeBodies, executeData, scriptedClient } from './fixtures.ts'

/** The service's clock in these tests: a whole second, sent as the answer's Date. */
const T0 = Date.UTC(2030, 0, 15, 12, 0, 0)
const DATE = new Date(T0).toUTCString()
const at = (seconds: number) => new Date(T0 + seconds * 1000).toUTCString()

const ok = (headers: Record<string, string> = {}): Reply => ({
  status: 200,
  body: { success: true, data: executeData.fiat_to_fiat },
  headers: { date: DATE, ...headers },
})
const tooMany = (retryAfter?: string, headers: Record<string, string> = {}): Reply => ({
  status: 429,
  body: { error: 'rate limit exceeded' },
  headers: {
    date: DATE,
    ...(retryAfter === undefined ? {} : { 'retry-after': retryAfter }),
    ...headers,
  },
})

/**
 * What a 429's Retry-After makes the client wait (default options: 5 retries, backoff
 * 1, 2, 4, 8, 16 s with the jitter source fixed at its middle, ceiling 120 s).
 */
const retryAfterCases: Array<{
  name: string
  replies: Reply[]
  waits: number[]
  attempts: number
  retryAfterMs?: number
}> = [
  { name: 'integer seconds', replies: [tooMany('2'), ok()], waits: [2000], attempts: 2 },
  { name: 'decimal seconds', replies: [tooMany('1.5'), ok()], waits: [1500], attempts: 2 },
  { name: 'a fraction of a second', replies: [tooMany('0.25'), ok()], waits: [250], attempts: 2 },
  {
    name: 'an HTTP date, read against the answer’s Date',
    replies: [tooMany(at(30)), ok()],
    waits: [30_000],
    attempts: 2,
  },
  {
    name: 'an obsolete HTTP date (asctime, always GMT)',
    replies: [tooMany('Tue Jan 15 12:00:07 2030'), ok()],
    waits: [7000],
    attempts: 2,
  },
  { name: 'negative: the backoff', replies: [tooMany('-5'), ok()], waits: [1000], attempts: 2 },
  { name: 'missing: the backoff', replies: [tooMany(), ok()], waits: [1000], attempts: 2 },
  { name: 'garbage: the backoff', replies: [tooMany('soon'), ok()], waits: [1000], attempts: 2 },
  { name: 'exponent: the backoff', replies: [tooMany('1e3'), ok()], waits: [1000], attempts: 2 },
  {
    name: 'a date already past: the backoff',
    replies: [tooMany(at(-10)), ok()],
    waits: [1000],
    attempts: 2,
  },
  {
    name: 'unusable every time: the whole documented backoff, then the error',
    replies: [tooMany('-1')],
    waits: [1000, 2000, 4000, 8000, 16_000],
    attempts: 6,
  },
  {
    name: '120 s is waited in full',
    replies: [tooMany('120'), ok()],
    waits: [120_000],
    attempts: 2,
  },
  {
    name: 'above the ceiling: the typed error, nothing shorter',
    replies: [tooMany('121'), ok()],
    waits: [],
    attempts: 1,
    retryAfterMs: 121_000,
  },
  {
    name: 'a day as a date: the typed error',
    replies: [tooMany(at(86_400)), ok()],
    waits: [],
    attempts: 1,
    retryAfterMs: 86_400_000,
  },
]

test.group('Client | Retry-After', () => {
  test('429 with {name}')
    .with(retryAfterCases)
    .run(async ({ assert, cleanup }, row) => {
      const { client, server, sleeps } = await scriptedClient(cleanup, row.replies)
      const outcome = await client.execute(executeBodies.fiat_to_fiat).catch((e) => e)
      assert.deepEqual(sleeps, row.waits)
      assert.lengthOf(server.requests, row.attempts)
      if (row.retryAfterMs !== undefined) {
        assert.instanceOf(outcome, RateLimitedError)
        assert.equal(outcome.status, 429)
        assert.equal(outcome.retryAfterMs, row.retryAfterMs)
        assert.equal(outcome.toJSON().retryAfterMs, row.retryAfterMs)
      } else if (row.attempts === 6) {
        assert.instanceOf(outcome, RateLimitedError)
      } else {
        assert.notInstanceOf(outcome, Error)
      }
    })

  test('the ceiling is an option: retry.maxRetryAfterMs', async ({ assert, cleanup }) => {
    const { client, server, sleeps } = await scriptedClient(
      cleanup,
      [tooMany('5'), tooMany('6'), ok()],
      { retry: { maxRetryAfterMs: 5000 } }
    )
    const error = await client.execute(executeBodies.fiat_to_fiat).catch((e) => e)
    assert.deepEqual(sleeps, [5000])
    assert.lengthOf(server.requests, 2)
    assert.instanceOf(error, RateLimitedError)
    assert.equal(error.retryAfterMs, 6000)
  })

  test('409 IDEMPOTENCY_REQUEST_IN_FLIGHT reads Retry-After the same way', async ({
    assert,
    cleanup,
  }) => {
    const inFlight = (retryAfter: string): Reply => ({
      status: 409,
      body: { code: 'IDEMPOTENCY_REQUEST_IN_FLIGHT', error: 'in flight' },
      headers: { 'retry-after': retryAfter },
    })
    const { client, server, sleeps } = await scriptedClient(cleanup, [
      inFlight('1.5'),
      inFlight('-5'),
      inFlight('600'),
    ])
    const error = await client.execute(executeBodies.fiat_to_fiat).catch((e) => e)
    // 1.5 s as said; -5 is unusable, so the second backoff step; 600 s is above the ceiling.
    assert.deepEqual(sleeps, [1500, 2000])
    assert.lengthOf(server.requests, 3)
    assert.instanceOf(error, IdempotencyRequestInFlightError)
    assert.equal(error.retryAfterMs, 600_000)
  })

  test('parseRetryAfter: seconds (integer or decimal) and HTTP dates, nothing else', ({
    assert,
  }) => {
    assert.equal(parseRetryAfter('3', T0), 3)
    assert.equal(parseRetryAfter(' 1.5 ', T0), 1.5)
    assert.equal(parseRetryAfter('0', T0), 0)
    assert.equal(parseRetryAfter(at(90), T0), 90)
    assert.equal(parseRetryAfter(['2', '9'], T0), 2)
    for (const unusable of ['-5', '-0.5', '1.5.2', '.5', '1e3', 'Infinity', 'NaN', 'soon', '']) {
      assert.isNull(parseRetryAfter(unusable, T0), unusable)
    }
    assert.isNull(parseRetryAfter(at(0), T0), 'a date that is not ahead')
    assert.isNull(parseRetryAfter(undefined, T0))
  })
})

/**
 * X-RateLimit-* on every answer (spec, Limits). The client runs on an injected clock that
 * its injected sleep moves forward (unless `advance` is false), so "waited until the
 * reset" is read off that clock; each sleep also records how many requests had arrived.
 */
function fakeTime(start = T0, advance = true) {
  const time = {
    now: start,
    sleeps: [] as number[],
    sentAtSleep: [] as number[],
    sent: () => 0,
  }
  const options = {
    now: () => time.now,
    sleep: async (ms: number) => {
      time.sleeps.push(ms)
      time.sentAtSleep.push(time.sent())
      if (advance) time.now += ms
    },
  }
  return { time, options: options as Record<string, unknown> }
}

async function clockedServer(
  cleanup: (fn: () => Promise<void>) => void,
  replies: Reply[] | ((req: RecordedRequest) => Reply),
  time = fakeTime()
) {
  const { client, server } = await scriptedClient(cleanup, replies, time.options)
  time.time.sent = () => server.requests.length
  return { server, client, time: time.time }
}

const exhausted = (resetInSeconds: number) =>
  ok({
    'x-ratelimit-limit': '10',
    'x-ratelimit-remaining': '0',
    'x-ratelimit-reset': String(T0 / 1000 + resetInSeconds),
  })
const payout = { id: 'po_1', status: 'pending' }

test.group('Client | X-RateLimit headers', () => {
  test('after Remaining 0 the next request of that family waits until Reset', async ({
    assert,
    cleanup,
  }) => {
    const arrivals: number[] = []
    const fake = fakeTime()
    const { client, time } = await clockedServer(
      cleanup,
      () => {
        arrivals.push(fake.time.now)
        return arrivals.length === 1 ? exhausted(30) : ok({ 'x-ratelimit-remaining': '9' })
      },
      fake
    )
    await client.execute(executeBodies.fiat_to_fiat)
    await client.execute(executeBodies.fiat_to_fiat)
    await client.execute(executeBodies.fiat_to_fiat)
    assert.deepEqual(time.sleeps, [30_000])
    assert.deepEqual(time.sentAtSleep, [1], 'the wait came between the first and second request')
    assert.lengthOf(arrivals, 3)
    assert.isAtLeast(arrivals[1], T0 + 30_000, 'the second request left at the reset')
    assert.equal(client.rateLimit?.remaining, 9)
  })

  test('the families are apart: an exhausted execute does not hold back reads', async ({
    assert,
    cleanup,
  }) => {
    const { client, server, time } = await clockedServer(cleanup, (req) =>
      req.url.pathname === '/rfq/execute'
        ? exhausted(20)
        : { status: 200, body: payout, headers: { 'date': DATE, 'x-ratelimit-remaining': '5' } }
    )
    await client.execute(executeBodies.fiat_to_fiat)
    await client.getPayout('po_1')
    assert.deepEqual(time.sleeps, [], 'a read answered Remaining 5 for its own family')
    await client.execute(executeBodies.fiat_to_fiat)
    assert.deepEqual(time.sleeps, [20_000])
    assert.lengthOf(server.requests, 3)
  })

  test('a reset beyond the ceiling is the typed error, and nothing is sent', async ({
    assert,
    cleanup,
  }) => {
    const { client, server, time } = await clockedServer(cleanup, [exhausted(600)])
    await client.execute(executeBodies.fiat_to_fiat)
    const error = await client.execute(executeBodies.fiat_to_fiat).catch((e) => e)
    assert.instanceOf(error, RateLimitedError)
    assert.equal(error.retryAfterMs, 600_000)
    assert.isFalse(error.outcomeUnknown)
    assert.lengthOf(server.requests, 1, 'the second execute never left')
    assert.deepEqual(time.sleeps, [])
  })

  test('{name}')
    .with([
      {
        name: 'the reset is read against the answer’s Date, not this machine’s clock',
        replies: [exhausted(10), ok()],
        // This machine runs 5 minutes behind the service.
        clockStart: T0 - 300_000,
        executes: 2,
        sleeps: [10_000],
      },
      {
        name: 'a 429’s Retry-After, not the full refill, decides when its family goes again',
        replies: [
          tooMany('2', {
            'x-ratelimit-remaining': '0',
            'x-ratelimit-reset': String(T0 / 1000 + 20),
          }),
          ok({ 'x-ratelimit-remaining': '3' }),
        ],
        clockStart: T0,
        executes: 1,
        sleeps: [2000],
      },
    ])
    .run(async ({ assert, cleanup }, row) => {
      const { client, server, time } = await clockedServer(
        cleanup,
        row.replies,
        fakeTime(row.clockStart)
      )
      for (let i = 0; i < row.executes; i++) await client.execute(executeBodies.fiat_to_fiat)
      assert.deepEqual(time.sleeps, row.sleeps)
      assert.lengthOf(server.requests, 2)
    })

  test('concurrent callers of an exhausted family all wait for the reset', async ({
    assert,
    cleanup,
  }) => {
    const { client, server, time } = await clockedServer(
      cleanup,
      [exhausted(15), ok({ 'x-ratelimit-remaining': '8' })],
      fakeTime(T0, false)
    )
    await client.execute(executeBodies.fiat_to_fiat)
    await Promise.all([
      client.execute(executeBodies.fiat_to_fiat),
      client.execute(executeBodies.fiat_to_fiat),
    ])
    assert.deepEqual(time.sleeps, [15_000, 15_000])
    assert.deepEqual(time.sentAtSleep, [1, 1], 'both waited before either was sent')
    assert.lengthOf(server.requests, 3)
  })
})

test.group('Client | Retry-After errors', () => {
  test('every API error carries retryAfterMs (null when the service gave none)', ({ assert }) => {
    assert.isNull(new PayoutsApiError({ status: 500 }).retryAfterMs)
    assert.equal(new PayoutsApiError({ status: 429, retryAfter: 1.5 }).retryAfterMs, 1500)
  })
})
