/**
 * Fuzz of the client against a hostile or broken service on loopback: whatever comes back
 * (random statuses, malformed or truncated JSON, wrong content types, odd Retry-After,
 * broken HTTP framing), every call resolves with a validated value on a 2xx or rejects with
 * one of the package's typed errors, and nothing ends in an unhandled rejection.
 */
import { createServer as createNetServer, type Socket } from 'node:net'
import type { AddressInfo } from 'node:net'
import { test } from '@japa/runner'
import fc from 'fast-check'
import {
  errorFromResponse,
  PayoutsApiError,
  PayoutsError,
  PayoutsNetworkError,
  PayoutsTimeoutError,
} from '../../src/client/main.ts'
import type { PayoutsClient } from '../../src/client/main.ts'
import {
  deliveryBody,
  executeBodies,
  executeData,
  onrampQuoteBody,
  recipientBody,
  stableQuoteBody,
  subscriptionBody,
  PAYOUT,
  QUOTE,
  RECIPIENT,
  testClient,
} from '../client/fixtures.ts'
import { startScriptedServer, type Reply } from '../helpers/scripted_server.ts'

const SEED = 4242
/** Statuses that never carry a body, so framing after them is not read. */
const NO_BODY = [204, 304]
/** The client's default `retry.maxRetryAfterMs`. */
const MAX_RETRY_AFTER_MS = 120_000

const recipient = recipientBody
const subscription = subscriptionBody
const delivery = deliveryBody
const onrampQuote = onrampQuoteBody
const isObject = (r: any) => typeof r === 'object' && r !== null && !Array.isArray(r)
const hasId = (r: any) => isObject(r) && typeof r.id === 'string' && r.id.length > 0

/** Every client method, a documented 2xx body for it, and what its resolved value must be. */
const CALLS: Array<{
  name: string
  call: (client: PayoutsClient) => Promise<unknown>
  ok: unknown
  valid: (result: any) => boolean
}> = [
  {
    name: 'getCoverage',
    call: (c) => c.getCoverage(),
    ok: {
      fiat: [{ code: 'JPY', decimals: 0, onramp: true, offramp: true, rails: [] }],
      wallet: { tokens: ['USDC'], chains: [{ code: 'polygon', label: 'Polygon' }] },
    },
    valid: (r) => Array.isArray(r.fiat) && Array.isArray(r.wallet.chains),
  },
  {
    name: 'quotes.fiatToStablecoin',
    call: (c) =>
      c.quotes.fiatToStablecoin({ fromCurrency: 'USD', toCurrency: 'USDC', amount: 100 }),
    ok: [stableQuoteBody],
    valid: (r) => Array.isArray(r) && r.every((q) => q.protocol.startsWith('rt_')),
  },
  {
    name: 'quotes.onramp',
    call: (c) => c.quotes.onramp({ sourceCurrency: 'USD', amount: 100 }),
    ok: { success: true, data: [onrampQuote] },
    valid: (r) => Array.isArray(r) && r.every((q) => Number.isFinite(q.rate)),
  },
  {
    name: 'quotes.bestOnramp',
    call: (c) => c.quotes.bestOnramp({ sourceCurrency: 'USD', amount: 100 }),
    ok: { success: true, data: onrampQuote },
    valid: (r) => isObject(r) && r.protocol.startsWith('rt_'),
  },
  ...(['fiat_to_fiat', 'stablecoin_to_fiat', 'onramp'] as const).map((flow) => ({
    name: `execute (${flow})`,
    call: (c: PayoutsClient) => c.execute(executeBodies[flow]),
    ok: { success: true, data: executeData[flow] },
    valid: (r: any) =>
      r.flow === flow &&
      Number.isFinite(r.toAmount) &&
      (flow !== 'stablecoin_to_fiat' || typeof r.depositAmountAtomic === 'bigint'),
  })),
  {
    name: 'executeBatch',
    call: (c) => c.executeBatch({ items: [executeBodies.fiat_to_fiat] }),
    ok: { success: true, data: { results: [{ index: 0, success: true, data: { a: 1 } }] } },
    valid: (r) => Array.isArray(r) && r.every((row) => typeof row.success === 'boolean'),
  },
  {
    name: 'confirmEscrowDeposit',
    call: (c) => c.confirmEscrowDeposit({ quoteId: QUOTE, txHash: '0x' + 'e'.repeat(64) }),
    ok: { success: true },
    valid: (r) => r.success === true,
  },
  {
    name: 'getQuoteStatus',
    call: (c) => c.getQuoteStatus(QUOTE),
    ok: { quoteId: QUOTE, status: 'awaiting_escrow_deposit' },
    valid: (r) => typeof r.quoteId === 'string' && typeof r.status === 'string',
  },
  {
    name: 'getPayout',
    call: (c) => c.getPayout(PAYOUT),
    ok: { id: 'po_1', status: 'completed' },
    valid: (r) => hasId(r) && typeof r.status === 'string',
  },
  {
    name: 'listPayouts',
    call: (c) => c.listPayouts({ limit: 10 }),
    ok: { data: [{ id: 'po_1', status: 'pending' }], nextCursor: 'c2' },
    valid: (r) => Array.isArray(r.data) && r.data.every(hasId) && r.nextCursor !== undefined,
  },
  {
    name: 'recipients.create',
    call: (c) => c.recipients.create({ name: 'Ada' }),
    ok: recipient,
    valid: hasId,
  },
  {
    name: 'recipients.bulkCreate',
    call: (c) => c.recipients.bulkCreate({ recipients: [{ name: 'Ada' }] }),
    ok: { data: [recipient] },
    valid: (r) => Array.isArray(r) && r.every(hasId),
  },
  {
    name: 'recipients.list',
    call: (c) => c.recipients.list(),
    ok: [recipient],
    valid: (r) => Array.isArray(r.data) && r.data.every(hasId),
  },
  { name: 'recipients.get', call: (c) => c.recipients.get(RECIPIENT), ok: recipient, valid: hasId },
  {
    name: 'recipients.update',
    call: (c) => c.recipients.update(RECIPIENT, { name: 'Ada L.' }),
    ok: recipient,
    valid: hasId,
  },
  {
    name: 'recipients.delete',
    call: (c) => c.recipients.delete(RECIPIENT),
    ok: null,
    valid: (r) => r === undefined,
  },
  {
    name: 'webhooks.subscriptions.create',
    call: (c) =>
      c.webhooks.subscriptions.create({ url: subscription.url, events: ['payout.created'] }),
    ok: { ...subscription, secret: 'whsec_abc' },
    valid: (r) => hasId(r) && Array.isArray(r.events),
  },
  {
    name: 'webhooks.subscriptions.list',
    call: (c) => c.webhooks.subscriptions.list(),
    ok: { data: [subscription] },
    valid: (r) => Array.isArray(r) && r.every(hasId),
  },
  {
    name: 'webhooks.subscriptions.get',
    call: (c) => c.webhooks.subscriptions.get('sub_1'),
    ok: subscription,
    valid: hasId,
  },
  {
    name: 'webhooks.subscriptions.update',
    call: (c) => c.webhooks.subscriptions.update('sub_1', { active: false }),
    ok: subscription,
    valid: hasId,
  },
  {
    name: 'webhooks.subscriptions.delete',
    call: (c) => c.webhooks.subscriptions.delete('sub_1'),
    ok: null,
    valid: (r) => r === undefined,
  },
  {
    name: 'webhooks.subscriptions.rotateSecret',
    call: (c) => c.webhooks.subscriptions.rotateSecret('sub_1'),
    ok: { id: 'sub_1', secret: 'whsec_new' },
    valid: (r) => hasId(r) && r.secret.startsWith('whsec_'),
  },
  {
    name: 'webhooks.deliveries.list',
    call: (c) => c.webhooks.deliveries.list({ status: 'permanently_failed' }),
    ok: { data: [delivery] },
    valid: (r) => Array.isArray(r) && r.every(hasId),
  },
  {
    name: 'webhooks.deliveries.get',
    call: (c) => c.webhooks.deliveries.get('dlv_1'),
    ok: delivery,
    valid: hasId,
  },
  {
    name: 'webhooks.deliveries.replay',
    call: (c) => c.webhooks.deliveries.replay('dlv_1'),
    ok: { id: 'dlv_2', replayOf: 'dlv_1', status: 'pending' },
    valid: hasId,
  },
]

/** Codes the service sends, random ones, and names that live on Object.prototype. */
const codeArb = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      'INVALID_JSON',
      'INVALID_PARAMETER',
      'UNAUTHORIZED',
      'FORBIDDEN',
      'NOT_FOUND',
      'IDEMPOTENCY_KEY_REUSED',
      'IDEMPOTENCY_REQUEST_IN_FLIGHT',
      'MAX_ACTIVE_SUBSCRIPTIONS_EXCEEDED',
      'RATE_LIMITED',
      'ESCROW_CONFIRMATION_FAILED',
      'constructor',
      '__proto__',
      'toString',
      'hasOwnProperty',
      'valueOf',
      ''
    ),
  },
  { weight: 1, arbitrary: fc.string({ maxLength: 20 }) }
)

const errorBodyArb = fc
  .record(
    {
      code: fc.oneof({ weight: 3, arbitrary: codeArb }, { weight: 1, arbitrary: fc.jsonValue() }),
      error: fc.oneof(
        fc.constantFrom('environment_scope mismatch', 'escrow deposit confirmation failed'),
        fc.string(),
        fc.jsonValue()
      ),
      success: fc.constantFrom(false, true, 'false'),
      details: fc.oneof(fc.dictionary(fc.string(), fc.jsonValue()), fc.jsonValue()),
    },
    { requiredKeys: [] }
  )
  .map((v) => JSON.stringify(v))

type Path = Array<string | number>

/** Every path into a JSON value, so a mutation can reach any field. */
function pathsOf(value: unknown, prefix: Path = []): Path[] {
  const own: Path[] = [prefix]
  if (Array.isArray(value)) {
    return own.concat(value.flatMap((item, i) => pathsOf(item, [...prefix, i])))
  }
  if (value && typeof value === 'object') {
    return own.concat(
      Object.entries(value).flatMap(([key, item]) => pathsOf(item, [...prefix, key]))
    )
  }
  return own
}

/** Deletes, replaces or re-wraps one node of a documented body. */
function mutate(body: unknown, pick: number, op: string, replacement: unknown): unknown {
  const copy = structuredClone(body)
  const paths = pathsOf(copy)
  const path = paths[pick % paths.length]
  if (path.length === 0) {
    if (op === 'wrap') return { success: true, data: copy }
    if (op === 'unwrap' && copy && typeof copy === 'object' && 'data' in copy) return copy.data
    return replacement
  }
  const parent = path.slice(0, -1).reduce<any>((node, key) => node[key], copy)
  const key = path[path.length - 1]
  if (op === 'delete') {
    if (Array.isArray(parent)) parent.splice(Number(key), 1)
    else delete parent[key]
  } else if (op === 'wrap') {
    parent[key] = [parent[key]]
  } else {
    parent[key] = replacement
  }
  return copy
}

/** A printable header value (anything else would make Node's writeHead throw). */
const printable = (maxLength = 40) => fc.stringMatching(new RegExp(`^[ -~]{0,${maxLength}}$`))

const retryAfterArb = fc.oneof(
  fc.nat({ max: 100 }).map(String),
  fc.constantFrom('-1', '1.5', ' 3 ', '0', '9'.repeat(30), 'Infinity', 'NaN', '1e9'),
  fc.date().map((d) => (Number.isNaN(d.getTime()) ? 'Invalid Date' : d.toUTCString())),
  printable()
)

const statusArb = fc.oneof(
  { weight: 5, arbitrary: fc.constantFrom(200, 201, 202, 204) },
  { weight: 4, arbitrary: fc.constantFrom(400, 401, 403, 404, 409, 413, 422, 429) },
  { weight: 2, arbitrary: fc.constantFrom(500, 502, 503, 504) },
  { weight: 2, arbitrary: fc.integer({ min: 200, max: 999 }) }
)

function bodyTextArb(ok: unknown) {
  const okText = JSON.stringify(ok)
  return fc.oneof(
    { weight: 3, arbitrary: fc.constant(okText) },
    {
      weight: 6,
      arbitrary: fc
        .tuple(
          fc.nat(),
          fc.constantFrom('delete', 'replace', 'wrap', 'unwrap'),
          fc.oneof(fc.jsonValue(), fc.constantFrom(null, '', -1, 1e308, '1', [], {}))
        )
        .map(([pick, op, value]) => JSON.stringify(mutate(ok, pick, op, value)) ?? ''),
    },
    { weight: 2, arbitrary: fc.nat().map((n) => okText.slice(0, n % Math.max(okText.length, 1))) },
    { weight: 2, arbitrary: fc.jsonValue().map((v) => JSON.stringify(v)) },
    { weight: 5, arbitrary: errorBodyArb },
    {
      weight: 2,
      arbitrary: fc.oneof(
        fc.string({ unit: 'grapheme', maxLength: 60 }),
        fc.constantFrom(
          '',
          'null',
          'true',
          '"text"',
          '<html><body>502 Bad Gateway</body></html>',
          '{"success":true,"data":',
          '\uFEFF' + okText,
          '[1e400]',
          '{"__proto__":{"success":true},"data":{}}',
          '['.repeat(5000) + ']'.repeat(5000)
        )
      ),
    }
  )
}

const contentTypeArb = fc.oneof(
  fc.constantFrom(
    'application/json',
    'application/json; charset=utf-8',
    'text/html',
    'text/plain; charset=latin1',
    'application/octet-stream',
    ''
  ),
  printable()
)

const caseArb = fc.nat({ max: CALLS.length - 1 }).chain((index) =>
  fc.record({
    index: fc.constant(index),
    retries: fc.constantFrom(0, 0, 1, 2),
    reply: fc.oneof(
      { weight: 1, arbitrary: fc.constant<'reset'>('reset') },
      {
        weight: 20,
        arbitrary: fc.record({
          status: statusArb,
          raw: bodyTextArb(CALLS[index].ok),
          headers: fc.record(
            {
              'content-type': contentTypeArb,
              'retry-after': retryAfterArb,
              'x-ratelimit-limit': printable(12),
              'x-ratelimit-remaining': printable(12),
              'x-ratelimit-reset': printable(12),
            },
            { requiredKeys: ['content-type'] }
          ),
        }),
      }
    ),
  })
)

/** Runs a call and says how it settled, without letting anything escape. */
async function settle(promise: Promise<unknown>) {
  try {
    return { ok: true as const, value: await promise }
  } catch (error) {
    return { ok: false as const, error }
  }
}

/** Watches for unhandled rejections for the duration of a test. */
function watchUnhandled(cleanup: (fn: () => Promise<void>) => void) {
  const seen: unknown[] = []
  const listener = (reason: unknown) => void seen.push(reason)
  process.on('unhandledRejection', listener)
  cleanup(async () => void process.off('unhandledRejection', listener))
  return {
    async assertNone(assert: { deepEqual: (a: unknown, b: unknown, m?: string) => void }) {
      // Give a stray rejection the ticks it needs to be reported.
      await new Promise((resolve) => setTimeout(resolve, 50))
      assert.deepEqual(seen, [], 'an unhandled rejection fired')
    },
  }
}

function describe(error: unknown) {
  return error instanceof Error ? `${error.constructor.name}: ${error.message}` : String(error)
}

test.group('Fuzz | client against random and malformed responses', () => {
  test('every call resolves with a validated value on a 2xx or rejects with a typed error', async ({
    assert,
    cleanup,
  }) => {
    const unhandled = watchUnhandled(cleanup)
    let current: Reply = { status: 500 }
    const server = await startScriptedServer(() => current)
    cleanup(() => server.close())
    const tally = { resolved: 0, typed: 0, invalidResponse: 0 }

    await fc.assert(
      fc.asyncProperty(caseArb, async ({ index, retries, reply }) => {
        // A client per case: what one answer's rate-limit headers hold back stays in its case.
        const { client, sleeps } = testClient(server.baseUrl, { retry: { maxRetries: retries } })
        current = reply
        const before = server.requests.length
        const outcome = await settle(CALLS[index].call(client))
        await client.close()
        const sent = server.requests.length - before
        const label = `${CALLS[index].name} -> ${JSON.stringify(reply).slice(0, 300)}`

        assert.isAtLeast(sent, reply === 'reset' ? 0 : 1, label)
        assert.isAtMost(sent, 1 + retries, label)
        for (const ms of sleeps) {
          assert.isTrue(Number.isFinite(ms) && ms >= 0 && ms <= MAX_RETRY_AFTER_MS, `sleep ${ms}`)
        }
        if (outcome.ok) {
          tally.resolved++
          assert.isTrue(reply !== 'reset', label)
          const { status } = reply as { status: number }
          assert.isTrue(status >= 200 && status < 300, `resolved on ${status}: ${label}`)
          assert.isTrue(CALLS[index].valid(outcome.value), `unvalidated value: ${label}`)
          return
        }
        const error = outcome.error
        assert.instanceOf(error, PayoutsError, `untyped ${describe(error)}: ${label}`)
        // Inputs are valid, so every failure comes from the answer: an API error.
        assert.instanceOf(error, PayoutsApiError, `${describe(error)}: ${label}`)
        tally.typed++
        const apiError = error as PayoutsApiError
        assert.isString(apiError.code)
        assert.isTrue(apiError.retryAfter === null || apiError.retryAfter >= 0, label)
        if (reply === 'reset') {
          assert.instanceOf(error, PayoutsNetworkError, label)
          return
        }
        const { status } = reply as { status: number }
        assert.equal(apiError.status, status, label)
        if (status >= 200 && status < 300) {
          assert.equal(apiError.code, 'INVALID_RESPONSE', label)
          tally.invalidResponse++
        }
      }),
      {
        seed: SEED,
        numRuns: 400,
        plugins: [fc.interruptAfterTimeLimit(30_000, { failOnInterrupt: true })],
      }
    )

    assert.isAbove(tally.resolved, 20)
    assert.isAbove(tally.invalidResponse, 20)
    assert.isAbove(tally.typed, 150)
    await unhandled.assertNone(assert)
  }).timeout(60_000)

  test('broken HTTP framing (truncated bodies, bad chunks, garbage) ends in typed errors', async ({
    assert,
    cleanup,
  }) => {
    const unhandled = watchUnhandled(cleanup)
    let wire: { bytes: Buffer; broken: boolean } = { bytes: Buffer.alloc(0), broken: true }
    const sockets = new Set<Socket>()
    // Raw TCP: the scripted server goes through Node's HTTP stack, which refuses to send these.
    const raw = createNetServer((socket) => {
      sockets.add(socket)
      socket.on('error', () => {})
      socket.on('close', () => sockets.delete(socket))
      let head = ''
      socket.on('data', (chunk) => {
        if (head.includes('\r\n\r\n')) return
        head += chunk.toString('latin1')
        if (head.includes('\r\n\r\n')) socket.end(wire.bytes)
      })
    })
    await new Promise<void>((resolve) => raw.listen(0, '127.0.0.1', resolve))
    const baseUrl = `http://127.0.0.1:${(raw.address() as AddressInfo).port}`
    const clients = [0, 1].map((maxRetries) => testClient(baseUrl, { retry: { maxRetries } }))
    cleanup(async () => {
      await Promise.all(clients.map(({ client }) => client.close()))
      for (const socket of sockets) socket.destroy()
      await new Promise((resolve) => raw.close(resolve))
    })

    const bodyBytes = fc.oneof(
      fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)),
      fc.nat({ max: CALLS.length - 1 }).map((i) => Buffer.from(JSON.stringify(CALLS[i].ok) ?? ''))
    )
    const wireArb = fc.oneof(
      // Content-Length promises more than is sent, then the connection closes.
      fc
        .tuple(statusArb, bodyBytes, fc.integer({ min: 1, max: 10_000 }))
        .map(([status, body, missing]) => ({
          broken: !NO_BODY.includes(status),
          bytes: Buffer.concat([
            Buffer.from(
              `HTTP/1.1 ${status} X\r\ncontent-type: application/json\r\ncontent-length: ${body.length + missing}\r\n\r\n`
            ),
            body,
          ]),
        })),
      // Chunked encoding with a bad size line or no terminating chunk.
      fc
        .tuple(statusArb, bodyBytes, fc.constantFrom('zz', '-1', 'ffffffffffffffffff', ''))
        .map(([status, body, size]) => ({
          broken: !NO_BODY.includes(status),
          bytes: Buffer.concat([
            Buffer.from(`HTTP/1.1 ${status} X\r\ntransfer-encoding: chunked\r\n\r\n${size}\r\n`),
            body,
          ]),
        })),
      // Not HTTP at all, or nothing.
      fc.uint8Array({ maxLength: 300 }).map((b) => ({
        broken: true,
        bytes: Buffer.concat([Buffer.from('XTTP/9 '), Buffer.from(b)]),
      })),
      fc.constant({ broken: true, bytes: Buffer.alloc(0) }),
      // Complete answers whose body bytes are random (invalid UTF-8 included).
      fc.tuple(statusArb, bodyBytes).map(([status, body]) => ({
        broken: false,
        bytes: Buffer.concat([
          Buffer.from(
            `HTTP/1.1 ${status} X\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n`
          ),
          body,
        ]),
      }))
    )

    let networkErrors = 0
    await fc.assert(
      fc.asyncProperty(
        fc.nat({ max: CALLS.length - 1 }),
        fc.constantFrom(0, 1),
        wireArb,
        async (index, retries, generated) => {
          wire = generated
          const outcome = await settle(CALLS[index].call(clients[retries].client))
          const label = `${CALLS[index].name} -> ${generated.bytes.toString('latin1').slice(0, 200)}`
          if (outcome.ok) {
            assert.isFalse(generated.broken, `resolved on a broken answer: ${label}`)
            const status = Number(generated.bytes.toString('latin1').split(' ')[1])
            assert.isTrue(status >= 200 && status < 300, `resolved on ${status}: ${label}`)
            assert.isTrue(CALLS[index].valid(outcome.value), `unvalidated value: ${label}`)
            return
          }
          assert.instanceOf(outcome.error, PayoutsApiError, `${describe(outcome.error)}: ${label}`)
          if (outcome.error instanceof PayoutsNetworkError) networkErrors++
          if (generated.broken) assert.instanceOf(outcome.error, PayoutsNetworkError, label)
        }
      ),
      {
        seed: SEED,
        numRuns: 150,
        plugins: [fc.interruptAfterTimeLimit(20_000, { failOnInterrupt: true })],
      }
    )
    assert.isAbove(networkErrors, 50)
    await unhandled.assertNone(assert)
  }).timeout(40_000)

  test('a service that never answers ends in PayoutsTimeoutError', async ({ assert, cleanup }) => {
    const unhandled = watchUnhandled(cleanup)
    const server = await startScriptedServer(['hang'])
    const { client } = testClient(server.baseUrl, { timeoutMs: 50, retry: { maxRetries: 0 } })
    cleanup(async () => {
      await client.close()
      await server.close()
    })
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: CALLS.length - 1 }), async (index) => {
        const outcome = await settle(CALLS[index].call(client))
        assert.isFalse(outcome.ok)
        assert.instanceOf(outcome.error, PayoutsTimeoutError, CALLS[index].name)
        assert.isTrue((outcome.error as PayoutsTimeoutError).outcomeUnknown)
      }),
      { seed: SEED, numRuns: 8 }
    )
    await unhandled.assertNone(assert)
  })

  test('regression: an error code named like an Object.prototype member maps by status', async ({
    assert,
    cleanup,
  }) => {
    for (const code of ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf']) {
      const error = errorFromResponse(404, { code, error: 'gone' }, null)
      assert.instanceOf(error, PayoutsApiError, code)
      assert.deepEqual([error.name, error.status, error.code], ['NotFoundError', 404, code])
    }
    // Through the client: a failed DELETE must not resolve as if it had worked.
    const server = await startScriptedServer([
      { status: 400, body: { code: 'constructor', error: 'no' } },
    ])
    const { client } = testClient(server.baseUrl)
    cleanup(async () => {
      await client.close()
      await server.close()
    })
    const outcome = await settle(client.recipients.delete(RECIPIENT))
    assert.isFalse(outcome.ok, 'a 400 resolved')
    assert.instanceOf((outcome as { error: unknown }).error, PayoutsApiError)
  })
})
