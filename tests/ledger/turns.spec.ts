import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

/**
 * What happens between a batch's lock of its payouts (the SELECT's answer) and its next
 * statement (the UPDATE that saves them): turns of the event loop taken there show as
 * `tick`s, counted by a chain of `setImmediate`s that runs once per turn. Without turns that
 * stretch is one synchronous run of microtasks, and no tick can fall inside it.
 */
async function ticksInsideTheBatch(turnMs: number | undefined, cleanup: any) {
  const { db } = await setupDatabase(cleanup, 'turns')
  const ledger = new PayoutLedger(db, { onChange: () => {} }, { turnMs })
  const observations = Array.from({ length: 40 }, () => ({
    payoutId: randomUUID(),
    status: 'processing' as const,
    step: 'collected' as const,
    source: 'webhook' as const,
  }))
  // The payouts exist: the batch's SELECT finds (and locks) all 40.
  await ledger.applyBatch(
    observations.map((o) => ({ ...o, status: 'pending' as const, step: null }))
  )

  const trail: string[] = []
  const client = db.connection().getWriteClient()
  client.on('query', (query: { sql: string }) =>
    trail.push(`query ${query.sql.trim().slice(0, 40)}`)
  )
  client.on('query-response', () => trail.push('answer'))
  let running = true
  const tick = () => {
    trail.push('tick')
    if (running) setImmediate(tick)
  }
  setImmediate(tick)
  await ledger.applyBatch(observations)
  running = false

  // From the answer to the SELECT of the payouts to the next statement sent.
  const select = trail.findIndex((entry) => /^query select \* from \S*payouts/i.test(entry))
  const answered = trail.indexOf('answer', select)
  const next = trail.findIndex((entry, index) => index > answered && entry.startsWith('query'))
  assert(select >= 0 && answered > select && next > answered, trail.join('\n'))
  return { ticks: trail.slice(answered, next).filter((entry) => entry === 'tick').length, trail }
}

function assert(condition: boolean, message: string): asserts condition {
  if (!condition) throw new Error(`the statements were not seen in order:\n${message}`)
}

test.group(`Ledger | a batch takes turns of the event loop (${TEST_DB})`, () => {
  test(
    TEST_DB === 'sqlite'
      ? 'on SQLite a batch takes no turn inside its transaction (its one connection waits for it)'
      : 'between its lock and its save, a batch lets the event loop take turns',
    async ({ assert: expect, cleanup }) => {
      // Every row's work past the bound: a turn at each of them.
      const { ticks, trail } = await ticksInsideTheBatch(1e-6, cleanup)
      if (TEST_DB === 'sqlite') expect.equal(ticks, 0, trail.join('\n'))
      else expect.isAtLeast(ticks, 40, trail.join('\n'))
    }
  )

  test('turned off (turnMs 0), the stretch is one run: no turn inside it', async ({
    assert: expect,
    cleanup,
  }) => {
    const { ticks, trail } = await ticksInsideTheBatch(0, cleanup)
    expect.equal(ticks, 0, trail.join('\n'))
  })
})
