import { AssertionError } from 'node:assert'
import { test } from '@japa/runner'
import Payout from '../../src/models/payout.ts'
import type { PayoutsFake } from '../../src/testing/main.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'
import { partsOf } from '../../src/service/payouts_service.ts'

/** An app whose configured service is unreachable: only the fake answers. */
async function fakedApp(cleanup: (fn: () => Promise<void>) => void) {
  const app = await startHttpApp(cleanup)
  const fake = await app.payouts.fake()
  cleanup(() => app.payouts.restore())
  return { app, fake }
}

/** `n` fiat rows for one seeded recipient; `unknown` of them name a recipient the service lacks. */
function rows(fake: PayoutsFake, n: number, unknown: number[] = []) {
  const recipientId = fake.seedRecipient().id
  return Array.from({ length: n }, (_, index) => ({
    fromCurrency: 'USD',
    toCurrency: 'MXN',
    amount: 10 + index,
    recipientId: unknown.includes(index) ? '00000000-0000-4000-8000-000000000000' : recipientId,
    userPaymentMethodId: fake.paymentMethodId,
  }))
}

function caught(fn: () => void): AssertionError {
  try {
    fn()
  } catch (error) {
    return error as AssertionError
  }
  throw new Error('the assertion did not fail')
}

test.group(`payouts.fake() | batches (${TEST_DB})`, () => {
  test('executeBatch through the fake: assertBatchExecuted sees the batch by its key', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake } = await fakedApp(cleanup)
    const error = caught(() => fake.assertBatchExecuted())
    assert.match(error.message, /Expected a batch to be executed; none was/)

    const payroll = rows(fake, 150, [7])
    const batch = await app.payouts.executeBatch(payroll, {
      idempotencyKey: 'payroll-2026-05',
      ownerId: 'u1',
    })
    assert.deepEqual([batch.counts.created, batch.counts.refused], [149, 1])
    fake.assertBatchExecuted({ idempotencyKey: 'payroll-2026-05' })
    fake.assertBatchExecuted({ idempotencyKey: 'payroll-2026-05', rows: 150, requests: 2 })
    fake.assertBatchExecuted({ created: 149, refused: 1, refusals: ['INVALID_PARAMETER'] })
    fake.assertBatchExecuted((sent) => sent.payouts.every((p) => p.sourceCurrency === 'USD'))
    fake.assertExecutedCount(149)
    const created = app.events.filter((event) => event.name === 'payouts:created')
    assert.lengthOf(created, 149)
    await partsOf(app.payouts)
    assert.lengthOf(await Payout.query().where('owner_id', 'u1'), 149)

    // The same key and rows again: nothing more reaches the service; other rows are refused.
    const again = await app.payouts.executeBatch(payroll, {
      idempotencyKey: 'payroll-2026-05',
      ownerId: 'u1',
    })
    assert.equal(again.counts.created, 149)
    const reused = await app.payouts
      .executeBatch(payroll.slice(1), { idempotencyKey: 'payroll-2026-05', ownerId: 'u1' })
      .catch((e) => e)
    assert.equal(reused.code, 'E_PAYOUTS_IDEMPOTENCY_KEY_REUSED')
    assert.lengthOf(fake.batches(), 1)

    const miss = caught(() => fake.assertBatchExecuted({ idempotencyKey: 'payroll-2026-06' }))
    assert.instanceOf(miss, AssertionError)
    assert.include(miss.message, "idempotencyKey: 'payroll-2026-06'")
    assert.include(miss.message, "idempotencyKey: 'payroll-2026-05'")
    assert.include(miss.message, 'requests: 2')
    assert.notInclude(miss.message, 'payoutId', 'payouts are counted, not listed')
  })

  test('a client.executeBatch call of the app is a batch of its own key', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake } = await fakedApp(cleanup)
    await app.payouts.client.executeBatch(
      { items: rows(fake, 3) },
      { idempotencyKey: 'direct-batch-call' }
    )
    fake.assertBatchExecuted({ idempotencyKey: 'direct-batch-call', created: 3, requests: 1 })
    assert.lengthOf(fake.batches(), 1)
  })

  test('recipients.createMany through the fake: created at the service, mirrored in the app', async ({
    assert,
    cleanup,
  }) => {
    const { app, fake } = await fakedApp(cleanup)
    const made = await app.payouts.recipients.createMany(
      Array.from({ length: 120 }, (_, i) => ({ name: `Payee ${i}`, currency: 'MXN' })),
      { idempotencyKey: 'payees-import-0001', ownerId: 'u1' }
    )
    assert.lengthOf(made, 120)
    assert.lengthOf(fake.recipients(), 120)
    fake.assertRecipientCreated({ name: 'Payee 119' })
    assert.deepEqual(
      made.map((r) => r.remoteId),
      fake.recipients().map((r) => r.id)
    )
    assert.deepEqual([...new Set(made.map((r) => r.ownerId))], ['u1'])
  })
})
