import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import Payout from '../../src/models/payout.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

/**
 * A host app's tests often wrap each test in Lucid's global transaction
 * (`testUtils.db().withGlobalTransaction()`): every write of the plugin then runs inside it,
 * as a savepoint, and the rollback at the end of the test takes it back.
 */
test.group(`Database | inside a host test's global transaction (${TEST_DB})`, () => {
  test('the ledger applies, tells and is rolled back with the global transaction, bounded or not', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'global')
    for (const transactionTimeoutMs of [30_000, 0]) {
      const told: string[] = []
      const ledger = new PayoutLedger(
        db,
        { onChange: (change) => void told.push(change.payout.payoutUuid) },
        { transactionTimeoutMs }
      )
      const payoutId = randomUUID()
      await db.beginGlobalTransaction()
      try {
        const applied = await ledger.apply({
          payoutId,
          status: 'pending',
          step: 'initiated',
          source: 'webhook',
        })
        assert.isTrue(applied.changed, `bound ${transactionTimeoutMs}`)
        assert.deepEqual(told, [payoutId])
        assert.lengthOf(await Payout.query().where('payout_uuid', payoutId), 1)
      } finally {
        await db.rollbackGlobalTransaction()
      }
      assert.lengthOf(await Payout.query().where('payout_uuid', payoutId), 0)
    }
  })
})
