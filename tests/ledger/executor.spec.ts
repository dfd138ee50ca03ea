import { test } from '@japa/runner'
import { DateTime } from 'luxon'
import {
  PayoutsNetworkError,
  PayoutsValidationError,
  RateLimitedError,
} from '../../src/client/main.ts'
import { PayoutExecutor } from '../../src/ledger/payout_executor.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import type { PayoutChange } from '../../src/ledger/vocabulary.ts'
import { EscrowDeposit, ExecutionIntent, Payout } from '../../src/models/main.ts'
import {
  executeBodies,
  LOSING_CLIENT,
  loseAnswer,
  startEmulator,
  testClient,
} from '../emulator/helpers.ts'
import { TEST_API_KEY } from '../helpers/app.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'
import { startScriptedServer } from '../helpers/scripted_server.ts'
import { startCrashChild } from './fixtures/crash_parent.ts'

async function setup(
  cleanup: (fn: () => Promise<void>) => void,
  clientOptions: Record<string, unknown> = {}
) {
  const { db, prefix } = await setupDatabase(cleanup, 'executor')
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const client = testClient(cleanup, emu, clientOptions)
  const changes: PayoutChange[] = []
  const ledger = new PayoutLedger(db, { onChange: (c) => void changes.push(c) })
  const executor = new PayoutExecutor({ db, ledger, client })
  const body = executeBodies(emu).fiat
  return { db, prefix, emu, client, ledger, executor, body, changes }
}

test.group(`Ledger | executor (${TEST_DB})`, () => {
  test('stores the intent before sending, then the payout, and fires one created change', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, body, changes } = await setup(cleanup)
    const { result, payout, intent } = await executor.execute(body, { ownerId: 'tenant-1' })
    assert.equal(intent.state, 'succeeded')
    assert.equal(emu.admin.payouts()[0].idempotencyKey, intent.idempotencyKey)
    assert.equal(payout.payoutUuid, result.payoutId)
    assert.deepEqual(
      [payout.status, payout.step, payout.ownerId, payout.flow],
      ['pending', 'initiated', 'tenant-1', 'fiat_to_fiat']
    )
    assert.equal(payout.sourceAmount, '100')
    assert.property(payout.instructions!, 'bankingInstructions')
    assert.notProperty(payout.serialize(), 'instructions')
    assert.lengthOf(changes, 1)
  })

  test('a stablecoin payout stores its escrow deposit, atomic amount as a string', async ({
    assert,
    cleanup,
  }) => {
    const { executor, body } = await setup(cleanup)
    const { result } = await executor.execute({
      ...body,
      fromCurrency: 'USDC',
      userPaymentMethodId: undefined,
      walletAddress: '0x' + '6'.repeat(40),
    } as any)
    const deposit = await EscrowDeposit.findByOrFail('quoteId', result.quoteId)
    assert.equal(deposit.amountAtomic, '100000000')
    assert.equal(deposit.state, 'awaiting_deposit')
  })

  test('a business-rule error marks the intent failed and stores no payout', async ({
    assert,
    cleanup,
  }) => {
    const { executor, body } = await setup(cleanup)
    await assert.rejects(() => executor.execute({ ...body, fromCurrency: 'JPY', amount: 5 }))
    const [intent] = await ExecutionIntent.all()
    assert.equal(intent.state, 'failed')
    assert.equal(intent.error?.code, 'AMOUNT_OUT_OF_BOUNDS')
    assert.lengthOf(await Payout.all(), 0)
  })

  test('input the plugin refuses itself sends nothing and leaves nothing to recover', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, body } = await setup(cleanup)
    const refused: Array<[Record<string, unknown>, string]> = [
      [{ ...body, amount: 0 }, 'amount'],
      [{ ...body, amount: -5 }, 'amount'],
      [{ ...body, amount: Number.NaN }, 'amount'],
      [{ ...body, flow: 'teleport' }, 'flow'],
      [{ ...body, flow: 'x'.repeat(40) }, 'flow'],
      [{ ...body, recipientId: undefined }, 'recipientId'],
      [{ ...body, fromCurrency: 'USDC', userPaymentMethodId: undefined }, 'walletAddress'],
    ]
    for (const [input, field] of refused) {
      const error = await executor.execute(input as any).catch((e) => e)
      assert.instanceOf(error, PayoutsValidationError, field)
      assert.equal(error.field, field)
    }
    assert.equal(emu.state.idempotency.size, 0, 'nothing reached the service')
    const intents = await ExecutionIntent.all()
    assert.deepEqual(
      intents.filter((intent) => ['pending', 'unknown', 'needs_attention'].includes(intent.state)),
      [],
      'no intent says a request may have gone out'
    )
    assert.deepInclude(await executor.recover({ olderThanMs: 0 }), { resent: 0, flagged: 0 })
    assert.equal(emu.state.idempotency.size, 0)
  })

  test('a request that provably never left (connection refused) is refused, not unknown', async ({
    assert,
    cleanup,
  }) => {
    const { db, ledger, body } = await setup(cleanup)
    const closed = await startScriptedServer([{ status: 200, body: {} }])
    await closed.close()
    const client = testClient(
      cleanup,
      { apiKey: TEST_API_KEY, baseUrl: closed.baseUrl },
      { retry: { maxRetries: 0 } }
    )
    const executor = new PayoutExecutor({ db, ledger, client })
    const error = await executor.execute(body).catch((e) => e)
    assert.instanceOf(error, PayoutsNetworkError)
    assert.isFalse(error.outcomeUnknown)
    const [intent] = await ExecutionIntent.all()
    assert.equal(intent.state, 'refused')
    assert.deepInclude(intent.error!, { code: 'NETWORK_ERROR', outcomeUnknown: false })
    assert.deepInclude(await executor.recover({ olderThanMs: 0 }), { resent: 0 })
    assert.equal((await intent.refresh()).state, 'refused')
  })

  test('a 429 whose wait is past the ceiling took no effect: refused, not unknown', async ({
    assert,
    cleanup,
  }) => {
    const { db, ledger, body } = await setup(cleanup)
    // The service refuses the only attempt: a 429 is not processed (spec, Errors).
    const server = await startScriptedServer([
      { status: 429, body: { error: 'rate limit exceeded' }, headers: { 'retry-after': '86400' } },
    ])
    cleanup(() => server.close())
    const client = testClient(cleanup, { apiKey: TEST_API_KEY, baseUrl: server.baseUrl })
    const executor = new PayoutExecutor({ db, ledger, client })
    const error = await executor.execute(body).catch((e) => e)
    assert.instanceOf(error, RateLimitedError)
    assert.lengthOf(server.requests, 1)
    const [intent] = await ExecutionIntent.all()
    assert.equal(intent.state, 'refused')
    assert.deepInclude(await executor.recover({ olderThanMs: 0 }), { resent: 0 })
    assert.lengthOf(server.requests, 1)
  })

  test('an intent that may have been sent stays unknown when a later attempt never leaves', async ({
    assert,
    cleanup,
  }) => {
    const { emu, db, ledger, client, body } = await setup(cleanup, LOSING_CLIENT)
    await loseAnswer(emu, () => new PayoutExecutor({ db, ledger, client }).execute(body))
    const intent = await ExecutionIntent.firstOrFail()
    assert.equal(intent.state, 'unknown')
    const closed = await startScriptedServer([{ status: 200, body: {} }])
    await closed.close()
    const offline = testClient(
      cleanup,
      { apiKey: TEST_API_KEY, baseUrl: closed.baseUrl },
      { retry: { maxRetries: 0 } }
    )
    const summary = await new PayoutExecutor({ db, ledger, client: offline }).recover({
      olderThanMs: 0,
    })
    assert.deepInclude(summary, { resent: 1, unknown: 1 })
    assert.equal((await intent.refresh()).state, 'unknown')
  })

  test('a stored body that no longer validates is flagged for a human once it may have gone out', async ({
    assert,
    cleanup,
  }) => {
    const { emu, db, ledger, client, executor, body } = await setup(cleanup, LOSING_CLIENT)
    await loseAnswer(emu, () => executor.execute(body))
    const intent = await ExecutionIntent.firstOrFail()
    assert.equal(intent.state, 'unknown')
    // A body an older version accepted: the client now refuses to send it.
    intent.requestBody = { ...intent.requestBody, amount: 0 }
    await intent.save()
    const summary = await new PayoutExecutor({ db, ledger, client }).recover({ olderThanMs: 0 })
    assert.deepInclude(summary, { resent: 1, flagged: 1, unknown: 0 })
    await intent.refresh()
    assert.equal(intent.state, 'needs_attention')
    assert.deepInclude(intent.error!, { code: 'E_PAYOUTS_VALIDATION', field: 'amount' })
  })

  test('an unknown outcome is recovered with the same key: exactly one payout at the service', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, body } = await setup(cleanup, LOSING_CLIENT)
    // The service processes the request, but the answer comes after the client gave up.
    await loseAnswer(emu, () => executor.execute(body))
    const [intent] = await ExecutionIntent.all()
    assert.equal(intent.state, 'unknown')
    const summary = await executor.recover({ olderThanMs: 0 })
    assert.deepInclude(summary, { resent: 1, succeeded: 1 })
    const payouts = emu.admin.payouts()
    assert.lengthOf(payouts, 1)
    assert.equal(payouts[0].idempotencyKey, intent.idempotencyKey)
    await intent.refresh()
    assert.equal(intent.state, 'succeeded')
    assert.equal(intent.payoutUuid, payouts[0].payoutId)
  })

  test('past the replay window an intent is flagged for a human and never re-sent', async ({
    assert,
    cleanup,
  }) => {
    const { emu, db, ledger, client, body } = await setup(cleanup, { retry: { maxRetries: 0 } })
    emu.admin.setFaults({ resetRate: 1, pathPrefixes: ['/rfq/execute'] })
    const early = new PayoutExecutor({ db, ledger, client })
    await assert.rejects(() => early.execute(body))
    emu.admin.setFaults({})
    const late = new PayoutExecutor({
      db,
      ledger,
      client,
      now: () => DateTime.now().plus({ hours: 23, minutes: 30 }),
    })
    const summary = await late.recover({ olderThanMs: 0 })
    assert.deepInclude(summary, { flagged: 1, resent: 0 })
    assert.equal((await ExecutionIntent.firstOrFail()).state, 'needs_attention')
    assert.lengthOf(emu.admin.payouts(), 0)
  })

  test('crash: a process killed after storing the intent is recovered to exactly one payout', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, body, prefix } = await setup(cleanup)
    emu.admin.setFaults({ processingDelayMs: 800 })
    const { child, exited, output } = startCrashChild({
      connection: 'executor',
      prefix,
      emu,
      work: { CRASH_BODY: JSON.stringify(body) },
    })
    // Kill it once the intent is committed and the request is held by the service.
    const started = Date.now()
    while (!(await ExecutionIntent.first()) || emu.state.idempotency.size === 0) {
      if (Date.now() - started > 20_000)
        throw new Error(`child never sent the request: ${output()}`)
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    child.kill('SIGKILL')
    assert.equal(await exited, 'SIGKILL')
    assert.notInclude(output(), 'finished')
    const intent = await ExecutionIntent.firstOrFail()
    assert.equal(intent.state, 'pending', 'the response was never stored')
    assert.lengthOf(await Payout.all(), 0)
    await new Promise((resolve) => setTimeout(resolve, 900))
    emu.admin.setFaults({})
    const summary = await executor.recover({ olderThanMs: 0 })
    assert.deepInclude(summary, { resent: 1, succeeded: 1 })
    const atService = emu.admin.payouts().filter((p) => p.idempotencyKey === intent.idempotencyKey)
    assert.lengthOf(atService, 1)
    assert.lengthOf(emu.admin.payouts(), 1)
    const local = await Payout.all()
    assert.lengthOf(local, 1)
    assert.equal(local[0].payoutUuid, atService[0].payoutId)
    assert.equal(local[0].ownerId, 'tenant-crash')
  }).timeout(60_000)
})
