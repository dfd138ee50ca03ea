import { test } from '@japa/runner'
import { DateTime } from 'luxon'
import { E_PAYOUTS_INTENT_NEEDS_ATTENTION } from '../../src/errors.ts'
import { PayoutExecutor } from '../../src/ledger/payout_executor.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { Pruner } from '../../src/ledger/pruning.ts'
import { tableNames } from '../../src/database/schema.ts'
import { ExecutionIntent, Payout } from '../../src/models/main.ts'
import { IntentsDesk } from '../../src/service/intents_desk.ts'
import {
  executeBodies,
  LOSING_CLIENT,
  loseAnswer,
  startEmulator,
  testClient,
} from '../emulator/helpers.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

const HOUR = 3_600_000

/**
 * An executor and a pruner on the emulator's clock (manual): a test moves days of the
 * service's time, its idempotency window included, and the plugin reads the same time.
 */
async function acrossTime(
  cleanup: (fn: () => Promise<void>) => void,
  clientOptions: Record<string, unknown> = {}
) {
  const { db, prefix } = await setupDatabase(cleanup, 'idempotency')
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const client = testClient(cleanup, emu, clientOptions)
  const ledger = new PayoutLedger(db)
  const now = () => DateTime.fromMillis(emu.clock.now())
  const executor = new PayoutExecutor({ db, ledger, client, now })
  const pruner = new Pruner({
    db,
    tables: tableNames(prefix),
    processedDeliveriesDays: 30,
    finishedIntentsHours: 48,
    batchSize: 500,
    statementTimeoutMs: 30_000,
    now: () => new Date(emu.clock.now()),
  })
  const body = executeBodies(emu).fiat
  return { db, emu, executor, pruner, body }
}

test.group(`Ledger | an app's idempotency key across days (${TEST_DB})`, () => {
  test('49 h and a prune later, the same key answers the stored payout and sends nothing', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, pruner, body } = await acrossTime(cleanup)
    const first = await executor.execute(body, { idempotencyKey: 'payout-order-42' })
    assert.lengthOf(emu.admin.payouts(), 1)

    await emu.clock.advance(49 * HOUR)
    await pruner.prune()

    const again = await executor.execute(body, { idempotencyKey: 'payout-order-42' })
    assert.equal(again.result.payoutId, first.result.payoutId)
    assert.equal(again.payout.payoutUuid, first.payout.payoutUuid)
    assert.lengthOf(emu.admin.payouts(), 1, 'no second payout at the service')
    assert.lengthOf(await Payout.all(), 1)
    assert.equal(first.intent.keyOrigin, 'app')
  })

  test("a plugin key's succeeded intent is still pruned after its retention", async ({
    assert,
    cleanup,
  }) => {
    const { executor, pruner, body, emu } = await acrossTime(cleanup)
    const { intent } = await executor.execute(body)
    assert.equal(intent.keyOrigin, 'plugin')
    await emu.clock.advance(49 * HOUR)
    assert.equal((await pruner.prune()).finishedIntents, 1)
    assert.lengthOf(await Payout.all(), 1, 'the ledger is never pruned')
  })

  test('a lost answer left unknown for 30 h: the same key is flagged, never sent again', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, body } = await acrossTime(cleanup, LOSING_CLIENT)
    // The service makes the payout; its answer comes after the client gave up.
    await loseAnswer(emu, () => executor.execute(body, { idempotencyKey: 'payout-order-43' }))
    assert.equal((await ExecutionIntent.firstOrFail()).state, 'unknown')
    assert.lengthOf(emu.admin.payouts(), 1)

    await emu.clock.advance(30 * HOUR)
    const error = await executor.execute(body, { idempotencyKey: 'payout-order-43' }).then(
      () => null,
      (e) => e
    )
    assert.instanceOf(error, E_PAYOUTS_INTENT_NEEDS_ATTENTION)
    assert.equal(error.code, 'E_PAYOUTS_INTENT_NEEDS_ATTENTION')
    assert.equal((await ExecutionIntent.firstOrFail()).state, 'needs_attention')
    assert.lengthOf(emu.admin.payouts(), 1, 'the service still holds one payout')

    // Asked again, the same answer: still nothing sent.
    await assert.rejects(
      () => executor.execute(body, { idempotencyKey: 'payout-order-43' }),
      /needs attention/
    )
    assert.lengthOf(emu.admin.payouts(), 1)
  })

  test('an intent an operator settled as sent is never sent again under its key', async ({
    assert,
    cleanup,
  }) => {
    const { db, emu, executor, body } = await acrossTime(cleanup, LOSING_CLIENT)
    await loseAnswer(emu, () => executor.execute(body, { idempotencyKey: 'payout-order-45' }))
    await emu.clock.advance(30 * HOUR)
    await assert.rejects(() => executor.execute(body, { idempotencyKey: 'payout-order-45' }))
    const intent = await ExecutionIntent.firstOrFail()
    assert.equal(intent.state, 'needs_attention')
    // The operator checks at the service, finds the payout and settles the intent as sent.
    await new IntentsDesk(executor).resolve(intent.id, 'sent')
    const error = await executor.execute(body, { idempotencyKey: 'payout-order-45' }).then(
      () => null,
      (e) => e
    )
    assert.instanceOf(error, E_PAYOUTS_INTENT_NEEDS_ATTENTION)
    assert.lengthOf(emu.admin.payouts(), 1, 'no second payout after the settlement')
    void db
  })

  test('failed after a lost answer: past the window it is flagged, not sent, and not pruned', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, pruner, body } = await acrossTime(cleanup, LOSING_CLIENT)
    await loseAnswer(emu, () => executor.execute(body, { idempotencyKey: 'payout-order-46' }))
    // A second attempt refused definitively (as a 401 after a key rotation would be): failed,
    // though the first attempt made the payout.
    const intent = await ExecutionIntent.firstOrFail()
    intent.merge({ state: 'failed', attempts: 2 })
    await intent.save()
    await emu.clock.advance(49 * HOUR)
    assert.equal((await pruner.prune()).finishedIntents, 0, 'kept: its key may hold a payout')
    const error = await executor.execute(body, { idempotencyKey: 'payout-order-46' }).then(
      () => null,
      (e) => e
    )
    assert.instanceOf(error, E_PAYOUTS_INTENT_NEEDS_ATTENTION)
    assert.lengthOf(emu.admin.payouts(), 1)
  })

  test('a pending intent with no attempt (an older version left it) is sent once by recovery', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, body } = await acrossTime(cleanup)
    const { intent, result } = await executor.execute(body, { idempotencyKey: 'payout-order-47' })
    assert.equal(intent.attempts, 1, 'a fresh intent is committed with its attempt')
    // As an older version left a crash between its two writes: pending, no attempt.
    intent.merge({ state: 'pending', attempts: 0 })
    await intent.save()
    await emu.clock.advance(5 * 60_000)
    assert.deepInclude(await executor.recover({ olderThanMs: 60_000 }), { resent: 1, succeeded: 1 })
    assert.equal((await intent.refresh()).state, 'succeeded')
    assert.equal(intent.payoutUuid, result.payoutId)
    assert.lengthOf(emu.admin.payouts(), 1, 'the same key: the one payout')
  })

  test('inside the window the same key after a lost answer is the one payout, answered', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, body } = await acrossTime(cleanup, LOSING_CLIENT)
    await loseAnswer(emu, () => executor.execute(body, { idempotencyKey: 'payout-order-44' }))
    await emu.clock.advance(20 * HOUR)
    const again = await executor.execute(body, { idempotencyKey: 'payout-order-44' })
    assert.equal(again.intent.state, 'succeeded')
    assert.lengthOf(emu.admin.payouts(), 1)
    assert.equal(emu.admin.payouts()[0].payoutId, again.result.payoutId)
  })

  test('payouts:intents shows the ledger payouts that could settle a needs_attention intent', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, body } = await acrossTime(cleanup, LOSING_CLIENT)
    await loseAnswer(emu, () => executor.execute(body, { idempotencyKey: 'payout-order-45' }))
    const [made] = emu.admin.payouts()
    // What a webhook or reconciliation brings: the service's payout in the ledger.
    const row = {
      status: 'pending' as const,
      recipientId: body.recipientId,
      sourceAmount: '100',
      sourceCurrency: 'USD',
      payoutCurrency: 'MXN',
    }
    await Payout.create({ ...row, payoutUuid: made.payoutId })
    await Payout.create({ ...row, payoutUuid: crypto.randomUUID(), sourceAmount: '250' })
    await Payout.create({ ...row, payoutUuid: crypto.randomUUID(), recipientId: 'someone-else' })
    await emu.clock.advance(30 * HOUR)
    await assert.rejects(() => executor.execute(body, { idempotencyKey: 'payout-order-45' }))

    const [view] = await new IntentsDesk(executor).list(['needs_attention'], 10)
    assert.equal(view.state, 'needs_attention')
    assert.deepEqual(
      view.candidates?.map((candidate) => candidate.payoutUuid),
      [made.payoutId]
    )
  })
})
