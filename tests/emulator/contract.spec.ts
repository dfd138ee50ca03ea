import { test } from '@japa/runner'
import {
  BusinessRuleError,
  EscrowConfirmationFailedError,
  ForbiddenError,
  IdempotencyKeyReusedError,
  NotFoundError,
  PayoutsClient,
  UnauthorizedError,
  WrongEnvironmentError,
} from '../../src/client/main.ts'
import { startEmulator, startReceiver, testClient } from './helpers.ts'

/** The client of the foundation issue, against the emulator: the two must agree. */
async function setup(
  cleanup: (fn: () => Promise<void>) => void,
  clientOptions: Record<string, unknown> = {}
) {
  const emu = await startEmulator(cleanup)
  const sleeps: number[] = []
  const client = testClient(cleanup, emu, {
    baseUrl: `${emu.baseUrl}/api`,
    sleep: async (ms) => {
      sleeps.push(ms)
    },
    ...clientOptions,
  })
  const recipient = await client.recipients.create({ name: 'Ada', currency: 'MXN' })
  const method = emu.admin.accountPaymentMethodId
  /** A fiat-to-fiat execute of 10 USD to MXN for the seeded recipient. */
  const fiat = (overrides: { fromCurrency?: string; amount?: number } = {}) => ({
    fromCurrency: 'USD',
    toCurrency: 'MXN',
    amount: 10,
    recipientId: recipient.id,
    userPaymentMethodId: method,
    ...overrides,
  })
  return { emu, client, recipient, method, sleeps, fiat }
}

/** A client whose every wait moves the emulated clock instead (recorded in `sleeps`). */
function advancingClient(
  emu: { apiKey: string; baseUrl: string; admin: { advance(ms: number): Promise<unknown> } },
  sleeps: number[],
  cleanup: (fn: () => Promise<void>) => void
) {
  return testClient(cleanup, emu, {
    sleep: async (ms) => {
      sleeps.push(ms)
      await emu.admin.advance(ms)
    },
  })
}

test.group('Contract | client against the emulator', () => {
  test('three flows execute and read back', async ({ assert, cleanup }) => {
    const { emu, client, recipient, method } = await setup(cleanup)
    const fiat = await client.execute({
      fromCurrency: 'EUR',
      toCurrency: 'MXN',
      amount: 500,
      recipientId: recipient.id,
      userPaymentMethodId: method,
    })
    const stable = await client.execute({
      fromCurrency: 'USDT',
      toCurrency: 'BRL',
      amount: 80,
      recipientId: recipient.id,
      walletAddress: '0x' + '4'.repeat(40),
    })
    const onramp = await client.execute({
      fromCurrency: 'USD',
      toCurrency: 'USDC',
      amount: 80,
      recipientId: recipient.id,
      userPaymentMethodId: method,
    })
    assert.deepEqual(
      [fiat.flow, stable.flow, onramp.flow],
      ['fiat_to_fiat', 'stablecoin_to_fiat', 'onramp']
    )
    assert.equal(stable.flow === 'stablecoin_to_fiat' && stable.depositAmountAtomic, 80_000_000n)
    await emu.admin.advance(20_000)
    assert.equal((await client.getPayout(fiat.payoutId)).status, 'completed')
    assert.equal((await client.getQuoteStatus(stable.quoteId)).status, 'awaiting_escrow_deposit')
    const { txHash } = emu.admin.simulateDeposit({ quoteId: stable.quoteId, detect: false })
    assert.deepEqual(await client.confirmEscrowDeposit({ quoteId: stable.quoteId, txHash }), {
      success: true,
    })
    await emu.admin.advance(20_000)
    const read = await client.getPayout(stable.payoutId)
    assert.equal(read.status, 'completed')
    assert.equal((await client.getPayout(read.id)).payoutId, stable.payoutId)
    const page = await client.listPayouts({ limit: 2 })
    assert.lengthOf(page.data, 2)
    assert.isString(page.nextCursor)
  })

  test('quotes, coverage, batch, recipients, webhooks and deliveries', async ({
    assert,
    cleanup,
  }) => {
    // The receiver listens on 127.0.0.1: the client allows loopback as the emulator does.
    const { emu, client, recipient, fiat } = await setup(cleanup, {
      allowInsecureLoopbackWebhooks: true,
    })
    assert.isAbove((await client.getCoverage()).fiat.length, 3)
    assert.match(
      (
        await client.quotes.fiatToStablecoin({
          fromCurrency: 'USD',
          toCurrency: 'USDC',
          amount: 10,
        })
      )[0].protocol,
      /^rt_/
    )
    assert.lengthOf(await client.quotes.onramp({ sourceCurrency: 'USD', amount: 10 }), 2)
    assert.equal(
      (
        await client.quotes.bestOnramp({
          sourceCurrency: 'USD',
          amount: 10,
          payoutCurrency: 'USDT',
        })
      ).toToken,
      'USDT'
    )
    const batch = await client.executeBatch({
      items: [fiat()],
    })
    assert.isTrue(batch[0].success)
    const bulk = await client.recipients.bulkCreate({ recipients: [{ name: 'B' }, { name: 'C' }] })
    assert.lengthOf(bulk, 2)
    assert.equal((await client.recipients.update(bulk[0].id, { name: 'B2' })).name, 'B2')
    await client.recipients.delete(bulk[1].id)
    assert.lengthOf((await client.recipients.list()).data, 2)
    assert.equal((await client.recipients.get(recipient.id)).name, 'Ada')

    const receiver = await startReceiver(cleanup)
    const sub = await client.webhooks.subscriptions.create({
      url: 'https://hooks.example.com/p',
      events: ['payout.created'],
    })
    assert.match(sub.secret!, /^whsec_/)
    await client.webhooks.subscriptions.update(sub.id, {
      url: receiver.url.replace('http://127.0.0.1', 'https://hooks.example.com'),
    })
    assert.notProperty(await client.webhooks.subscriptions.get(sub.id), 'secret')
    assert.lengthOf(await client.webhooks.subscriptions.list(), 1)
    const rotated = await client.webhooks.subscriptions.rotateSecret(sub.id)
    assert.notEqual(rotated.secret, sub.secret)
    await client.webhooks.subscriptions.delete(sub.id)
    assert.lengthOf(await client.webhooks.subscriptions.list(), 0)

    const local = await client.webhooks.subscriptions.create({
      url: receiver.url.replace('http:', 'https:'),
      events: ['payout.created'],
    })
    await client.webhooks.subscriptions.update(local.id, { active: true })
    await client.execute(fiat())
    await emu.admin.advance(0)
    const deliveries = await client.webhooks.deliveries.list({ subscriptionId: local.id })
    assert.lengthOf(deliveries, 1)
    assert.equal((await client.webhooks.deliveries.get(deliveries[0].id)).id, deliveries[0].id)
    const replay = await client.webhooks.deliveries.replay(deliveries[0].id)
    assert.equal(replay.replayOf, deliveries[0].id)
    assert.notEqual(replay.id, deliveries[0].id)
  })

  test('documented errors arrive as their typed errors', async ({ assert, cleanup }) => {
    const { emu, client, recipient, fiat } = await setup(cleanup)
    const body = fiat({ fromCurrency: 'JPY' })
    assert.instanceOf(await client.execute(body).catch((e) => e), BusinessRuleError)
    assert.instanceOf(await client.getPayout('po_missing').catch((e) => e), NotFoundError)
    await client.execute({ ...body, amount: 1000 }, { idempotencyKey: 'contract-key-1' })
    assert.instanceOf(
      await client
        .execute({ ...body, amount: 2000 }, { idempotencyKey: 'contract-key-1' })
        .catch((e) => e),
      IdempotencyKeyReusedError
    )
    const stable = await client.execute({
      fromCurrency: 'USDC',
      toCurrency: 'MXN',
      amount: 50,
      recipientId: recipient.id,
      walletAddress: '0x' + '5'.repeat(40),
    })
    assert.instanceOf(
      await client
        .confirmEscrowDeposit({ quoteId: stable.quoteId, txHash: '0x' + '7'.repeat(64) })
        .catch((e) => e),
      EscrowConfirmationFailedError
    )

    const readOnly = new PayoutsClient({
      apiKey: emu.admin.issueKey({ scopes: ['payouts:read'] }),
      baseUrl: emu.baseUrl,
      rateLimiter: false,
    })
    const revokedKey = emu.admin.issueKey()
    emu.admin.revokeKey(revokedKey)
    const revoked = new PayoutsClient({
      apiKey: revokedKey,
      baseUrl: emu.baseUrl,
      rateLimiter: false,
    })
    const live = new PayoutsClient({
      apiKey: emu.admin.issueKey({ env: 'live' }),
      baseUrl: emu.baseUrl,
      rateLimiter: false,
    })
    cleanup(async () => {
      await Promise.all([readOnly.close(), revoked.close(), live.close()])
    })
    assert.instanceOf(await readOnly.execute(body).catch((e) => e), ForbiddenError)
    assert.instanceOf(await revoked.listPayouts().catch((e) => e), UnauthorizedError)
    assert.instanceOf(await live.listPayouts().catch((e) => e), WrongEnvironmentError)
  })

  test('retries through injected 5xx with one Idempotency-Key: exactly one payout', async ({
    assert,
    cleanup,
  }) => {
    const { emu, client, sleeps, fiat } = await setup(cleanup, {
      retry: { maxRetries: 10, baseDelayMs: 1 },
    })
    emu.admin.setFaults({ errorRate: 0.6, pathPrefixes: ['/rfq/execute'] }, 3)
    const results = []
    for (let i = 0; i < 5; i++) {
      results.push(await client.execute(fiat({ amount: 10 + i })))
    }
    assert.isAbove(emu.admin.faultStats().errors, 0)
    assert.isAbove(sleeps.length, 0)
    assert.lengthOf(emu.admin.payouts(), 5)
    assert.lengthOf(new Set(results.map((r) => r.payoutId)), 5)
  })

  test('429 from the emulator is waited out per Retry-After', async ({ assert, cleanup }) => {
    const { emu, client, sleeps, fiat } = await setup(cleanup)
    const body = fiat()
    for (let i = 0; i < 10; i++) await client.execute(body)
    // The next call gets 429 Retry-After: 2; the test's sleep advances the emulated clock.
    const advancing = advancingClient(emu, sleeps, cleanup)
    const result = await advancing.execute(body)
    assert.isString(result.payoutId)
    assert.deepEqual(sleeps, [2000])
  })

  test('an exhausted execute family waits for X-RateLimit-Reset instead of earning a 429', async ({
    assert,
    cleanup,
  }) => {
    const { emu, fiat } = await setup(cleanup)
    // The emulated clock runs an hour ahead of this machine's: the reset is read against
    // the emulator's Date, so the wait is the bucket's refill, not the hour.
    await emu.admin.advance(3600_000)
    const sleeps: number[] = []
    const client = advancingClient(emu, sleeps, cleanup)
    const body = fiat()
    for (let i = 0; i < 10; i++) await client.execute(body)
    assert.equal(client.rateLimit?.remaining, 0)
    assert.deepEqual(sleeps, [])
    await client.execute(body)
    assert.equal(emu.admin.faultStats().throttled, 0, 'no 429 was earned')
    // Burst 10 at 30/min refills in 20 s; the Date header's whole seconds add at most 1 s.
    assert.lengthOf(sleeps, 1)
    assert.isAtLeast(sleeps[0], 19_000)
    assert.isAtMost(sleeps[0], 21_000)
  })
})
