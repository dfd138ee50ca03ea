import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { Logger } from '@adonisjs/core/logger'
import type { Database } from '@adonisjs/lucid/database'
import { DateTime } from 'luxon'
import { tableNames } from '../../src/database/schema.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { PayoutEvent } from '../../src/models/main.ts'
import { BroadcastRelay, type BroadcastRelayOptions } from '../../src/service/broadcast_relay.ts'
import type { PayoutChangedEvent } from '../../src/types/events.ts'
import { sleep, waitFor } from '../chaos/helpers.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

/** A relay on `db` that records what it broadcasts. */
function relayOn(db: Database, options: Partial<BroadcastRelayOptions> = {}) {
  const sent: PayoutChangedEvent[] = []
  const relay = new BroadcastRelay({
    db,
    notifier: { broadcast: (event) => void sent.push(event) },
    logger: new Logger({ enabled: false }),
    intervalMs: 250,
    gapWaitMs: 30_000,
    ...options,
  })
  return { relay, sent }
}

const created = { status: 'pending', step: 'initiated', source: 'webhook' as const }
const cleared = { status: 'processing', step: 'compliance_cleared', source: 'webhook' as const }

/** The newest log id. */
async function newestId() {
  const row = await PayoutEvent.query().orderBy('id', 'desc').firstOrFail()
  return row.id
}

/**
 * A log row written with the id given, as a transaction that took that id writes it (the
 * ids of PostgreSQL and MySQL are taken at INSERT and committed in any order).
 */
async function logRow(id: number, payoutUuid: string, applied = true) {
  await PayoutEvent.create({
    id,
    payoutUuid,
    source: 'webhook',
    status: cleared.status,
    step: cleared.step,
    applied,
    observedAt: DateTime.utc(),
  })
}

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

  test('gaps found missing long before a read (a long interval) get that read first', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'relay')
    const ledger = new PayoutLedger(db)
    const { relay, sent } = relayOn(db, { gapWaitMs: 300 })
    const [slow, fast] = [randomUUID(), randomUUID()]
    for (const payoutId of [slow, fast]) await ledger.apply({ payoutId, ...created })
    await relay.readOnce()
    const frontier = await newestId()
    await logRow(frontier + 2, fast)
    await relay.readOnce()
    assert.deepEqual(relay.pendingGaps(), [[frontier + 1, frontier + 1]])
    // The next read comes after the gap's wait (relayIntervalMs above it); the id committed
    // within its transaction's bound, before that read.
    await sleep(400)
    await logRow(frontier + 1, slow)
    await relay.readOnce()
    assert.deepEqual(
      sent.map((event) => event.payoutId),
      [fast, slow],
      'the late id, read once more before it is given up'
    )
    assert.deepEqual(relay.pendingGaps(), [])
  })

  test('every gap is read back on each tick, not the lowest 50 only', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'relay')
    const ledger = new PayoutLedger(db)
    const { relay, sent } = relayOn(db)
    const [slow, busy] = [randomUUID(), randomUUID()]
    for (const payoutId of [slow, busy]) await ledger.apply({ payoutId, ...created })
    await relay.readOnce()
    const frontier = await newestId()
    // 60 single-id holes (rolled-back batches of interleaving workers), observations of
    // `busy` that changed nothing between them.
    for (let i = 1; i <= 60; i++) await logRow(frontier + 2 * i, busy, false)
    // As many reads as the rows take (a read takes 32 rows at first).
    while ((await relay.readOnce()) > 0) {}
    assert.lengthOf(relay.pendingGaps(), 60)
    await logRow(frontier + 119, slow)
    await relay.readOnce()
    assert.deepEqual(
      sent.map((event) => event.payoutId),
      [slow],
      'the highest gap, read back'
    )
    assert.lengthOf(relay.pendingGaps(), 59)
  })

  test('a read that fails halfway (loading its payouts) is read again: nothing lost', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'relay')
    const ledger = new PayoutLedger(db)
    const { relay, sent } = relayOn(db)
    const payoutId = randomUUID()
    await relay.readOnce()
    await ledger.apply({ payoutId, ...created })
    // The log reads, the payouts' read fails (a lost connection, a timeout): the table away.
    const { payouts } = tableNames(prefix)
    const schema = () => db.connection().schema
    await schema().renameTable(payouts, `${payouts}_away`)
    try {
      await assert.rejects(() => relay.readOnce())
    } finally {
      await schema().renameTable(`${payouts}_away`, payouts)
    }
    await relay.readOnce()
    assert.deepEqual(
      sent.map((event) => [event.payoutId, event.status]),
      [[payoutId, 'pending']]
    )
  })

  test('two reads at once (readOnce beside a tick) send each change once', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'relay')
    const ledger = new PayoutLedger(db)
    const { relay, sent } = relayOn(db)
    await relay.readOnce()
    await ledger.apply({ payoutId: randomUUID(), ...created })
    await Promise.all([relay.readOnce(), relay.readOnce()])
    assert.lengthOf(sent, 1)
  })

  test('a change relayed reads only the log rows after the last one relayed, its columns', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'relay')
    const ledger = new PayoutLedger(db)
    const { relay, sent } = relayOn(db)
    const payoutId = randomUUID()
    await relay.readOnce()
    await ledger.apply({ payoutId, ...created })
    // A long history: observations that changed nothing.
    for (let i = 0; i < 20; i++) await ledger.apply({ payoutId, ...created })
    await ledger.apply({ payoutId, ...cleared })
    await relay.readOnce()
    await ledger.apply({
      payoutId,
      status: 'processing',
      step: 'instructions_sent',
      source: 'webhook',
    })

    const { payoutEvents } = tableNames(prefix)
    const reads: Array<{ sql: string; rows: number }> = []
    const knex = db.connection().getReadClient()
    const record = (response: unknown, query: { sql: string }) => {
      if (query.sql.includes(payoutEvents) && query.sql.includes('payout_uuid')) {
        reads.push({ sql: query.sql, rows: Array.isArray(response) ? response.length : -1 })
      }
    }
    knex.on('query-response', record)
    try {
      await relay.readOnce()
    } finally {
      knex.off('query-response', record)
    }
    assert.deepEqual(
      sent.map((event) => [event.status, event.step, event.previousStep]),
      [
        ['pending', 'initiated', null],
        ['processing', 'compliance_cleared', 'initiated'],
        ['processing', 'instructions_sent', 'compliance_cleared'],
      ]
    )
    const history = reads.filter((read) => /payout_uuid[`"]? (=|in)/i.test(read.sql))
    assert.isNotEmpty(history)
    for (const read of history) {
      assert.notMatch(read.sql, /select \*/i, 'the replay columns only')
      assert.isAtMost(read.rows, 1, `the rows after the last change relayed: ${read.sql}`)
    }
  })

  test('a placeholder merged between the log read and the payouts read: its change still goes out', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'relay')
    const ledger = new PayoutLedger(db)
    const readId = `po_${randomUUID().slice(0, 8)}`
    const uuid = randomUUID()
    const merge = async (trx: Awaited<ReturnType<Database['transaction']>>) => {
      await ledger.applyBatchInTransaction(trx, [{ payoutId: uuid, readId, ...cleared }])
    }
    const { payouts } = tableNames(prefix)
    let between: (() => Promise<void>) | undefined
    const { relay, sent } = relayOn(db, { afterRead: () => between?.() ?? Promise.resolve() })
    await relay.readOnce()
    // First seen by its read id alone: a placeholder.
    await ledger.apply({ payoutId: readId, ...created })

    if (TEST_DB === 'pg') {
      // For real: the merge holds the payouts table while the relay has read the log.
      const trx = await db.transaction()
      await trx.rawQuery(`LOCK TABLE "${payouts}" IN ACCESS EXCLUSIVE MODE`)
      const reading = relay.readOnce()
      await waitFor(
        'the relay waiting for the payouts',
        async () => {
          const { rows } = await db
            .connection()
            .rawQuery(
              "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE ?",
              [`%${payouts}%`]
            )
          return rows.length > 0
        },
        { timeoutMs: 10_000, everyMs: 20 }
      )
      await merge(trx)
      await trx.commit()
      await reading
    } else {
      between = async () => {
        between = undefined
        const trx = await db.transaction()
        await merge(trx)
        await trx.commit()
      }
      await relay.readOnce()
    }
    assert.deepEqual(
      sent.map((event) => [event.payoutId, event.status, event.ownerId]),
      [[readId, 'pending', null]],
      'the placeholder change, under its read id'
    )
  })

  test('stop() ends soon on a stalled database, whatever gapWaitMs', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'relay')
    const { relay } = relayOn(db, { gapWaitMs: 600_000 })
    await relay.readOnce()
    const { payoutEvents } = tableNames(prefix)
    // The relay's next read waits: a table locked (PostgreSQL, MySQL); SQLite's one connection
    // held by an open transaction.
    const trx = await db.transaction()
    if (TEST_DB === 'pg') {
      await trx.rawQuery(`LOCK TABLE "${payoutEvents}" IN ACCESS EXCLUSIVE MODE`)
    } else if (TEST_DB === 'mysql') {
      await trx.rawQuery(`LOCK TABLES \`${payoutEvents}\` WRITE`)
    }
    let stalled = true
    const release = async () => {
      if (!stalled) return
      stalled = false
      if (TEST_DB === 'mysql') await trx.rawQuery('UNLOCK TABLES')
      await trx.rollback()
    }
    cleanup(release)
    const before = BroadcastRelay.statements
    relay.start()
    await waitFor('the relay reading', () => BroadcastRelay.statements > before, {
      timeoutMs: 10_000,
      everyMs: 10,
    })
    await relay.stop()
    assert.isTrue(stalled, 'stop() ended while the database still stalled')
    if (TEST_DB !== 'sqlite') {
      // A statement of the relay is bounded well under gapWaitMs: the read fails, soon.
      await assert.rejects(() => relay.readOnce())
      assert.isTrue(stalled)
    }
    await release()
  }).timeout(60_000)
})

/**
 * A backlog is read in reads sized to `readSliceMs`, the event loop turning between them: a
 * read of 500 changes held the web process's event loop for 40-70 ms on SQLite (its
 * statements run on it, and making payouts into models runs on it everywhere), the
 * acknowledgements waiting behind it.
 */
test.group(`Relay | a backlog read in slices (${TEST_DB})`, () => {
  /** 200 changes committed at once, then the relay started: each read's rows and turns. */
  async function backlogRead(
    cleanup: Parameters<typeof setupDatabase>[0],
    sliceMs: number | undefined
  ) {
    const { db } = await setupDatabase(cleanup, 'relay')
    const ledger = new PayoutLedger(db)
    const reads: Array<{ sent: number; turns: number }> = []
    let turns = 0
    const { relay, sent } = relayOn(db, {
      intervalMs: 60_000,
      readSliceMs: sliceMs,
      afterRead: async () => void reads.push({ sent: sent.length, turns }),
    })
    await relay.readOnce()
    const payoutIds = Array.from({ length: 200 }, () => randomUUID())
    await ledger.applyBatch(payoutIds.map((payoutId) => ({ payoutId, ...created })))
    const counting = setInterval(() => turns++, 0)
    cleanup(async () => clearInterval(counting))
    relay.start()
    cleanup(() => relay.stop())
    await waitFor('the backlog sent', () => sent.length >= payoutIds.length, {
      timeoutMs: 20_000,
      everyMs: 5,
    })
    await relay.stop()
    return { reads, sent: sent.map((event) => event.payoutId), payoutIds }
  }

  test('a fast read doubles the next: reads of 32, 64 and the rest, the loop turning between', async ({
    assert,
    cleanup,
  }) => {
    const { reads, sent, payoutIds } = await backlogRead(cleanup, 1e9)
    assert.sameMembers(sent, payoutIds)
    assert.lengthOf(sent, payoutIds.length, 'each change once')
    assert.deepEqual(
      reads.map((read) => read.sent),
      [0, 32, 96],
      'what had gone out before each read: 32, then 64, then the last 104'
    )
    for (let i = 1; i < reads.length; i++) {
      assert.isAbove(reads[i].turns, reads[i - 1].turns, `the event loop turned before read ${i}`)
    }
  }).timeout(60_000)

  test('a read slower than readSliceMs shrinks the next, to 16 rows at the least', async ({
    assert,
    cleanup,
  }) => {
    const { reads, sent, payoutIds } = await backlogRead(cleanup, 0.001)
    assert.sameMembers(sent, payoutIds)
    assert.lengthOf(sent, payoutIds.length, 'each change once')
    // 32 first, then 16 per read: 168 / 16 = 10.5, eleven reads more.
    assert.lengthOf(reads, 12)
    assert.deepEqual(
      reads.map((read) => read.sent),
      [0, ...Array.from({ length: 11 }, (_, i) => 32 + 16 * i)]
    )
  }).timeout(60_000)

  test('by default, SQLite reads in slices of 5 ms; PostgreSQL and MySQL 500 at a time', async ({
    assert,
    cleanup,
  }) => {
    const { reads, sent, payoutIds } = await backlogRead(cleanup, undefined)
    assert.sameMembers(sent, payoutIds)
    assert.lengthOf(sent, payoutIds.length, 'each change once')
    if (TEST_DB === 'sqlite') {
      assert.isAbove(reads.length, 1, 'more than one read')
      assert.equal(reads[1].sent, 32, 'the first read took 32 rows')
    } else {
      assert.lengthOf(reads, 1, 'one read: its statements leave the event loop free')
    }
  }).timeout(60_000)

  test('a read that finds nothing leaves the next read as large as it was', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'relay')
    const ledger = new PayoutLedger(db)
    let slowRead = false
    const { relay, sent } = relayOn(db, {
      readSliceMs: 200,
      // Inside the read's time: an empty read that takes longer than the slice.
      afterRead: async () => {
        if (slowRead) await sleep(250)
      },
    })
    await relay.readOnce()
    const commit = (count: number) =>
      ledger.applyBatch(
        Array.from({ length: count }, () => ({ payoutId: randomUUID(), ...created }))
      )
    await commit(100)
    // Fast reads of 32 and 64 rows: the next may take 128.
    while ((await relay.readOnce()) > 0) {}
    assert.lengthOf(sent, 100)
    slowRead = true
    assert.equal(await relay.readOnce(), 0)
    slowRead = false
    await commit(100)
    assert.equal(await relay.readOnce(), 100, 'one read took the 100 rows, not 16')
  }).timeout(60_000)

  test('a stretch of rows that cost little does not grow the reads: the changes after it are not read 500 at once', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'relay')
    const ledger = new PayoutLedger(db)
    const { relay, sent } = relayOn(db, { readSliceMs: 1e9 })
    const busy = randomUUID()
    await ledger.apply({ payoutId: busy, ...created })
    await relay.readOnce()
    // 150 observations of one payout that changed nothing, then 100 changes to send.
    await PayoutEvent.createMany(
      Array.from({ length: 150 }, () => ({
        payoutUuid: busy,
        source: 'webhook' as const,
        status: cleared.status,
        step: cleared.step,
        applied: false,
        observedAt: DateTime.utc(),
      }))
    )
    await ledger.applyBatch(
      Array.from({ length: 100 }, () => ({ payoutId: randomUUID(), ...created }))
    )
    const reads: number[] = []
    for (let read = await relay.readOnce(); read > 0; read = await relay.readOnce()) {
      reads.push(read)
    }
    assert.lengthOf(sent, 100)
    // 128 cheap rows in four reads, a read of 22 cheap rows and 10 changes, one of 32 changes
    // (the first that grows the next), then the last 58.
    assert.deepEqual(reads, [32, 32, 32, 32, 32, 32, 58])
  }).timeout(60_000)
})
