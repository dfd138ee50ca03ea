import { test } from '@japa/runner'
import {
  BusinessRuleError,
  EscrowConfirmationFailedError,
  ForbiddenError,
  IdempotencyKeyReusedError,
  IdempotencyRequestInFlightError,
  InvalidJsonError,
  InvalidParameterError,
  NotFoundError,
  PayoutsApiError,
  RateLimitedError,
  ServerError,
  UnauthorizedError,
} from '../../src/client/main.ts'
import { type Reply } from '../helpers/scripted_server.ts'
import { executeBodies, executeData, QUOTE, scriptedClient } from './fixtures.ts'

const confirmBody = { quoteId: QUOTE, txHash: '0x' + 'a'.repeat(64) }
const HTML_PAGE =
  '<!DOCTYPE html><html><head><title>500 Internal Server Error</title></head>' +
  '<body><h1>Internal Server Error</h1></body></html>'

/** Bodies a 500 of confirm-escrow-deposit may come with: only the status decides. */
const escrowBodies: Array<{ name: string; reply: Reply }> = [
  {
    name: 'the documented wording',
    reply: { status: 500, body: { success: false, error: 'escrow deposit confirmation failed' } },
  },
  {
    name: 'another wording',
    reply: { status: 500, body: { success: false, error: 'Could not verify the deposit.' } },
  },
  { name: '{"success":false}', reply: { status: 500, body: { success: false } } },
  { name: 'an HTML error page', reply: { status: 500, raw: HTML_PAGE } },
  { name: 'an empty body', reply: { status: 500, raw: '' } },
  {
    name: 'a body with its own code',
    reply: { status: 500, body: { code: 'INTERNAL_ERROR', error: 'internal error' } },
  },
  { name: 'plain text', reply: { status: 500, raw: 'Internal Server Error' } },
]

test.group('Client | confirm-escrow 500 whatever its body', () => {
  test('{name}: one request, EscrowConfirmationFailedError')
    .with(escrowBodies)
    .run(async ({ assert, cleanup }, row) => {
      const { client, server, sleeps } = await scriptedClient(cleanup, () => row.reply)
      for (const options of [{ idempotencyKey: 'escrow-confirm-1' }, undefined]) {
        const before = server.requests.length
        const error = await client.confirmEscrowDeposit(confirmBody, options).catch((e) => e)
        assert.instanceOf(error, EscrowConfirmationFailedError)
        assert.equal(error.code, 'ESCROW_CONFIRMATION_FAILED')
        assert.equal(error.status, 500)
        assert.isFalse(error.outcomeUnknown, 'a persistent failure: nothing was confirmed')
        assert.equal(server.requests.length - before, 1, 'exactly one request per call')
      }
      assert.deepEqual(sleeps, [])
    })

  test('a 500 with that wording elsewhere is an ordinary retried 5xx', async ({
    assert,
    cleanup,
  }) => {
    const { client, server } = await scriptedClient(cleanup, [
      { status: 500, body: { success: false, error: 'escrow deposit confirmation failed' } },
      { status: 200, body: { success: true, data: executeData.fiat_to_fiat } },
    ])
    await client.execute(executeBodies.fiat_to_fiat)
    assert.lengthOf(server.requests, 2)
  })
})

/**
 * Confirm-escrow is idempotent on (quoteId, txHash) (spec): a gateway's 5xx or a lost
 * connection is retried with the documented backoff, with or without an Idempotency-Key.
 */
const transientOnConfirm: Array<{ name: string; first: Reply }> = [
  { name: '502', first: { status: 502, raw: HTML_PAGE } },
  { name: '503', first: { status: 503, body: { error: 'service unavailable' } } },
  { name: '504', first: { status: 504, raw: '' } },
  { name: 'a reset connection', first: 'reset' },
]

test.group('Client | confirm-escrow transient failures', () => {
  test('{name} is retried, with or without a key')
    .with(transientOnConfirm)
    .run(async ({ assert, cleanup }, row) => {
      for (const options of [{ idempotencyKey: 'escrow-confirm-1' }, undefined]) {
        const { client, server, sleeps } = await scriptedClient(cleanup, [
          row.first,
          { status: 200, body: { success: true } },
        ])
        const result = await client.confirmEscrowDeposit(confirmBody, options)
        assert.deepEqual(result, { success: true })
        assert.lengthOf(server.requests, 2)
        assert.deepEqual(sleeps, [1000], 'the first step of the documented backoff')
        assert.deepEqual(server.requests[0].json, server.requests[1].json)
      }
    })
})

/** A small deterministic PRNG (mulberry32): the same "fuzz" on every run. */
function prng(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** Phrases that once steered decisions, and others a service might say instead. */
const PHRASES = [
  'escrow deposit confirmation failed',
  'environment_scope mismatch',
  'rate limit exceeded',
  'a request with this Idempotency-Key is in flight',
  'temporarily unavailable, retry later',
  'invalid request',
  'not found',
  'Internal Server Error',
  'déjà vu: ünïcödé wording',
  '',
]

/** How one reworded body may look: the `error` text, the wrapper, or no JSON at all. */
function rewordedBodies(
  random: () => number,
  code: string | undefined,
  count: number
): Array<{ body?: unknown; raw?: string }> {
  const pick = () => PHRASES[Math.floor(random() * PHRASES.length)]
  const replies: Array<{ body?: unknown; raw?: string }> = []
  for (let i = 0; i < count; i++) {
    const text = `${pick()} ${pick()}`.trim()
    const shape = code === undefined ? i % 5 : i % 2
    if (shape === 0) replies.push({ body: { code, error: text } })
    else if (shape === 1) replies.push({ body: { success: false, code, error: text } })
    else if (shape === 2) replies.push({ raw: `<html><body>${text}</body></html>` })
    else if (shape === 3) replies.push({ raw: '' })
    else replies.push({ body: { message: text, success: false } })
  }
  return replies
}

const decision = (
  status: number,
  code: string | undefined,
  type: typeof PayoutsApiError,
  attempts: number
) => ({ label: `${status} ${code ?? 'without a code'}`, status, code, type, attempts })

/** What status and code decide: the typed error, and how many requests one call makes. */
const decisions = [
  decision(400, undefined, InvalidParameterError, 1),
  decision(400, 'INVALID_JSON', InvalidJsonError, 1),
  decision(401, undefined, UnauthorizedError, 1),
  decision(403, undefined, ForbiddenError, 1),
  decision(403, 'FORBIDDEN', ForbiddenError, 1),
  decision(404, undefined, NotFoundError, 1),
  decision(409, undefined, PayoutsApiError, 1),
  decision(409, 'IDEMPOTENCY_KEY_REUSED', IdempotencyKeyReusedError, 1),
  decision(409, 'IDEMPOTENCY_REQUEST_IN_FLIGHT', IdempotencyRequestInFlightError, 6),
  decision(422, undefined, BusinessRuleError, 1),
  decision(429, undefined, RateLimitedError, 6),
  decision(500, undefined, ServerError, 6),
  decision(503, undefined, ServerError, 6),
]

test.group('Client | decisions follow status and code, never wording', () => {
  test('{label}: every rewording gives the same error class and request count')
    .with(decisions)
    .run(async ({ assert, cleanup }, row) => {
      const random = prng(row.status * 31 + (row.code?.length ?? 0))
      let current: Reply = { status: 200, body: {} }
      const { client, server } = await scriptedClient(cleanup, () => current)
      for (const body of rewordedBodies(random, row.code, 10)) {
        const waits = row.status === 409 || row.status === 429
        current = {
          ...body,
          status: row.status,
          headers: waits ? { 'retry-after': '1' } : {},
        }
        const before = server.requests.length
        const error = await client.execute(executeBodies.fiat_to_fiat).catch((e) => e)
        const seen = JSON.stringify(current)
        assert.instanceOf(error, row.type, seen)
        assert.equal(error.status, row.status, seen)
        if (row.code) assert.equal(error.code, row.code, seen)
        assert.equal(server.requests.length - before, row.attempts, seen)
      }
    })

  test('a wrong-environment 403 is a ForbiddenError too', async ({ assert, cleanup }) => {
    const { client, server } = await scriptedClient(cleanup, [
      { status: 403, body: { error: 'environment_scope mismatch' } },
    ])
    const error = await client.getPayout('po_1').catch((e) => e)
    assert.instanceOf(error, ForbiddenError)
    assert.equal(error.code, 'ENVIRONMENT_SCOPE_MISMATCH')
    assert.lengthOf(server.requests, 1)
  })
})
