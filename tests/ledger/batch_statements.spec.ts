import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { recordStatements, setupDatabase, TEST_DB } from '../helpers/database.ts'

/** The statements of `sql` that match `pattern`. */
const matching = (sql: string[], pattern: RegExp) => sql.filter((s) => pattern.test(s))

test.group(`Ledger | statements of one applied batch (${TEST_DB})`, () => {
  test('50 new payouts: one UPDATE saves them, one UPDATE per turn of the event loop marks their changes told', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'batch_statements')
    // Turns of the event loop, counted by an immediate that schedules the next one.
    let turns = 0
    let counting = true
    const tick = () => {
      turns++
      if (counting) setImmediate(tick)
    }
    const turnOfEach: number[] = []
    // A synchronous listener, as a broadcast or an app event is.
    const ledger = new PayoutLedger(db, { onChange: () => void turnOfEach.push(turns) })
    const observations = Array.from({ length: 50 }, () => ({
      payoutId: randomUUID(),
      status: 'processing' as const,
      step: 'collected' as const,
      source: 'webhook' as const,
    }))
    const sql = recordStatements(db)
    setImmediate(tick)
    await ledger.applyBatch(observations)
    counting = false
    assert.lengthOf(turnOfEach, 50)
    assert.lengthOf(matching(sql, /^update \S+payouts\b/i), 1, 'payouts saved together')
    // The hooks that end in one turn share one mark (one commit each on SQLite).
    const marks = matching(sql, /^update \S+payout_events\b.*notified_at/i).length
    assert.isAtMost(marks, new Set(turnOfEach).size, 'one mark per turn of hooks')
  })
})

test.group(`Ledger | telling one applied batch (${TEST_DB})`, () => {
  test('200 changes told by synchronous hooks: the event loop gets turns meanwhile', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'batch_turns')
    // Turns of the event loop, counted by an immediate that schedules the next one.
    let turns = 0
    let counting = true
    const tick = () => {
      turns++
      if (counting) setImmediate(tick)
    }
    const turnOfEach: number[] = []
    // A synchronous hook of about 0.1 ms (an app event's listeners, a broadcast).
    const ledger = new PayoutLedger(db, {
      onChange: () => {
        const until = performance.now() + 0.1
        while (performance.now() < until) {}
        turnOfEach.push(turns)
      },
    })
    const observations = Array.from({ length: 200 }, () => ({
      payoutId: randomUUID(),
      status: 'processing' as const,
      step: 'collected' as const,
      source: 'webhook' as const,
    }))
    setImmediate(tick)
    await ledger.applyBatch(observations)
    counting = false
    assert.lengthOf(turnOfEach, 200)
    // About 20 ms of hooks: without turns, one turn held them all and every request waited.
    assert.isAbove(new Set(turnOfEach).size, 3, 'turns of the event loop while telling')
  })
})
