import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { Logger } from '@adonisjs/core/logger'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { BroadcastRelay } from '../../src/service/broadcast_relay.ts'
import type { PayoutChangedEvent } from '../../src/types/events.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

/**
 * The relay follows commit order, not id order: on PostgreSQL and MySQL a transaction that
 * took a lower id can commit after a higher one. The relay waits for such an id (a gap) and
 * sends it when it appears, once; it sends nothing applied before it started.
 */
test.group(`Relay | commit order (${TEST_DB})`, () => {
  test('an id that commits after a higher one is sent when it appears, once', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'relay')
    const ledger = new PayoutLedger(db)
    const sent: PayoutChangedEvent[] = []
    const relay = new BroadcastRelay({
      db,
      notifier: { broadcast: (event) => void sent.push(event) },
      logger: new Logger({ enabled: false }),
      intervalMs: 250,
      gapWaitMs: 30_000,
    })
    const [before, slow, fast] = [randomUUID(), randomUUID(), randomUUID()]
    // The payouts exist first: the two transactions below lock a row each, and insert no
    // payout (MySQL's gap locks would make the second wait for the first).
    for (const payoutId of [before, slow, fast]) {
      await ledger.apply({ payoutId, status: 'pending', step: 'initiated', source: 'webhook' })
    }
    await relay.readOnce()

    const update = { status: 'processing', step: 'compliance_cleared', source: 'webhook' as const }
    // SQLite has one writer: the second transaction would wait for the first.
    if (TEST_DB === 'sqlite') {
      await ledger.apply({ payoutId: slow, ...update })
      await ledger.apply({ payoutId: fast, ...update })
    } else {
      const trx = await db.transaction()
      await ledger.applyBatchInTransaction(trx, [{ payoutId: slow, ...update }])
      await ledger.apply({ payoutId: fast, ...update })
      await relay.readOnce()
      assert.deepEqual(
        sent.map((event) => event.payoutId),
        [fast],
        'the higher id, committed first'
      )
      await trx.commit()
    }
    await relay.readOnce()
    await relay.readOnce()
    const ids = sent.map((event) => event.payoutId)
    assert.sameMembers(ids, [slow, fast])
    assert.lengthOf(ids, 2, 'each once; nothing from before the start')
    assert.notInclude(ids, before)
    assert.deepEqual(
      sent.map((event) => [event.status, event.previousStatus]),
      [
        ['processing', 'pending'],
        ['processing', 'pending'],
      ]
    )
  })

  test('an id whose transaction rolled back is given up after gapWaitMs', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'relay')
    const ledger = new PayoutLedger(db)
    const sent: PayoutChangedEvent[] = []
    const relay = new BroadcastRelay({
      db,
      notifier: { broadcast: (event) => void sent.push(event) },
      logger: new Logger({ enabled: false }),
      intervalMs: 250,
      gapWaitMs: 300,
    })
    await relay.readOnce()
    const trx = await db.transaction()
    await ledger.applyBatchInTransaction(trx, [
      { payoutId: randomUUID(), status: 'pending', step: 'initiated', source: 'webhook' },
    ])
    await trx.rollback()
    const later = randomUUID()
    await ledger.apply({ payoutId: later, status: 'pending', step: 'initiated', source: 'webhook' })
    await relay.readOnce()
    assert.deepEqual(
      sent.map((event) => event.payoutId),
      [later]
    )
    // SQLite gives a rolled-back id again: no gap there.
    assert.lengthOf(relay.pendingGaps(), TEST_DB === 'sqlite' ? 0 : 1)
    await new Promise((resolve) => setTimeout(resolve, 400))
    await relay.readOnce()
    assert.deepEqual(relay.pendingGaps(), [], 'the rolled-back id is no longer waited for')
  })
})
