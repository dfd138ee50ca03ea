import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import type { PayoutChange } from '../../src/ledger/vocabulary.ts'
import type { Database } from '@adonisjs/lucid/database'
import PayoutEvent from '../../src/models/payout_event.ts'
import { connectionConfig, recordStatements, setupDatabase, TEST_DB } from '../helpers/database.ts'

/** The statements of `sql` that match `pattern`. */
const matching = (sql: string[], pattern: RegExp) => sql.filter((s) => pattern.test(s))

/**
 * Applies `count` new payouts in one batch, each told to a synchronous listener (as a
 * broadcast or an app event is); the changes told and the statements sent meanwhile.
 */
async function applyNewPayouts(db: Database, count: number) {
  const told: PayoutChange[] = []
  const ledger = new PayoutLedger(db, { onChange: (change) => void told.push(change) })
  const observations = Array.from({ length: count }, () => ({
    payoutId: randomUUID(),
    status: 'processing' as const,
    step: 'collected' as const,
    source: 'webhook' as const,
  }))
  const sql = recordStatements(db)
  await ledger.applyBatch(observations)
  return { told, sql }
}

test.group(`Ledger | statements of one applied batch (${TEST_DB})`, () => {
  test('50 new payouts: one UPDATE saves them, one UPDATE marks their changes told', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'batch_statements')
    const { told, sql } = await applyNewPayouts(db, 50)
    assert.lengthOf(told, 50)
    assert.lengthOf(matching(sql, /^update \S+payouts\b/i), 1, 'payouts saved together')
    assert.lengthOf(matching(sql, /^update \S+payout_events\b.*notified_at/i), 1, 'marks together')
  })
})

test.group(`Ledger | the log of one applied batch (${TEST_DB})`, () => {
  /** Applies 30 new payouts; each change's eventId checked against the row stored under it. */
  async function logged(db: Database) {
    const { told, sql } = await applyNewPayouts(db, 30)
    const rows: Array<{ id: number; payout_uuid: string }> = await db
      .from(PayoutEvent.table)
      .select('id', 'payout_uuid')
    const stored = new Map(rows.map((row) => [Number(row.id), row.payout_uuid]))
    return {
      inserts: matching(sql, /^insert into \S+payout_events\b/i).length,
      mismatched: told.filter((change) => stored.get(change.eventId) !== change.payout.payoutUuid),
      told: told.length,
    }
  }

  test('30 changes: one INSERT logs them, each change under its own row id', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'batch_log')
    const { inserts, mismatched, told } = await logged(db)
    assert.equal(told, 30)
    assert.deepEqual(mismatched, [])
    assert.equal(inserts, 1, 'the log in one statement')
  })

  test('MySQL numbering with another step (a multi-primary cluster): row by row, ids still right', async ({
    assert,
    cleanup,
  }) => {
    if (TEST_DB !== 'mysql') {
      // RETURNING names each row's id on PostgreSQL and SQLite.
      assert.notEqual(TEST_DB, 'mysql')
      return
    }
    // One connection, so the session's step is the one the batch reads.
    const { db } = await setupDatabase(cleanup, 'batch_log_step', {
      connection: { ...connectionConfig('batch_log_step'), pool: { min: 1, max: 1 } },
    })
    await db.rawQuery('set session auto_increment_increment = 2')
    const { inserts, mismatched, told } = await logged(db)
    assert.equal(told, 30)
    assert.deepEqual(mismatched, [])
    assert.equal(inserts, 30, 'one by one: a multi-row INSERT would not be numbered 1 apart')
  })
})
