import { test } from '@japa/runner'
import { WebSocket } from 'undici'
import {
  api,
  closeCode,
  execute,
  fiatBody,
  independentSignature,
  listenLocally,
  opened,
  stablecoinBody,
  startEmulator,
  startReceiver,
  startSubscribed,
  subscribe,
  waitFor,
} from './helpers.ts'

const DAY = 24 * 3600 * 1000

test.group('Emulator | Endpoints', () => {
  test('Endpoints: both /x and /api/x path styles answer the same', async ({ assert, cleanup }) => {
    const emu = await startEmulator(cleanup)
    const plain = await api(emu, 'GET', '/config/coverage', { key: null })
    const prefixed = await api(emu, 'GET', '/api/config/coverage', { key: null })
    assert.equal(plain.status, 200)
    assert.deepEqual(prefixed.json, plain.json)
  })

  test('Coverage matrix: 0 and 2 decimal currencies, rails, bounds, tokens, chains', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const { json } = await api(emu, 'GET', '/config/coverage', { key: null })
    assert.includeMembers(
      json.fiat.map((f: any) => f.decimals),
      [0, 2]
    )
    assert.isTrue(json.fiat.every((f: any) => f.rails.length > 0))
    assert.isTrue(
      json.fiat.some((f: any) => f.minAmount === undefined || f.maxAmount === undefined)
    )
    assert.includeMembers(json.wallet.tokens, ['USDC', 'USDT'])
    assert.isAtLeast(json.wallet.chains.length, 3)
  })

  test('POST /rfq/execute (fiat-to-fiat): success wrapper, accepted, banking instructions', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const res = await execute(emu)
    assert.equal(res.status, 200)
    assert.isTrue(res.json.success)
    assert.equal(res.json.data.status, 'accepted')
    assert.properties(res.json.data, [
      'payoutId',
      'quoteId',
      'toAmount',
      'partnerFxRate',
      'effectiveRate',
      'fees',
      'bankingInstructions',
    ])
    assert.properties(res.json.data.fees, ['serviceFee', 'serviceFeeBps', 'partnerFee', 'gasFee'])
  })

  test('POST /rfq/execute (stablecoin-to-fiat): awaiting_escrow_deposit, escrow fields, atomic amount as string', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const body = stablecoinBody(emu)
    const res = await execute(emu, body)
    assert.equal(res.json.data.status, 'awaiting_escrow_deposit')
    assert.match(res.json.data.depositAmountAtomic, /^\d+$/)
    assert.isNumber(res.json.data.chainId)
    assert.match(res.json.data.escrowAddress, /^0x[0-9a-f]{40}$/)
  })

  test('POST /rfq/execute (onramp): route status and a payment URL', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const res = await execute(emu, fiatBody(emu, { toCurrency: 'USDC' }))
    assert.equal(res.json.data.status, 'pending')
    assert.isString(res.json.data.paymentUrl)
    assert.notProperty(res.json.data, 'bankingInstructions')
  })

  test('Stablecoin quote: every route with an opaque rt_ token', async ({ assert, cleanup }) => {
    const emu = await startEmulator(cleanup)
    const res = await api(
      emu,
      'GET',
      '/quotes/fiat-to-stablecoin/all?fromCurrency=USD&toCurrency=USDC&amount=100'
    )
    assert.equal(res.status, 200)
    assert.isAtLeast(res.json.length, 2)
    for (const quote of res.json) assert.match(quote.protocol, /^rt_/)
  })

  test('Onramp quotes: all routes wrapped, best route single', async ({ assert, cleanup }) => {
    const emu = await startEmulator(cleanup)
    const all = await api(emu, 'GET', '/quotes/onramp/all?sourceCurrency=USD&amount=100')
    const best = await api(
      emu,
      'GET',
      '/quotes/onramp/best?sourceCurrency=USD&amount=100&payoutCurrency=USDT'
    )
    assert.isTrue(all.json.success)
    assert.lengthOf(all.json.data, 2)
    assert.equal(best.json.data.toToken, 'USDT')
  })

  test('GET /payouts/{id}: by the execute UUID or the prefixed read id, unwrapped', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const exec = await execute(emu)
    const byUuid = await api(emu, 'GET', `/payouts/${exec.json.data.payoutId}`)
    const byReadId = await api(emu, 'GET', `/payouts/${byUuid.json.id}`)
    assert.match(byUuid.json.id, /^po_/)
    assert.deepEqual(byReadId.json, byUuid.json)
    assert.equal(byUuid.json.status, 'pending')
    assert.equal(byUuid.json.providerMetadata.version, 1)
  })

  test('POST /rfq/execute-batch: a result per row', async ({ assert, cleanup }) => {
    const emu = await startEmulator(cleanup)
    const res = await api(emu, 'POST', '/rfq/execute-batch', {
      body: { items: [fiatBody(emu), { amount: -1 }] },
    })
    assert.deepEqual(
      res.json.data.results.map((r: any) => r.success),
      [true, false]
    )
    assert.equal(res.json.data.results[1].error.code, 'INVALID_PARAMETER')
  })

  test('Recipients: create, list, fetch, update, delete', async ({ assert, cleanup }) => {
    const emu = await startEmulator(cleanup)
    const created = await api(emu, 'POST', '/recipients', {
      body: { name: 'Ada', currency: 'MXN' },
    })
    assert.equal(created.status, 201)
    assert.lengthOf(created.json.paymentMethods, 1)
    const id = created.json.id
    assert.equal((await api(emu, 'GET', `/recipients/${id}`)).json.name, 'Ada')
    assert.equal(
      (await api(emu, 'PATCH', `/recipients/${id}`, { body: { name: 'Ada L.' } })).json.name,
      'Ada L.'
    )
    assert.isTrue((await api(emu, 'GET', '/recipients')).json.data.some((r: any) => r.id === id))
    assert.equal((await api(emu, 'DELETE', `/recipients/${id}`)).status, 204)
    assert.equal((await api(emu, 'GET', `/recipients/${id}`)).status, 404)
    const bulk = await api(emu, 'POST', '/recipients/bulk', {
      body: { recipients: [{ name: 'A' }, { name: 'B' }] },
    })
    assert.lengthOf(bulk.json.data, 2)
  })
})

test.group('Emulator | Authentication', () => {
  test('Authentication 4: missing or malformed Authorization is 401', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    assert.equal((await api(emu, 'GET', '/payouts', { key: null })).status, 401)
    assert.equal(
      (await api(emu, 'GET', '/payouts', { key: 'sk_test_short' })).json.code,
      'UNAUTHORIZED'
    )
  })

  test('Authentication 3: a key sent to the wrong environment host returns 403 environment_scope mismatch', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const res = await api(emu, 'GET', '/payouts', { key: emu.admin.issueKey({ env: 'live' }) })
    assert.equal(res.status, 403)
    assert.equal(res.json.error, 'environment_scope mismatch')
  })

  test('Authentication 6: a key lacking the scope gets 403 FORBIDDEN', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const readOnly = emu.admin.issueKey({ scopes: ['payouts:read', 'quotes:read'] })
    const res = await execute(emu, fiatBody(emu), { key: readOnly })
    assert.equal(res.status, 403)
    assert.equal(res.json.code, 'FORBIDDEN')
    assert.equal((await api(emu, 'GET', '/payouts', { key: readOnly })).status, 200)
  })

  test('Authentication 7: a rotated key keeps working 7 days, then 401', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const old = emu.admin.issueKey()
    const next = emu.admin.rotateKey(old)
    await emu.admin.advance(7 * DAY - 1000)
    assert.equal((await api(emu, 'GET', '/payouts', { key: old })).status, 200)
    await emu.admin.advance(2000)
    assert.equal((await api(emu, 'GET', '/payouts', { key: old })).status, 401)
    assert.equal((await api(emu, 'GET', '/payouts', { key: next })).status, 200)
  })

  test('Authentication 8: a revoked key returns 401', async ({ assert, cleanup }) => {
    const emu = await startEmulator(cleanup)
    const key = emu.admin.issueKey()
    emu.admin.revokeKey(key)
    assert.equal((await api(emu, 'GET', '/payouts', { key })).status, 401)
  })

  test('Authentication 1: GET /config/coverage is public', async ({ assert, cleanup }) => {
    const emu = await startEmulator(cleanup)
    assert.equal((await api(emu, 'GET', '/config/coverage', { key: null })).status, 200)
  })
})

test.group('Emulator | Limits', () => {
  test('Limits: every response carries X-RateLimit-Limit, Remaining and Reset', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const res = await api(emu, 'GET', '/payouts')
    assert.equal(res.headers['x-ratelimit-limit'], '20')
    assert.equal(res.headers['x-ratelimit-remaining'], '19')
    assert.isAbove(Number(res.headers['x-ratelimit-reset']), emu.clock.nowSeconds())
  })

  test('Limits: POST /rfq/execute bursts 10, then 429 with Retry-After and the documented body', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const body = fiatBody(emu)
    const statuses: number[] = []
    let last: any
    for (let i = 0; i < 11; i++) {
      last = await execute(emu, body)
      statuses.push(last.status)
    }
    assert.deepEqual(statuses, [...Array(10).fill(200), 429])
    assert.deepInclude(emu.admin.faultStats(), { throttled: 1, rateLimited: 0 })
    assert.deepEqual(last.json, { error: 'rate limit exceeded' })
    assert.equal(last.headers['retry-after'], '2')
    await emu.admin.advance(2000)
    assert.equal((await execute(emu, body)).status, 200)
  })

  test('Limits: replay is limited to 5 per minute per account', async ({ assert, cleanup }) => {
    const { emu } = await startSubscribed(cleanup)
    await execute(emu)
    await emu.admin.advance(0)
    const [delivery] = (await api(emu, 'GET', '/webhooks/deliveries')).json.data
    const second = emu.admin.issueKey()
    const statuses = []
    for (let i = 0; i < 6; i++) {
      statuses.push(
        (
          await api(emu, 'POST', `/webhooks/deliveries/${delivery.id}/replay`, {
            key: i === 5 ? second : emu.apiKey,
          })
        ).status
      )
    }
    assert.deepEqual(statuses, [202, 202, 202, 202, 202, 429])
  })
})

test.group('Emulator | Idempotency', () => {
  test('Idempotency: the same key and body replays the original response, no duplicate', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const body = fiatBody(emu)
    const headers = { 'idempotency-key': 'order-0001-abcdef' }
    const first = await execute(emu, body, { headers })
    const second = await execute(emu, body, { headers })
    assert.deepEqual(second.json, first.json)
    assert.lengthOf(emu.admin.payouts(), 1)
  })

  test('Idempotency: the same key with a different body is 409 IDEMPOTENCY_KEY_REUSED', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const headers = { 'idempotency-key': 'order-0002-abcdef' }
    await execute(emu, fiatBody(emu), { headers })
    const res = await execute(emu, fiatBody(emu, { amount: 101 }), { headers })
    assert.equal(res.status, 409)
    assert.equal(res.json.code, 'IDEMPOTENCY_KEY_REUSED')
  })

  test('Idempotency: the same key while the first is in flight is 409 IDEMPOTENCY_REQUEST_IN_FLIGHT with Retry-After', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    emu.admin.setFaults({ processingDelayMs: 300 })
    const body = fiatBody(emu)
    const headers = { 'idempotency-key': 'order-0003-abcdef' }
    const first = execute(emu, body, { headers })
    await new Promise((resolve) => setTimeout(resolve, 100))
    const second = await execute(emu, body, { headers })
    assert.equal(second.status, 409)
    assert.equal(second.json.code, 'IDEMPOTENCY_REQUEST_IN_FLIGHT')
    assert.equal(second.headers['retry-after'], '1')
    assert.equal((await first).status, 200)
  })

  test('Idempotency: records expire after 24 hours and the state stays bounded', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup, { rateLimits: false })
    for (let i = 0; i < 20; i++) {
      await execute(emu, fiatBody(emu), { headers: { 'idempotency-key': `bounded-key-${i}` } })
    }
    assert.equal(emu.admin.sizes().idempotency, 20)
    await emu.admin.advance(DAY + 1000)
    await execute(emu, fiatBody(emu), { headers: { 'idempotency-key': 'bounded-key-new' } })
    assert.equal(emu.admin.sizes().idempotency, 1)
  })
})

test.group('Emulator | Errors', () => {
  test('Errors 400: INVALID_JSON for a body that is not JSON', async ({ assert, cleanup }) => {
    const emu = await startEmulator(cleanup)
    const res = await api(emu, 'POST', '/rfq/execute', { raw: '{nope' })
    assert.equal(res.status, 400)
    assert.equal(res.json.code, 'INVALID_JSON')
  })

  test('Errors rule 1: a field over a limit is 400 naming the field and bound, never truncated', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const res = await execute(emu, fiatBody(emu, { reference: 'x'.repeat(256) }))
    assert.equal(res.json.code, 'INVALID_PARAMETER')
    assert.deepInclude(res.json.details, { field: 'reference', bound: 255 })
    assert.lengthOf(emu.admin.payouts(), 0)
  })

  test('Errors 400: a UUID not belonging to the account is INVALID_PARAMETER', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const foreign = emu.admin.seedRecipient({}, 'acct_other')
    const res = await execute(emu, fiatBody(emu, { recipientId: foreign.id }))
    assert.equal(res.status, 400)
    assert.equal(res.json.details.field, 'recipientId')
  })

  test('Errors 400: a missing flow-specific field names it', async ({ assert, cleanup }) => {
    const emu = await startEmulator(cleanup)
    const res = await execute(
      emu,
      fiatBody(emu, { fromCurrency: 'USDC', userPaymentMethodId: undefined })
    )
    assert.equal(res.json.details.field, 'walletAddress')
  })

  test('Errors 422: an amount outside the coverage bounds', async ({ assert, cleanup }) => {
    const emu = await startEmulator(cleanup)
    const res = await execute(emu, fiatBody(emu, { fromCurrency: 'JPY', amount: 50 }))
    assert.equal(res.status, 422)
    assert.deepInclude(res.json.details, { field: 'amount', min: 100 })
  })

  test("Errors 404: another account's payout is not found", async ({ assert, cleanup }) => {
    const emu = await startEmulator(cleanup)
    const exec = await execute(emu)
    const other = emu.admin.issueKey({ accountId: 'acct_other' })
    const res = await api(emu, 'GET', `/payouts/${exec.json.data.payoutId}`, { key: other })
    assert.equal(res.status, 404)
  })
})

test.group('Emulator | States and transitions', () => {
  test('Payout status: pending → processing steps → completed with completedAt', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const exec = await execute(emu)
    const id = exec.json.data.payoutId
    const seen: string[] = []
    for (let i = 0; i < 7; i++) {
      const payout = (await api(emu, 'GET', `/payouts/${id}`)).json
      seen.push(`${payout.status}:${payout.step}`)
      await emu.admin.advance(2000)
    }
    assert.deepEqual(seen, [
      'pending:initiated',
      'processing:compliance_cleared',
      'processing:instructions_sent',
      'processing:collected',
      'processing:converting',
      'processing:settling',
      'completed:delivered',
    ])
    assert.isString((await api(emu, 'GET', `/payouts/${id}`)).json.completedAt)
  })

  test('Payout status: failure during processing and cancellation while pending, by reference', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const fail = await execute(emu, fiatBody(emu, { reference: 'scenario:fail' }))
    const cancel = await execute(emu, fiatBody(emu, { reference: 'scenario:cancel' }))
    const stall = await execute(emu, fiatBody(emu, { reference: 'scenario:stall' }))
    await emu.admin.advance(60_000)
    const status = async (r: any) =>
      (await api(emu, 'GET', `/payouts/${r.json.data.payoutId}`)).json
    const failed = await status(fail)
    assert.deepInclude(failed, { status: 'failed', step: 'collected' })
    // The spec has no failure reason: the running leg's providerMetadata status says it.
    assert.equal(failed.providerMetadata.offramp.status, 'conversion_failed')
    assert.deepInclude(await status(cancel), { status: 'cancelled', step: 'initiated' })
    const stalled = await status(stall)
    assert.deepInclude(stalled, { status: 'processing', step: 'collected' })
    assert.notProperty(stalled.providerMetadata.offramp, 'status')
  })

  test('Execute-time statuses: stablecoin waits in awaiting_escrow_deposit until the deposit is detected', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup, { escrowDetectionDelayMs: 30_000 })
    const body = stablecoinBody(emu)
    const exec = await execute(emu, body)
    const quoteId = exec.json.data.quoteId
    await emu.admin.advance(600_000)
    assert.equal(
      (await api(emu, 'GET', `/rfq/status/${quoteId}`)).json.status,
      'awaiting_escrow_deposit'
    )
    emu.admin.simulateDeposit({ quoteId })
    await emu.admin.advance(30_000)
    assert.equal((await api(emu, 'GET', `/rfq/status/${quoteId}`)).json.status, 'deposit_confirmed')
    await emu.admin.advance(60_000)
    assert.equal(
      (await api(emu, 'GET', `/payouts/${exec.json.data.payoutId}`)).json.status,
      'completed'
    )
  })

  test('POST /rfq/confirm-escrow-deposit: a missed deposit is confirmed once, idempotent on (quoteId, txHash)', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const body = stablecoinBody(emu)
    const { quoteId } = (await execute(emu, body)).json.data
    const { txHash } = emu.admin.simulateDeposit({ quoteId, detect: false })
    await emu.admin.advance(600_000)
    const first = await api(emu, 'POST', '/rfq/confirm-escrow-deposit', {
      body: { quoteId, txHash },
    })
    const again = await api(emu, 'POST', '/rfq/confirm-escrow-deposit', {
      body: { quoteId, txHash },
    })
    assert.deepEqual([first.status, first.json], [200, { success: true }])
    assert.deepEqual([again.status, again.json], [200, { success: true }])
  })

  test('POST /rfq/confirm-escrow-deposit: every persistent failure is the single 500', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const make = async () => {
      const body = stablecoinBody(emu)
      return (await execute(emu, body)).json.data.quoteId as string
    }
    const cases = [
      async () => ({ quoteId: await make(), txHash: '0x' + '9'.repeat(64) }),
      async () => {
        const quoteId = await make()
        return {
          quoteId,
          txHash: emu.admin.simulateDeposit({ quoteId, amountAtomic: 1n, detect: false }).txHash,
        }
      },
      async () => {
        const quoteId = await make()
        return {
          quoteId,
          txHash: emu.admin.simulateDeposit({ quoteId, chainId: 1, detect: false }).txHash,
        }
      },
      async () => {
        const quoteId = await make()
        return {
          quoteId,
          txHash: emu.admin.simulateDeposit({ quoteId, to: '0x' + '0'.repeat(40), detect: false })
            .txHash,
        }
      },
    ]
    for (const build of cases) {
      const res = await api(emu, 'POST', '/rfq/confirm-escrow-deposit', { body: await build() })
      assert.deepEqual(
        [res.status, res.json],
        [500, { success: false, error: 'escrow deposit confirmation failed' }]
      )
    }
    const malformed = await api(emu, 'POST', '/rfq/confirm-escrow-deposit', {
      body: { quoteId: 'x' },
    })
    assert.deepEqual(
      [malformed.status, malformed.json],
      [400, { success: false, error: 'invalid request' }]
    )
  })
})

test.group('Emulator | Events', () => {
  test('HTTP delivery: signed t.rawbody with HMAC-SHA256, verified independently', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const receiver = await startReceiver(cleanup)
    const sub = await subscribe(emu, receiver.url, ['payout.created', 'payout.status.updated'])
    assert.match(sub.json.secret, /^whsec_/)
    await execute(emu)
    await emu.admin.advance(0)
    assert.lengthOf(receiver.received, 1)
    const [delivery] = receiver.received
    const match = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(delivery.headers['svc-signature']))!
    assert.isNotNull(match)
    assert.equal(match[2], independentSignature(sub.json.secret, match[1], delivery.raw))
    assert.equal(delivery.headers['svc-event-type'], 'payout.created')
    assert.equal(delivery.headers['content-type'], 'application/json')
    const envelope = JSON.parse(delivery.raw.toString())
    assert.equal(envelope.type, 'payout.created')
    assert.properties(envelope.data, [
      'payoutId',
      'transactionType',
      'payoutAmount',
      'payoutCurrency',
      'sourceCurrency',
      'recipientId',
      'status',
      'createdAt',
    ])
  })

  test('Webhook delivery: 5 attempts at 0, 30 s, 2 min, 8 min, 32 min, then permanently_failed', async ({
    assert,
    cleanup,
  }) => {
    const { emu, receiver } = await startSubscribed(cleanup, {}, [500])
    await execute(emu)
    const counts: number[] = []
    for (const step of [0, 29_000, 1000, 119_000, 1000, 479_000, 1000, 1_919_000, 1000]) {
      await emu.admin.advance(step)
      counts.push(receiver.received.length)
    }
    assert.deepEqual(counts, [1, 1, 2, 2, 3, 3, 4, 4, 5])
    const ids = new Set(receiver.received.map((r) => r.headers['svc-delivery-id']))
    assert.equal(ids.size, 1, 'retries reuse the delivery id')
    const [delivery] = (await api(emu, 'GET', '/webhooks/deliveries')).json.data
    assert.deepInclude(delivery, { status: 'permanently_failed', attempts: 5 })
  })

  test('Webhook delivery: replay is 202 and carries a new Svc-Delivery-Id', async ({
    assert,
    cleanup,
  }) => {
    const { emu, receiver } = await startSubscribed(cleanup)
    await execute(emu)
    await emu.admin.advance(0)
    const original = String(receiver.received[0].headers['svc-delivery-id'])
    const replay = await api(emu, 'POST', `/webhooks/deliveries/${original}/replay`)
    assert.equal(replay.status, 202)
    await emu.admin.advance(0)
    assert.lengthOf(receiver.received, 2)
    assert.notEqual(receiver.received[1].headers['svc-delivery-id'], original)
    assert.equal(receiver.received[1].headers['svc-delivery-id'], replay.json.id)
    assert.deepEqual(receiver.received[1].raw, receiver.received[0].raw)
  })

  test('Webhook subscription: rotate-secret invalidates the old secret at once', async ({
    assert,
    cleanup,
  }) => {
    const { emu, receiver, subscription: sub } = await startSubscribed(cleanup)
    const rotated = await api(emu, 'POST', `/webhooks/subscriptions/${sub.json.id}/rotate-secret`)
    assert.notEqual(rotated.json.secret, sub.json.secret)
    await execute(emu)
    await emu.admin.advance(0)
    const [d] = receiver.received
    const t = /t=(\d+)/.exec(String(d.headers['svc-signature']))![1]
    assert.include(
      String(d.headers['svc-signature']),
      independentSignature(rotated.json.secret, t, d.raw)
    )
    assert.notInclude(
      String(d.headers['svc-signature']),
      independentSignature(sub.json.secret, t, d.raw)
    )
  })

  test('Webhook subscription: a deleted one is sent nothing more; deleting it again is 404', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const [deleted, kept] = [await startReceiver(cleanup), await startReceiver(cleanup)]
    const sub = await subscribe(emu, deleted.url)
    await subscribe(emu, kept.url)
    assert.equal((await api(emu, 'DELETE', `/webhooks/subscriptions/${sub.json.id}`)).status, 204)
    await execute(emu)
    await emu.admin.advance(0)
    assert.lengthOf(kept.received, 1, 'the event was sent')
    assert.lengthOf(deleted.received, 0)
    const again = await api(emu, 'DELETE', `/webhooks/subscriptions/${sub.json.id}`)
    assert.equal(again.status, 404)
  })

  test('Webhook subscription: https only, private and metadata hosts refused, 26th is 409', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup, { allowInsecureWebhooks: false, rateLimits: false })
    for (const url of [
      'http://example.com/h',
      'https://127.0.0.1/h',
      'https://10.0.0.8/h',
      'https://169.254.169.254/h',
      'https://[::1]/h',
      'https://192.168.1.2/h',
    ]) {
      const res = await subscribe(emu, url)
      assert.equal(res.status, 400, url)
      assert.equal(res.json.details.field, 'url')
    }
    const unknownEvent = await subscribe(emu, 'https://example.com/h', ['payout.delivered'])
    assert.equal(unknownEvent.status, 400)
    for (let i = 0; i < 25; i++) {
      const res = await subscribe(emu, `https://example.com/h${i}`)
      assert.equal(res.status, 201)
    }
    const extra = await subscribe(emu, 'https://example.com/x')
    assert.deepEqual([extra.status, extra.json.code], [409, 'MAX_ACTIVE_SUBSCRIPTIONS_EXCEEDED'])
  })

  test("WebSocket delivery: auth first, then the account's events in the webhook envelope", async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const socket = new WebSocket(emu.wsUrl)
    cleanup(async () => socket.close())
    const messages: any[] = []
    socket.addEventListener('message', (e) => messages.push(JSON.parse(String(e.data))))
    await opened(socket)
    socket.send(JSON.stringify({ type: 'auth', apiKey: emu.apiKey }))
    await waitFor(() => messages.length > 0)
    assert.deepEqual(messages[0], { type: 'auth.ok' })
    const other = emu.admin.issueKey({ accountId: 'acct_other' })
    await execute(
      emu,
      {
        ...fiatBody(emu),
        recipientId: emu.admin.seedRecipient({}, 'acct_other').id,
        userPaymentMethodId: emu.admin.accountPaymentMethods('acct_other')[0].id,
      },
      { key: other }
    )
    await execute(emu)
    await waitFor(() => messages.length > 1)
    assert.lengthOf(messages, 2, "only this business's events")
    assert.equal(messages[1].type, 'payout.created')
    assert.property(messages[1].data, 'payoutId')
  })

  test('Authentication 11: a socket that does not authenticate in time is closed', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup, { wsAuthTimeoutMs: 100 })
    const socket = new WebSocket(emu.wsUrl)
    const closed = closeCode(socket)
    assert.equal(await closed, 4001)
    const bad = new WebSocket(emu.wsUrl)
    await opened(bad)
    bad.send(JSON.stringify({ type: 'auth', apiKey: 'sk_test_nope' }))
    const badClose = await closeCode(bad)
    assert.equal(badClose, 4001)
  })
})

test.group('Emulator | Faults', () => {
  test('Faults: a share of requests answers 5xx, reproducibly with a seed', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const run = async () => {
      emu.admin.setFaults({ errorRate: 0.5 }, 7)
      const statuses = []
      for (let i = 0; i < 20; i++) statuses.push((await api(emu, 'GET', '/payouts')).status)
      return statuses
    }
    const first = await run()
    assert.deepEqual(await run(), first)
    assert.isTrue(first.some((s) => s >= 500) && first.some((s) => s === 200))
  })

  test('Faults: webhook deliveries dropped or duplicated', async ({ assert, cleanup }) => {
    const { emu, receiver } = await startSubscribed(cleanup, { rateLimits: false })
    emu.admin.setFaults({ webhookDuplicateRate: 1 })
    await execute(emu)
    await emu.admin.advance(10)
    assert.lengthOf(receiver.received, 2)
    assert.equal(
      receiver.received[0].headers['svc-delivery-id'],
      receiver.received[1].headers['svc-delivery-id']
    )
    emu.admin.setFaults({ webhookDropRate: 1 })
    await execute(emu)
    await emu.admin.advance(10)
    assert.lengthOf(receiver.received, 2)
  })

  test('Admin HTTP prefix drives a standalone emulator and never collides with public paths', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const advanced = await api(emu, 'POST', '/__emulator/advance', {
      key: null,
      body: { ms: 60_000 },
    })
    assert.equal(advanced.status, 200)
    const state = await api(emu, 'GET', '/__emulator/state', { key: null })
    assert.property(state.json, 'sizes')
    assert.equal((await api(emu, 'GET', '/api/__emulator/state', { key: null })).status, 404)
  })
})

test.group('Emulator | Faults and limits on the wire', () => {
  test('Faults: connection resets and 429 storms', async ({ assert, cleanup }) => {
    const emu = await startEmulator(cleanup, { rateLimits: false })
    emu.admin.setFaults({ resetRate: 1 })
    const reset = await api(emu, 'GET', '/payouts').catch((error) => error)
    assert.instanceOf(reset, Error)
    emu.admin.setFaults({ rateLimitStormRate: 1 })
    const storm = await api(emu, 'GET', '/payouts')
    assert.deepEqual([storm.status, storm.json], [429, { error: 'rate limit exceeded' }])
    assert.equal(storm.headers['retry-after'], '1')
    assert.deepInclude(emu.admin.faultStats(), { rateLimited: 1, resets: 1, throttled: 0 })
    emu.admin.setFaults({})
    assert.equal((await api(emu, 'GET', '/payouts')).status, 200)
  })

  test('HTTP delivery: a receiver slower than the timeout counts as a failed attempt', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup, { webhookTimeoutMs: 100 })
    const url = await listenLocally(cleanup, () => {})
    await subscribe(emu, url)
    await execute(emu)
    await emu.admin.advance(0)
    const [delivery] = (await api(emu, 'GET', '/webhooks/deliveries')).json.data
    assert.deepInclude(delivery, { status: 'retrying', attempts: 1 })
  })

  test('Limits: webhook payloads over 256 KB are dropped', async ({ assert, cleanup }) => {
    const { emu, receiver } = await startSubscribed(cleanup)
    emu.webhooks.publish('acct_default', 'payout.created', {
      type: 'payout.created',
      data: { pad: 'x'.repeat(300 * 1024) },
    })
    emu.webhooks.publish('acct_default', 'payout.created', {
      type: 'payout.created',
      data: { pad: 'x' },
    })
    await emu.admin.advance(0)
    assert.lengthOf(receiver.received, 1)
  })

  test('Delivery history is pruned after 30 days', async ({ assert, cleanup }) => {
    const { emu } = await startSubscribed(cleanup)
    await execute(emu)
    await emu.admin.advance(0)
    assert.equal(emu.admin.sizes().deliveries, 1)
    await emu.admin.advance(31 * DAY)
    await execute(emu)
    await emu.admin.advance(0)
    assert.equal(
      emu.admin.sizes().deliveries,
      1,
      'the 31-day-old delivery is gone, the new one stays'
    )
  })
})
