import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { DateTime, type DurationLike } from 'luxon'
import type { PayoutsService } from '../../src/service/payouts_service.ts'
import { PayoutsResponseError, ServerError } from '../../src/client/main.ts'
import { Reconciler } from '../../src/jobs/reconciler.ts'
import { E_PAYOUTS_ESCROW_CONFIRMATION_IN_FLIGHT } from '../../src/errors.ts'
import { EscrowDeposit, Payout } from '../../src/models/main.ts'
import { executeBodies, fiatBody, startEmulator, testClient } from '../emulator/helpers.ts'
import { TEST_API_KEY } from '../helpers/app.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'
import { startRecordingProxy } from '../helpers/recording_proxy.ts'
import { startScriptedServer, type Reply } from '../helpers/scripted_server.ts'
import { partsOf } from '../../src/service/payouts_service.ts'

async function setup(
  cleanup: (fn: () => Promise<void>) => void,
  payouts: Record<string, any> = {}
) {
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const wire = await startRecordingProxy(cleanup, emu.baseUrl)
  const app = await startHttpApp(cleanup, {
    apiKey: emu.apiKey,
    baseUrl: wire.baseUrl,
    clientRateLimiter: false,
    ...payouts,
  })
  /** confirm-escrow requests that reached the service. */
  const confirmRequests = () => wire.count('POST', '/rfq/confirm-escrow-deposit')
  const { fiat, stable } = executeBodies(emu, '0x' + '8'.repeat(40))
  return { emu, app, payouts: app.payouts, fiat, stable, confirmRequests }
}

/** Records the host's sighting of a deposit as made `age` ago (the fallback waits before confirming). */
function recordDepositAgo(
  payouts: PayoutsService,
  quoteId: string,
  txHash: string,
  age: DurationLike
) {
  return payouts.escrow.recordDeposit({ quoteId, txHash, confirmedAt: DateTime.now().minus(age) })
}

/**
 * A stablecoin payout whose deposit the host recorded an hour ago with the wrong transaction;
 * the fallback gives a confirmation one attempt.
 */
async function setupWrongDeposit(cleanup: (fn: () => Promise<void>) => void) {
  const parts = await setup(cleanup, { jobs: { escrowMaxAttempts: 1 } })
  const { result } = await parts.payouts.execute(parts.stable)
  await recordDepositAgo(parts.payouts, result.quoteId, '0x' + 'd'.repeat(64), { hours: 1 })
  return { ...parts, result }
}

test.group(`Jobs | escrow fallback (${TEST_DB})`, () => {
  test('a missed deposit is confirmed once, only after the wait, never before', async ({
    assert,
    cleanup,
  }) => {
    const { emu, app, payouts, stable, confirmRequests } = await setup(cleanup)
    const { result } = await payouts.execute(stable)
    const { txHash } = emu.admin.simulateDeposit({ quoteId: result.quoteId, detect: false })
    await recordDepositAgo(payouts, result.quoteId, txHash, { minutes: 9 })
    assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 0, confirmed: 0 })
    assert.equal(emu.admin.quote(result.quoteId)!.status, 'awaiting_escrow_deposit')
    await recordDepositAgo(payouts, result.quoteId, txHash, { minutes: 11 })
    assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 1, confirmed: 1 })
    assert.equal(emu.admin.quote(result.quoteId)!.status, 'deposit_confirmed')
    assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 0 })
    assert.equal(confirmRequests(), 1)
    assert.equal((await EscrowDeposit.findByOrFail('quoteId', result.quoteId)).state, 'confirmed')
    assert.lengthOf(
      app.events.filter((e) => e.name === 'payouts:escrow_confirmed'),
      1
    )
  })

  test('recording a deposit while its confirmation is in flight neither resets nor repeats it', async ({
    assert,
    cleanup,
  }) => {
    const { emu, payouts, stable, confirmRequests } = await setup(cleanup)
    const { result } = await payouts.execute(stable)
    const { txHash } = emu.admin.simulateDeposit({ quoteId: result.quoteId, detect: false })
    await recordDepositAgo(payouts, result.quoteId, txHash, { minutes: 30 })
    // Another instance's run has claimed it and is waiting for the service's answer.
    const deposit = await EscrowDeposit.findByOrFail('quoteId', result.quoteId)
    deposit.merge({ state: 'confirm_requested', confirmAttemptedAt: DateTime.now() })
    await deposit.save()

    const again = await payouts.escrow.recordDeposit({ quoteId: result.quoteId, txHash })
    assert.equal(again.state, 'confirm_requested')
    const otherHash = '0x' + 'e'.repeat(64)
    const error = await payouts.escrow
      .recordDeposit({ quoteId: result.quoteId, txHash: otherHash })
      .catch((e) => e)
    assert.instanceOf(error, E_PAYOUTS_ESCROW_CONFIRMATION_IN_FLIGHT)
    assert.equal(error.status, 409)
    const stored = await EscrowDeposit.findByOrFail('quoteId', result.quoteId)
    assert.deepEqual([stored.state, stored.txHash], ['confirm_requested', txHash])
    // Not claimed a second time while the first attempt may still be answered.
    assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 0 })
    assert.equal(confirmRequests(), 0)
  })

  test('a deposit the service detects is confirmed with the payout that shows it, once, before the payout events', async ({
    assert,
    cleanup,
  }) => {
    const { emu, app, payouts, stable, confirmRequests } = await setup(cleanup)
    const { result } = await payouts.execute(stable)
    const { txHash } = emu.admin.simulateDeposit({ quoteId: result.quoteId })
    await emu.admin.advance(60_000)
    // Polling brings the payout out of pending: the deposit moves in the same COMMIT.
    await payouts.reconcile({ staleAfterMs: 0 })
    const payout = await Payout.findByOrFail('payoutUuid', result.payoutId)
    assert.notEqual(payout.status, 'pending')
    const deposit = await EscrowDeposit.findByOrFail('quoteId', result.quoteId)
    assert.equal(deposit.state, 'confirmed')
    assert.isNotNull(deposit.confirmedByEventId)
    const names = app.events.map((e) => e.name).filter((name) => name.startsWith('payouts:'))
    assert.deepEqual(
      app.events.filter((e) => e.name === 'payouts:escrow_confirmed').map((e) => e.data),
      [
        {
          account: 'main',
          quoteId: result.quoteId,
          payoutId: result.payoutId,
          txHash: null,
          eventKey: `${result.quoteId}:payouts:escrow_confirmed`,
        },
      ]
    )
    // The execute's creation, then the deposit, then the change that showed it.
    assert.deepEqual(names.slice(0, 3), [
      'payouts:created',
      'payouts:escrow_confirmed',
      'payouts:status_updated',
    ])
    // The host's own record afterwards changes nothing, and nothing is confirmed by hand.
    const recorded = await recordDepositAgo(payouts, result.quoteId, txHash, { minutes: 30 })
    assert.equal(recorded.state, 'confirmed')
    assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 0 })
    await emu.admin.advance(600_000)
    await payouts.reconcile({ staleAfterMs: 0 })
    assert.lengthOf(
      app.events.filter((e) => e.name === 'payouts:escrow_confirmed'),
      1
    )
    assert.equal(confirmRequests(), 0)
  })

  test('a deposit detected automatically is not confirmed by hand', async ({ assert, cleanup }) => {
    const { emu, payouts, stable, confirmRequests } = await setup(cleanup)
    const { result } = await payouts.execute(stable)
    const { txHash } = emu.admin.simulateDeposit({ quoteId: result.quoteId })
    await emu.admin.advance(60_000)
    await recordDepositAgo(payouts, result.quoteId, txHash, { minutes: 30 })
    assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 1, detected: 1, confirmed: 0 })
    assert.equal(confirmRequests(), 0)
  })

  test('a confirmation answered 500 is recorded and surfaced, never retried; a new transaction is confirmed afresh', async ({
    assert,
    cleanup,
  }) => {
    const { emu, app, payouts, result, confirmRequests } = await setupWrongDeposit(cleanup)
    assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 1, failed: 1 })
    const deposit = await EscrowDeposit.findByOrFail('quoteId', result.quoteId)
    assert.equal(deposit.state, 'confirm_failed')
    assert.equal(deposit.lastError, 'escrow deposit confirmation failed')
    assert.lengthOf(
      app.events.filter((e) => e.name === 'payouts:escrow_confirmation_failed'),
      1
    )
    assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 0 })
    assert.equal(confirmRequests(), 1)

    // The right transaction, recorded afterwards, is confirmed afresh (its own key).
    const { txHash } = emu.admin.simulateDeposit({ quoteId: result.quoteId, detect: false })
    await recordDepositAgo(payouts, result.quoteId, txHash, { hours: 1 })
    assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 1, confirmed: 1 })
    assert.equal(emu.admin.quote(result.quoteId)!.status, 'deposit_confirmed')
    const confirmed = await EscrowDeposit.findByOrFail('quoteId', result.quoteId)
    assert.deepEqual([confirmed.state, confirmed.attempts], ['confirmed', 0])
    assert.equal(confirmRequests(), 2)
  })

  test('a deposit the service detects after its confirmation failed is confirmed by that change', async ({
    assert,
    cleanup,
  }) => {
    const { emu, app, payouts, result, confirmRequests } = await setupWrongDeposit(cleanup)
    assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 1, failed: 1 })
    assert.deepInclude(await payouts.health().then((h) => h.checks.escrowFailed), { value: 1 })
    // The real deposit arrives and the service sees it; a poll shows the payout moving.
    emu.admin.simulateDeposit({ quoteId: result.quoteId })
    await emu.admin.advance(60_000)
    await payouts.reconcile({ staleAfterMs: 0 })
    assert.equal((await EscrowDeposit.findByOrFail('quoteId', result.quoteId)).state, 'confirmed')
    assert.deepInclude(await payouts.health().then((h) => h.checks.escrowFailed), { value: 0 })
    const names = app.events.map((e) => e.name).filter((name) => name.startsWith('payouts:escrow'))
    assert.deepEqual(names, ['payouts:escrow_confirmation_failed', 'payouts:escrow_confirmed'])
    assert.equal(confirmRequests(), 1)
  })
})

/** A 500 from confirm-escrow, whatever its body says (the spec: texts may be reworded). */
const FAILURES: Array<{ name: string; reply: Reply }> = [
  {
    name: 'a reworded error',
    reply: { status: 500, body: { success: false, error: 'the deposit could not be verified' } },
  },
  { name: '{"success":false}', reply: { status: 500, body: { success: false } } },
  {
    name: 'an HTML error page',
    reply: {
      status: 500,
      raw: '<!doctype html><html><body><h1>500 Internal Server Error</h1></body></html>',
      headers: { 'content-type': 'text/html' },
    },
  },
]

/**
 * An app on a scripted service (real HTTP on 127.0.0.1) that answers the quote status and
 * confirm-escrow as the test says, with one recorded deposit waiting for the fallback.
 */
async function scriptedEscrow(
  cleanup: (fn: () => Promise<void>) => void,
  failure: Reply,
  options: { detectedByConfirm?: boolean } = {}
) {
  const quoteId = randomUUID()
  const payoutId = randomUUID()
  const txHash = '0x' + 'a'.repeat(64)
  let quoteStatus = 'awaiting_escrow_deposit'
  const server = await startScriptedServer((req) => {
    if (req.method === 'GET' && req.url.pathname === `/rfq/status/${quoteId}`) {
      return { status: 200, body: { quoteId, status: quoteStatus } }
    }
    if (req.method === 'POST' && req.url.pathname === '/rfq/confirm-escrow-deposit') {
      // The service detected the deposit meanwhile: the quote moved, so confirm answers 500.
      if (options.detectedByConfirm) quoteStatus = 'deposit_confirmed'
      return failure
    }
    return { status: 404, body: { success: false, error: 'not found' } }
  })
  cleanup(() => server.close())
  const app = await startHttpApp(cleanup, {
    apiKey: TEST_API_KEY,
    baseUrl: server.baseUrl,
    clientRateLimiter: false,
    // Retries cost a millisecond here: a blind retry would show in the request count.
    retry: { maxRetries: 5, baseDelayMs: 1, jitter: 0 },
    jobs: { escrowMaxAttempts: 3, escrowRetryBackoffMs: 60_000 },
  })
  await partsOf(app.payouts)
  await EscrowDeposit.create({ quoteId, payoutUuid: payoutId, state: 'awaiting_deposit' })
  await recordDepositAgo(app.payouts, quoteId, txHash, { hours: 1 })
  /** What reached the service, in order: `status` reads and `confirm` requests. */
  const wire = () =>
    server.requests.map((r) => (r.url.pathname.startsWith('/rfq/status/') ? 'status' : 'confirm'))
  const row = () => EscrowDeposit.findByOrFail('quoteId', quoteId)
  /** The backoff has passed (the job's clock is the wall clock). */
  const backoffPassed = async () => {
    const deposit = await row()
    deposit.nextAttemptAt = DateTime.now().minus({ seconds: 1 })
    await deposit.save()
  }
  const events = (name: string) => app.events.filter((e) => e.name === name).map((e) => e.data)
  return { app, payouts: app.payouts, quoteId, payoutId, txHash, wire, row, backoffPassed, events }
}

test.group(`Jobs | escrow fallback, a 500 whatever its body (${TEST_DB})`, () => {
  test(
    '{name}: one request per attempt, the state read before deciding, bounded attempts, one alert'
  )
    .with(FAILURES)
    .run(async ({ assert, cleanup }, { reply }) => {
      const { payouts, quoteId, payoutId, txHash, wire, row, backoffPassed, events } =
        await scriptedEscrow(cleanup, reply)
      const attempt = ['status', 'confirm', 'status']

      const before = DateTime.now()
      assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 1, waiting: 1, failed: 0 })
      const after = DateTime.now()
      assert.deepEqual(wire(), attempt)
      let deposit = await row()
      assert.deepEqual(
        [deposit.state, deposit.attempts, deposit.lastErrorCode],
        ['deposit_recorded', 1, 'ESCROW_CONFIRMATION_FAILED']
      )
      // Tried again later, not on the next run.
      assert.isAtLeast(deposit.nextAttemptAt!.toMillis(), before.toMillis() + 60_000 - 1000)
      assert.isAtMost(deposit.nextAttemptAt!.toMillis(), after.toMillis() + 60_000 + 1000)
      assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 0 })
      assert.deepEqual(wire(), attempt)

      await backoffPassed()
      const second = DateTime.now()
      assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 1, waiting: 1 })
      assert.deepEqual(wire(), [...attempt, ...attempt])
      deposit = await row()
      assert.equal(deposit.attempts, 2)
      // The wait doubles.
      assert.isAtLeast(deposit.nextAttemptAt!.toMillis(), second.toMillis() + 120_000 - 1000)
      assert.lengthOf(events('payouts:escrow_confirmation_failed'), 0)

      await backoffPassed()
      assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 1, failed: 1, waiting: 0 })
      assert.deepEqual(wire(), [...attempt, ...attempt, ...attempt])
      deposit = await row()
      assert.deepEqual([deposit.state, deposit.attempts], ['confirm_failed', 3])
      assert.deepEqual(events('payouts:escrow_confirmation_failed'), [
        {
          account: 'main',
          quoteId,
          payoutId,
          txHash,
          attempts: 3,
          code: 'ESCROW_CONFIRMATION_FAILED',
          eventKey: `${quoteId}:${txHash}:payouts:escrow_confirmation_failed`,
        },
      ])

      // Done: later runs neither send nor alert again.
      await backoffPassed()
      assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 0 })
      assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 0 })
      assert.lengthOf(wire(), 9)
      assert.lengthOf(events('payouts:escrow_confirmation_failed'), 1)
      assert.lengthOf(events('payouts:escrow_confirmed'), 0)
      assert.deepInclude(await payouts.health().then((h) => h.checks.escrowFailed), { value: 1 })
    })

  test('{name}: a deposit the service detected meanwhile is confirmed locally, without an alert')
    .with(FAILURES)
    .run(async ({ assert, cleanup }, { reply }) => {
      const { payouts, quoteId, payoutId, txHash, wire, row, events } = await scriptedEscrow(
        cleanup,
        reply,
        { detectedByConfirm: true }
      )
      assert.deepInclude(await payouts.escrow.confirmDue(), {
        checked: 1,
        detected: 1,
        failed: 0,
        waiting: 0,
      })
      assert.deepEqual(wire(), ['status', 'confirm', 'status'])
      assert.equal((await row()).state, 'confirmed')
      assert.deepEqual(events('payouts:escrow_confirmed'), [
        {
          account: 'main',
          quoteId,
          payoutId,
          txHash,
          eventKey: `${quoteId}:payouts:escrow_confirmed`,
        },
      ])
      assert.lengthOf(events('payouts:escrow_confirmation_failed'), 0)
      assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 0 })
      assert.lengthOf(wire(), 3)
    })
  test('recording the same deposit again keeps its bound; after the alert it starts afresh', async ({
    assert,
    cleanup,
  }) => {
    const { payouts, quoteId, txHash, row, backoffPassed, events } = await scriptedEscrow(cleanup, {
      status: 500,
      body: { success: false },
    })
    const confirmedAt = DateTime.now().minus({ hours: 1 })
    assert.deepInclude(await payouts.escrow.confirmDue(), { waiting: 1 })
    const waiting = await row()
    await payouts.escrow.recordDeposit({ quoteId, txHash, confirmedAt })
    const again = await row()
    assert.deepEqual(
      [again.state, again.attempts, again.nextAttemptAt?.toMillis()],
      ['deposit_recorded', 1, waiting.nextAttemptAt!.toMillis()]
    )
    for (let run = 0; run < 2; run++) {
      await backoffPassed()
      await payouts.escrow.confirmDue()
    }
    assert.equal((await row()).state, 'confirm_failed')
    assert.lengthOf(events('payouts:escrow_confirmation_failed'), 1)
    // A human records it again: a new budget, due now.
    await payouts.escrow.recordDeposit({ quoteId, txHash, confirmedAt })
    const rearmed = await row()
    assert.deepEqual(
      [rearmed.state, rearmed.attempts, rearmed.nextAttemptAt, rearmed.lastErrorCode],
      ['deposit_recorded', 0, null, null]
    )
    assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 1, waiting: 1 })
  })

  test('no answer or a gateway error is no verdict: retried within the call as transient, no attempt counted', async ({
    assert,
    cleanup,
  }) => {
    for (const reply of [{ status: 503, body: { error: 'unavailable' } }, 'reset'] as Reply[]) {
      const { payouts, wire, row, events } = await scriptedEscrow(cleanup, reply)
      // The client's retries of a transient failure (idempotent on quote and transaction).
      const perCall = 1 + payouts.config.retry.maxRetries
      for (let run = 1; run <= 2; run++) {
        assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 1, waiting: 1 })
        const confirms = wire().filter((r) => r === 'confirm').length
        assert.equal(confirms, run * perCall, JSON.stringify(reply))
        const deposit = await row()
        assert.deepEqual([deposit.state, deposit.attempts], ['deposit_recorded', 0])
        assert.isNull(deposit.nextAttemptAt)
      }
      assert.lengthOf(events('payouts:escrow_confirmation_failed'), 0)
    }
  })

  test('a payout the ledger saw leave pending confirms its deposit from the local row, no request', async ({
    assert,
    cleanup,
  }) => {
    const { payouts, quoteId, payoutId, txHash, wire, row, events } = await scriptedEscrow(
      cleanup,
      { status: 500, body: { success: false } }
    )
    // A run claimed the deposit and died; meanwhile a webhook moved the payout (the ledger
    // leaves a claimed deposit to its run).
    const deposit = await row()
    deposit.merge({
      state: 'confirm_requested',
      confirmAttemptedAt: DateTime.now().minus({ minutes: 30 }),
    })
    await deposit.save()
    const { ledger } = await partsOf(payouts)
    await ledger.apply({
      payoutId,
      status: 'processing',
      step: 'collected',
      source: 'webhook',
      fields: { flow: 'stablecoin_to_fiat' },
    })
    assert.equal((await row()).state, 'confirm_requested')
    assert.deepInclude(await payouts.escrow.confirmDue(), { checked: 1, detected: 1 })
    assert.deepEqual(wire(), [])
    assert.equal((await row()).state, 'confirmed')
    assert.deepEqual(events('payouts:escrow_confirmed'), [
      {
        account: 'main',
        quoteId,
        payoutId,
        txHash,
        eventKey: `${quoteId}:payouts:escrow_confirmed`,
      },
    ])
  })
})

/** An emulator and an app its webhooks reach (subscribed to payout events). */
async function subscribedApp(cleanup: (fn: () => Promise<void>) => void) {
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const client = testClient(cleanup, emu, { allowInsecureLoopbackWebhooks: true })
  const sub = await client.webhooks.subscriptions.create({
    url: 'https://placeholder.example/h',
    events: ['payout.created', 'payout.status.updated'],
  })
  const app = await startHttpApp(cleanup, {
    apiKey: emu.apiKey,
    baseUrl: emu.baseUrl,
    webhook: { secret: sub.secret },
  })
  await client.webhooks.subscriptions.update(sub.id, { url: `${app.url}/webhooks/payouts` })
  return { emu, app }
}

test.group(`Jobs | reconciliation (${TEST_DB})`, () => {
  test('a dropped webhook is recovered by reconciliation', async ({ assert, cleanup }) => {
    const { emu, app } = await subscribedApp(cleanup)
    const { result } = await app.payouts.execute(fiatBody(emu, { amount: 50 }))
    await emu.admin.advance(2000)
    await app.payouts.drainInbox()
    assert.equal(
      (await Payout.findByOrFail('payoutUuid', result.payoutId)).step,
      'compliance_cleared'
    )
    emu.admin.setFaults({ webhookDropRate: 1 })
    await emu.admin.advance(20_000)
    await app.payouts.drainInbox()
    assert.equal((await Payout.findByOrFail('payoutUuid', result.payoutId)).status, 'processing')
    const summary = await app.payouts.reconcile({ staleAfterMs: 0 })
    assert.deepInclude(summary, { checked: 1, changed: 1 })
    const payout = await Payout.findByOrFail('payoutUuid', result.payoutId)
    assert.deepEqual([payout.status, payout.step], ['completed', 'delivered'])
    assert.match(payout.readId!, /^po_/)
    assert.lengthOf(
      app.events.filter((e) => e.name === 'payouts:completed'),
      1
    )
  })

  test('updates that name payouts by their read id are merged into the executed rows by reconciliation', async ({
    assert,
    cleanup,
  }) => {
    const { emu, app } = await subscribedApp(cleanup)
    emu.admin.setFaults({ readIdRate: 0.5 }, 7)
    const { fiat } = executeBodies(emu)
    const executed: string[] = []
    for (let i = 0; i < 4; i++) {
      const { result } = await app.payouts.execute({ ...fiat, amount: 50 + i })
      executed.push(result.payoutId)
    }
    await emu.admin.advance(30_000)
    await app.payouts.drainInbox()
    const placeholders = await Payout.query().where('payout_uuid', 'like', 'po_%')
    assert.isAbove(placeholders.length, 0, 'some payouts were first seen by their read id')

    await app.payouts.reconcile({ staleAfterMs: 0 })
    const rows = await Payout.query().orderBy('payout_uuid')
    assert.deepEqual(
      rows.map((r) => [r.payoutUuid, r.readId, r.status, r.step]),
      [...executed]
        .sort()
        .map((id) => [
          id,
          emu.admin.payouts().find((p) => p.payoutId === id)!.id,
          'completed',
          'delivered',
        ]),
      'one row per executed payout, with both ids, at the service position'
    )
    for (const id of executed) {
      assert.lengthOf(
        app.events.filter((e) => e.name === 'payouts:completed' && e.data.payoutId === id),
        1,
        `one completion for ${id}`
      )
    }
  })

  test('payouts stuck past the SLA raise payouts:stuck once', async ({ assert, cleanup }) => {
    const { emu, app, payouts, fiat } = await setup(cleanup, { jobs: { stuckAfterMs: 1 } })
    await payouts.execute({ ...fiat, reference: 'scenario:stall' })
    await payouts.execute(fiat)
    await emu.admin.advance(60_000)
    await new Promise((resolve) => setTimeout(resolve, 5))
    const first = await payouts.reconcile({ staleAfterMs: 0 })
    assert.equal(first.stuck, 1)
    assert.equal((await payouts.reconcile({ staleAfterMs: 0 })).stuck, 0)
    const stuck = app.events.filter((e) => e.name === 'payouts:stuck')
    assert.lengthOf(stuck, 1)
    assert.deepInclude(stuck[0].data, { status: 'processing', step: 'collected' })
  })

  test('reconciling more payouts than the budget allows causes no 429 and resumes where it stopped', async ({
    assert,
    cleanup,
  }) => {
    const { emu, payouts, fiat } = await setup(cleanup, {
      reconcile: { budgetShare: 0.5, batchSize: 100 },
    })
    const ids = []
    for (let i = 0; i < 30; i++) ids.push((await payouts.execute(fiat)).result.payoutId)
    emu.admin.setRateLimits(1)
    const first = await payouts.reconcile({ staleAfterMs: 0 })
    assert.isTrue(first.stoppedForBudget)
    assert.isAbove(first.checked, 0)
    assert.isBelow(first.checked, 30)
    // The budget kept the pass under the emulator's limit: not one request was refused.
    assert.equal(emu.admin.faultStats().throttled, 0)
    await emu.admin.advance(60_000)
    const second = await payouts.reconcile({ staleAfterMs: 0 })
    assert.isAbove(second.checked, 0)
    // Oldest observation first: the second run read payouts the first one did not.
    const polled = await Payout.query()
      .whereIn('payout_uuid', ids)
      .orderBy('last_observed_at', 'asc')
    assert.lengthOf(polled, 30)
    assert.isTrue(first.checked + second.checked <= 30)
  })

  test('a read failure is judged on its status, never its words: {name}')
    .with([
      {
        name: '403 environment_scope mismatch stops the run',
        reply: { status: 403, body: { error: 'environment_scope mismatch' } },
        summary: { checked: 1, stoppedForError: true, missing: 0, failed: 0 },
      },
      {
        name: 'a 500 whose body says NOT_FOUND stops the run',
        reply: { status: 500, body: { code: 'NOT_FOUND', error: 'not found' } },
        summary: { checked: 1, stoppedForError: true, missing: 0, failed: 0 },
      },
      {
        name: 'a 404 whose body says RATE_LIMITED is one missing payout',
        reply: { status: 404, body: { code: 'RATE_LIMITED', error: 'rate limit exceeded' } },
        summary: { checked: 2, stoppedForError: false, missing: 2, failed: 0 },
      },
      {
        name: 'a 400 with a reworded body is one failed payout',
        reply: { status: 400, body: { error: 'that id looks odd' } },
        summary: { checked: 2, stoppedForError: false, missing: 0, failed: 2 },
      },
    ] as Array<{ name: string; reply: Reply; summary: Record<string, unknown> }>)
    .run(async ({ assert, cleanup }, { reply, summary }) => {
      const server = await startScriptedServer([reply])
      cleanup(() => server.close())
      const app = await startHttpApp(cleanup, {
        apiKey: TEST_API_KEY,
        baseUrl: server.baseUrl,
        clientRateLimiter: false,
        retry: { maxRetries: 0 },
      })
      const { ledger } = await partsOf(app.payouts)
      for (let i = 0; i < 2; i++) {
        await ledger.apply({ payoutId: randomUUID(), status: 'pending', source: 'execute' })
      }
      assert.deepInclude(await app.payouts.reconcile({ staleAfterMs: 0 }), summary)
      assert.lengthOf(server.requests, summary.checked as number)
    })

  test('a payout the service answers badly is skipped; a failing service stops the run', async ({
    assert,
    cleanup,
  }) => {
    const { emu, app, payouts, fiat } = await setup(cleanup)
    emu.admin.setFaults({ webhookDropRate: 1 })
    const poisoned = (await payouts.execute(fiat)).result.payoutId
    const healthy = (await payouts.execute(fiat)).result.payoutId
    await emu.admin.advance(60_000)
    const { db, ledger } = await partsOf(payouts)
    const reconcileWith = (failure: (status: number) => Error) =>
      new Reconciler({
        db,
        ledger,
        client: {
          rateLimit: null,
          getPayout: (id: string) =>
            id === poisoned ? Promise.reject(failure(200)) : payouts.client.getPayout(id),
        } as any,
      }).run({ staleAfterMs: 0 })

    // The poisoned payout is read first (oldest observation) and must not block the next.
    const server = await reconcileWith((status) => new ServerError({ status: status + 300 }))
    assert.deepInclude(server, { checked: 1, changed: 0, stoppedForError: true })
    const healthyRow = () => Payout.findByOrFail('payoutUuid', healthy)
    assert.equal((await healthyRow()).status, 'pending')

    const bad = await reconcileWith((status) => new PayoutsResponseError({ status }))
    assert.deepInclude(bad, { checked: 2, changed: 1, failed: 1, stoppedForError: false })
    assert.equal((await healthyRow()).status, 'completed')
    assert.equal((await Payout.findByOrFail('payoutUuid', poisoned)).status, 'pending')
    assert.lengthOf(
      app.events.filter((e) => e.name === 'payouts:completed'),
      1
    )
  })
})
