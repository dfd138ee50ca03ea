import diagnostics from 'node:diagnostics_channel'
import type { Logger } from '@adonisjs/core/logger'
import { test } from '@japa/runner'
import {
  NotFoundError,
  PayoutsApiError,
  type ClientRequestEvent,
  type ClientResponseEvent,
  type PayoutsClient,
} from '../../src/client/main.ts'
import type { PayoutsConfig } from '../../src/define_config.ts'
import type { PayoutsEmulator } from '../../src/emulator/main.ts'
import { createClient } from '../../src/service/client_factory.ts'
import { CHANNEL_NAMES, type ClientRequestContext } from '../../src/tracing/channels.ts'
import { fiatBody, startEmulator, testClient } from '../emulator/helpers.ts'

type Cleanup = (fn: () => Promise<void> | void) => void

const UUID = /[\da-f]{8}-[\da-f]{4}-[\da-f]{4}-[\da-f]{4}-[\da-f]{12}/i

/** The request and response events of a client, in order. */
function recordHooks(client: PayoutsClient) {
  const requests: ClientRequestEvent[] = []
  const responses: ClientResponseEvent[] = []
  client.on('request', (event) => requests.push(event))
  client.on('response', (event) => responses.push(event))
  return { requests, responses }
}

interface Published {
  kind: 'start' | 'end' | 'asyncStart' | 'asyncEnd' | 'error'
  context: ClientRequestContext & { error?: unknown; result?: unknown }
  /** The context as JSON when it was published (it is filled as the call goes). */
  json: string
}

/** Subscribes to `svc-payouts.client.request` by its name, as an APM agent would. */
function recordTraces(cleanup: Cleanup) {
  const channel = diagnostics.tracingChannel<ClientRequestContext>(CHANNEL_NAMES.clientRequest)
  const published: Published[] = []
  const on = (kind: Published['kind']) => (message: unknown) => {
    const context = message as Published['context']
    published.push({ kind, context, json: JSON.stringify(context) })
  }
  const handlers = {
    start: on('start'),
    end: on('end'),
    asyncStart: on('asyncStart'),
    asyncEnd: on('asyncEnd'),
    error: on('error'),
  }
  channel.subscribe(handlers)
  cleanup(() => channel.unsubscribe(handlers))
  return { channel, published }
}

/** A client whose retries do not wait; faults are switched off at the `clearAfter`th wait. */
function retryingClient(
  cleanup: Cleanup,
  emu: PayoutsEmulator,
  clearAfter: number,
  options: Parameters<typeof testClient>[2] = {}
) {
  let waits = 0
  return testClient(cleanup, emu, {
    timeoutMs: 2000,
    retry: { baseDelayMs: 1 },
    random: () => 0.5,
    sleep: async () => {
      if (++waits === clearAfter) emu.admin.setFaults({})
    },
    ...options,
  })
}

test.group('Client | request hooks and the client.request trace', () => {
  test('hooks fire per attempt with the endpoint and its route template, never the path', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const client = testClient(cleanup, emu)
    const { requests, responses } = recordHooks(client)

    const payout = await client.execute(fiatBody(emu))
    const read = await client.getPayout(payout.payoutId)
    assert.equal(read.payoutId, payout.payoutId)
    const missing = await client.getPayout('po_missing_one').catch((error) => error)
    assert.instanceOf(missing, NotFoundError)

    assert.deepEqual(requests, [
      { endpoint: 'execute', method: 'POST', route: '/rfq/execute', attempt: 1, idempotent: true },
      {
        endpoint: 'getPayout',
        method: 'GET',
        route: '/payouts/{id}',
        attempt: 1,
        idempotent: true,
      },
      {
        endpoint: 'getPayout',
        method: 'GET',
        route: '/payouts/{id}',
        attempt: 1,
        idempotent: true,
      },
    ])
    assert.lengthOf(responses, 3)
    for (const event of responses) {
      assert.isNumber(event.durationMs)
      assert.isAtLeast(event.durationMs, 0)
    }
    const [executed, found, notFound] = responses.map(({ durationMs: _, ...rest }) => rest)
    assert.deepEqual(executed, {
      endpoint: 'execute',
      method: 'POST',
      route: '/rfq/execute',
      attempt: 1,
      status: 200,
      requestId: null,
      willRetry: false,
    })
    assert.deepEqual(found, {
      endpoint: 'getPayout',
      method: 'GET',
      route: '/payouts/{id}',
      attempt: 1,
      status: 200,
      requestId: null,
      willRetry: false,
    })
    assert.deepEqual(notFound, {
      endpoint: 'getPayout',
      method: 'GET',
      route: '/payouts/{id}',
      attempt: 1,
      status: 404,
      requestId: null,
      code: 'NOT_FOUND',
      willRetry: false,
    })

    // No event names the payout: not its UUID, not the id that was looked up.
    const json = JSON.stringify([requests, responses])
    assert.notMatch(json, UUID)
    assert.notInclude(json, payout.payoutId)
    assert.notInclude(json, 'po_missing_one')
  })

  test('a retried 5xx shows attempts 1..n, willRetry until the one that answers', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const client = retryingClient(cleanup, emu, 2)
    const payout = await client.execute(fiatBody(emu))
    const { requests, responses } = recordHooks(client)
    const { published } = recordTraces(cleanup)

    emu.admin.setFaults({ errorRate: 1 }, 7)
    await client.getPayout(payout.payoutId)

    assert.deepEqual(
      requests.map((event) => event.attempt),
      [1, 2, 3]
    )
    assert.deepEqual(
      responses.map(({ attempt, willRetry, code }) => ({ attempt, willRetry, code })),
      [
        { attempt: 1, willRetry: true, code: 'SERVER_ERROR' },
        { attempt: 2, willRetry: true, code: 'SERVER_ERROR' },
        { attempt: 3, willRetry: false, code: undefined },
      ]
    )
    const statuses = responses.map((event) => event.status)
    assert.includeMembers([500, 502, 503], statuses.slice(0, 2))
    assert.equal(statuses[2], 200)
    for (const event of responses) assert.equal(event.route, '/payouts/{id}')

    // One trace for the call, all three attempts inside it, its context filled as they went.
    assert.deepEqual(
      published.map((p) => p.kind),
      ['start', 'end', 'asyncStart', 'asyncEnd']
    )
    assert.deepEqual(JSON.parse(published[0].json), {
      endpoint: 'getPayout',
      method: 'GET',
      route: '/payouts/{id}',
      attempts: 0,
    })
    assert.deepEqual(JSON.parse(published[3].json), {
      endpoint: 'getPayout',
      method: 'GET',
      route: '/payouts/{id}',
      attempts: 3,
      status: 200,
      requestId: null,
      retryReason: String(statuses[1]),
    })
    // tracePromise's `result` is not the answer: no body reaches a subscriber.
    assert.isUndefined(published[3].context.result)
    assert.notInclude(published.map((p) => p.json).join('\n'), payout.payoutId)
  })

  test('a 429 is retried after Retry-After; nothing secret in any hook or trace', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const client = retryingClient(cleanup, emu, 1)
    const { requests, responses } = recordHooks(client)
    const { published } = recordTraces(cleanup)
    const idempotencyKey = 'hooks-spec-idem-key-4242'
    const body = fiatBody(emu, { amount: 987.65 })

    emu.admin.setFaults({ rateLimitStormRate: 1 })
    const payout = await client.execute(body, { idempotencyKey })

    assert.deepEqual(
      requests.map(({ attempt, idempotent }) => ({ attempt, idempotent })),
      [
        { attempt: 1, idempotent: true },
        { attempt: 2, idempotent: true },
      ]
    )
    assert.deepEqual(
      responses.map(({ attempt, status, code, retryAfterMs, willRetry }) => ({
        attempt,
        status,
        code,
        retryAfterMs,
        willRetry,
      })),
      [
        { attempt: 1, status: 429, code: 'RATE_LIMITED', retryAfterMs: 1000, willRetry: true },
        { attempt: 2, status: 200, code: undefined, retryAfterMs: undefined, willRetry: false },
      ]
    )
    const last = published.find((p) => p.kind === 'asyncEnd')!
    assert.deepInclude(JSON.parse(last.json), {
      endpoint: 'execute',
      route: '/rfq/execute',
      attempts: 2,
      status: 200,
      retryReason: '429',
    })

    // Every hook payload and every published context, as JSON.
    const everything = [
      JSON.stringify(requests),
      JSON.stringify(responses),
      ...published.map((p) => p.json),
      ...published.map((p) => JSON.stringify(p.context)),
    ].join('\n')
    for (const secret of [
      emu.apiKey,
      'Bearer',
      idempotencyKey,
      String(body.recipientId),
      String(body.userPaymentMethodId),
      '987.65',
      payout.payoutId,
    ]) {
      assert.notInclude(everything, secret)
    }
  })

  test('a call that fails ends its trace with the error; the last response says no retry', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const client = retryingClient(cleanup, emu, 0, { retry: { baseDelayMs: 1, maxRetries: 2 } })
    const { responses } = recordHooks(client)
    const { published } = recordTraces(cleanup)

    emu.admin.setFaults({ errorRate: 1 })
    const error = await client.getCoverage().catch((caught) => caught)
    assert.instanceOf(error, PayoutsApiError)

    assert.deepEqual(
      responses.map(({ attempt, willRetry }) => ({ attempt, willRetry })),
      [
        { attempt: 1, willRetry: true },
        { attempt: 2, willRetry: true },
        { attempt: 3, willRetry: false },
      ]
    )
    assert.deepEqual(
      published.map((p) => p.kind),
      ['start', 'end', 'error', 'asyncStart', 'asyncEnd']
    )
    const failed = published.find((p) => p.kind === 'error')!
    assert.strictEqual(failed.context.error, error)
    assert.deepInclude(failed.context, {
      endpoint: 'getCoverage',
      route: '/config/coverage',
      attempts: 3,
      status: error.status,
    })
    assert.oneOf(failed.context.retryReason, ['500', '502', '503'])

    // A 4xx is not retried: one attempt, the trace ends with its error.
    published.length = 0
    emu.admin.setFaults({})
    const missing = await client.getPayout('po_not_there').catch((caught) => caught)
    assert.instanceOf(missing, NotFoundError)
    const notFound = published.find((p) => p.kind === 'error')!
    assert.deepInclude(notFound.context, { attempts: 1, status: 404 })
    assert.isUndefined(notFound.context.retryReason)
  })

  test('a listener that throws does not fail the call; it is logged without its error', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const warnings: Array<{ obj: object; msg?: string }> = []
    const client = testClient(cleanup, emu, {
      logger: { debug: () => {}, warn: (obj, msg) => warnings.push({ obj, msg }) },
    })
    client.on('request', () => {
      throw new Error('listener secret sk_test_leak')
    })
    client.on('response', async () => {
      throw new Error('async listener secret sk_test_leak')
    })
    const { requests, responses } = recordHooks(client)

    const coverage = await client.getCoverage()
    assert.isObject(coverage)
    await new Promise((resolve) => setImmediate(resolve))

    // The listeners added after the throwing ones still ran.
    assert.lengthOf(requests, 1)
    assert.lengthOf(responses, 1)
    assert.deepEqual(
      warnings.map((w) => w.obj),
      [
        { hook: 'request', endpoint: 'getCoverage', attempt: 1 },
        { hook: 'response', endpoint: 'getCoverage', attempt: 1 },
      ]
    )
    assert.notInclude(JSON.stringify(warnings), 'sk_test_leak')
  })

  test('with no listener and no subscriber the call works; off removes a listener', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const client = testClient(cleanup, emu)
    const channel = diagnostics.tracingChannel(CHANNEL_NAMES.clientRequest)
    assert.isFalse(channel.hasSubscribers)

    const payout = await client.execute(fiatBody(emu))
    assert.equal((await client.getPayout(payout.payoutId)).payoutId, payout.payoutId)

    const seen: ClientRequestEvent[] = []
    const listener = (event: ClientRequestEvent) => seen.push(event)
    assert.strictEqual(client.on('request', listener), client)
    await client.getCoverage()
    client.off('request', listener)
    await client.getCoverage()
    assert.lengthOf(seen, 1)

    // A mistyped hook name is a programming error, told at once.
    assert.throws(() => client.on('respnse' as 'response', () => {}), /unknown client hook/)
  })

  test("the service's client, created from the config, has the hooks too", async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const logger = { debug: () => {}, warn: () => {} } as unknown as Logger
    const client = createClient(
      {
        apiKey: emu.apiKey,
        baseUrl: emu.baseUrl,
        environment: 'sandbox',
        timeoutMs: 2000,
        retry: { maxRetries: 0 },
        clientRateLimiter: false,
        allowInsecureLoopbackWebhooks: true,
      } as unknown as PayoutsConfig,
      logger
    )
    cleanup(() => client.close())
    const { requests, responses } = recordHooks(client)
    await client.getCoverage()
    assert.deepEqual(requests, [
      {
        endpoint: 'getCoverage',
        method: 'GET',
        route: '/config/coverage',
        attempt: 1,
        idempotent: true,
      },
    ])
    assert.equal(responses[0].status, 200)
  })
})
