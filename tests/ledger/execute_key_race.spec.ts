import { test } from '@japa/runner'
import type { PayoutsClient } from '../../src/client/main.ts'
import { PayoutExecutor } from '../../src/ledger/payout_executor.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { ExecutionIntent } from '../../src/models/main.ts'
import { executeBodies, startEmulator, testClient } from '../emulator/helpers.ts'
import { databaseHoldingAnAnswer, TEST_DB } from '../helpers/database.ts'

test.group(`Ledger | one idempotency key, two callers at once (${TEST_DB})`, () => {
  test('a caller that read the intent pending while the first call finished answers its payout, not an error', async ({
    assert,
    cleanup,
  }) => {
    // The answer to one read of the intent by its key can be held back: the SELECT has run
    // and read the intent as it was, but the caller has not heard back yet.
    const database = await databaseHoldingAnAnswer(
      cleanup,
      'key_race',
      ({ sql }) =>
        sql.trim().toLowerCase().startsWith('select') && sql.includes(ExecutionIntent.table)
    )
    const { db } = database
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const client = testClient(cleanup, emu)
    // The first call's request waits at the service until the test lets it answer.
    let requests = 0
    let reachedService!: () => void
    const atService = new Promise<void>((resolve) => (reachedService = resolve))
    let answer!: () => void
    const answered = new Promise<void>((resolve) => (answer = resolve))
    const gated: Pick<PayoutsClient, 'execute'> = {
      execute: async (...args: Parameters<PayoutsClient['execute']>) => {
        if (++requests === 1) {
          reachedService()
          await answered
        }
        return client.execute(...args)
      },
    }
    const executor = new PayoutExecutor({ db, ledger: new PayoutLedger(db), client: gated })
    const { fiat } = executeBodies(emu)
    const options = { idempotencyKey: 'order-race-1', ownerId: 'u1' }

    const first = executor.execute(fiat, options)
    await atService
    // The second call finds the key taken and reads its intent: pending, at its first attempt.
    database.holdNext()
    const second = executor.execute(fiat, options)
    await Promise.race([
      database.reached,
      second.then(() => {
        throw new Error('the second call ended without reading the intent')
      }),
    ])
    // Meanwhile the first call is answered and stores its payout: the intent is settled.
    answer()
    const one = await first
    assert.equal(one.intent.state, 'succeeded')
    database.release()

    const two = await second
    assert.equal(two.payout.payoutUuid, one.payout.payoutUuid)
    assert.deepEqual(two.result, one.result)
    // It answered what the first call stored: no second request, one payout at the service.
    assert.equal(requests, 1)
    assert.lengthOf(emu.admin.payouts(), 1)
  })
})
