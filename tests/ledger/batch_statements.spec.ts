import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import type { PayoutChange } from '../../src/ledger/vocabulary.ts'
import { recordStatements, setupDatabase, TEST_DB } from '../helpers/database.ts'

/** The statements of `sql` that match `pattern`. */
const matching = (sql: string[], pattern: RegExp) => sql.filter((s) => pattern.test(s))

test.group(`Ledger | statements of one applied batch (${TEST_DB})`, () => {
  test('50 new payouts: one UPDATE saves them, one UPDATE marks their changes told', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'batch_statements')
    const told: PayoutChange[] = []
    // A synchronous listener, as a broadcast or an app event is.
    const ledger = new PayoutLedger(db, { onChange: (change) => void told.push(change) })
    const observations = Array.from({ length: 50 }, () => ({
      payoutId: randomUUID(),
      status: 'processing' as const,
      step: 'collected' as const,
      source: 'webhook' as const,
    }))
    const sql = recordStatements(db)
    await ledger.applyBatch(observations)
    assert.lengthOf(told, 50)
    assert.lengthOf(matching(sql, /^update \S+payouts\b/i), 1, 'payouts saved together')
    assert.lengthOf(matching(sql, /^update \S+payout_events\b.*notified_at/i), 1, 'marks together')
  })
})
