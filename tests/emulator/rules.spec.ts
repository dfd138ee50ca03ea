import { test } from '@japa/runner'
import { verifySignature } from '../../src/signature/main.ts'
import {
  api,
  execute,
  executeBodies,
  fiatBody,
  startEmulator,
  startReceiver,
  subscribe,
} from './helpers.ts'

const MINUTE = 60_000

/** The three X-RateLimit-* headers of an answer, as numbers (NaN when missing). */
function rateHeaders(res: { headers: Record<string, unknown> }) {
  return ['limit', 'remaining', 'reset'].map((name) => Number(res.headers[`x-ratelimit-${name}`]))
}

test.group('Emulator rules | signatures on a fast clock', () => {
  test('Signature timestamp tolerance: a delivery after the clock moved 6 minutes ahead verifies at the wall clock', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const receiver = await startReceiver(cleanup)
    const sub = await subscribe(emu, receiver.url, ['payout.created', 'payout.status.updated'])
    await emu.admin.advance(6 * MINUTE)
    await execute(emu)
    await emu.admin.advance(0)
    await emu.webhooks.settle()
    assert.lengthOf(receiver.received, 1)
    const [delivery] = receiver.received
    const verdict = verifySignature({
      header: String(delivery.headers['svc-signature']),
      rawBody: delivery.raw,
      secrets: [sub.json.secret],
    })
    assert.deepInclude(verdict, { ok: true })
    // The event itself happened at the emulated time: its createdAt follows that clock.
    const envelope = JSON.parse(delivery.raw.toString())
    assert.equal(envelope.createdAt, emu.clock.iso())
  })
})

test.group('Emulator rules | subscription limit', () => {
  test('Subscriptions per account: reactivating one when 25 are active is 409 MAX_ACTIVE_SUBSCRIPTIONS_EXCEEDED', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup, { allowInsecureWebhooks: false, rateLimits: false })
    const ids: string[] = []
    for (let i = 0; i < 25; i++) {
      ids.push((await subscribe(emu, `https://example.com/h${i}`)).json.id)
    }
    const path = (id: string) => `/webhooks/subscriptions/${id}`
    const off = await api(emu, 'PATCH', path(ids[0]), { body: { active: false } })
    assert.equal(off.status, 200)
    assert.equal((await subscribe(emu, 'https://example.com/new')).status, 201)

    const again = await api(emu, 'PATCH', path(ids[0]), { body: { active: true } })
    assert.deepEqual([again.status, again.json?.code], [409, 'MAX_ACTIVE_SUBSCRIPTIONS_EXCEEDED'])
    const list = (await api(emu, 'GET', '/webhooks/subscriptions')).json.data
    assert.lengthOf(
      list.filter((s: any) => s.active),
      25
    )
    assert.isFalse(list.find((s: any) => s.id === ids[0]).active)

    // An update that does not activate anything still passes at 25.
    const relabel = await api(emu, 'PATCH', path(ids[1]), { body: { active: true, label: 'x' } })
    assert.equal(relabel.status, 200)
  })
})

test.group('Emulator rules | rate-limit headers', () => {
  test('Limits: 401, 403, 404 and 429 carry X-RateLimit-Limit, Remaining and Reset', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const readOnly = emu.admin.issueKey({ scopes: ['payouts:read'] })
    const answers = {
      'no key': await api(emu, 'GET', '/payouts', { key: null }),
      'unknown key': await api(emu, 'GET', '/payouts', { key: `sk_test_${'a'.repeat(43)}` }),
      'wrong environment': await api(emu, 'GET', '/payouts', {
        key: emu.admin.issueKey({ env: 'live' }),
      }),
      'missing scope': await execute(emu, fiatBody(emu), { key: readOnly }),
      'unknown route': await api(emu, 'GET', '/no-such-endpoint'),
      'unknown payout': await api(emu, 'GET', '/payouts/00000000-0000-4000-8000-000000000000'),
    }
    const statuses = Object.values(answers).map((res) => res.status)
    assert.deepEqual(statuses, [401, 401, 403, 403, 404, 404])
    for (const [name, res] of Object.entries(answers)) {
      const [limit, remaining, reset] = rateHeaders(res)
      assert.isTrue(Number.isInteger(limit) && limit > 0, `${name}: limit`)
      assert.isTrue(Number.isInteger(remaining) && remaining < limit, `${name}: remaining`)
      assert.isAtLeast(reset, emu.clock.nowSeconds(), `${name}: reset`)
    }
    // Each answer counts in its endpoint's family: execute's bucket holds 10.
    assert.equal(rateHeaders(answers['missing scope'])[0], 10)
    assert.equal(rateHeaders(answers['unknown route'])[0], 20)

    // Requests without a key count per address: the 21st in a burst is 429, with the headers.
    let last = answers['no key']
    for (let i = 0; i < 20 && last.status !== 429; i++) {
      last = await api(emu, 'GET', '/payouts', { key: null })
    }
    assert.equal(last.status, 429)
    assert.deepEqual(rateHeaders(last).slice(0, 2), [20, 0])
    assert.isAbove(Number(last.headers['retry-after']), 0)
  })
})

test.group('Emulator rules | idempotency compares JSON values', () => {
  test('Idempotency: the same body with another key order and whitespace replays; another array order is 409', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const body = fiatBody(emu)
    const headers = { 'idempotency-key': 'order-canonical-0001' }
    const first = await execute(emu, body, { headers })
    assert.equal(first.status, 200)
    const reordered = Object.fromEntries(Object.entries(body).reverse())
    const again = await api(emu, 'POST', '/rfq/execute', {
      raw: JSON.stringify(reordered, null, 2),
      headers,
    })
    assert.equal(again.status, 200)
    assert.equal(again.headers['idempotent-replayed'], 'true')
    assert.deepEqual(again.json, first.json)
    assert.lengthOf(emu.admin.payouts(), 1)

    const { fiat, stable } = executeBodies(emu)
    const batchHeaders = { 'idempotency-key': 'batch-canonical-0001' }
    const batch = (items: unknown[]) =>
      api(emu, 'POST', '/rfq/execute-batch', { body: { items }, headers: batchHeaders })
    assert.equal((await batch([fiat, stable])).status, 200)
    const swapped = await batch([stable, fiat])
    assert.deepEqual([swapped.status, swapped.json?.code], [409, 'IDEMPOTENCY_KEY_REUSED'])
  })
})
