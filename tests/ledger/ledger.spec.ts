import { test } from '@japa/runner'
import fc from 'fast-check'
import { DateTime } from 'luxon'
import { randomUUID } from 'node:crypto'
import { dropPayoutsTables, tableNames } from '../../src/database/schema.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { tellingOrder } from '../../src/ledger/telling_order.ts'
import type { PayoutChange, PayoutObservation } from '../../src/ledger/vocabulary.ts'
import { mapExecuteStatus, reduce } from '../../src/ledger/state_machine.ts'
import { locksRows, numbersConsecutively } from '../../src/database/dialects.ts'
import { Payout, PayoutEvent } from '../../src/models/main.ts'
import {
  connectionConfig,
  createAllPayoutsTables,
  recordStatements,
  setupDatabase,
  TEST_DB,
} from '../helpers/database.ts'

/** A genuine trajectory of one payout, as the service would report it. */
function trajectory(
  payoutId: string,
  outcome: 'completed' | 'failed' | 'cancelled'
): PayoutObservation[] {
  const at = (i: number) => DateTime.fromMillis(1_700_000_000_000 + i * 1000)
  const created: PayoutObservation = {
    payoutId,
    status: 'pending',
    step: 'initiated',
    source: 'webhook',
    eventType: 'payout.created',
    observedAt: at(0),
  }
  if (outcome === 'cancelled')
    return [
      created,
      { payoutId, status: 'cancelled', step: 'initiated', source: 'webhook', observedAt: at(1) },
    ]
  const steps = ['compliance_cleared', 'instructions_sent', 'collected', 'converting', 'settling']
  const processing = steps.map((step, i) => ({
    payoutId,
    status: 'processing',
    step,
    source: 'webhook' as const,
    observedAt: at(i + 1),
  }))
  if (outcome === 'failed')
    return [
      created,
      ...processing.slice(0, 3),
      { payoutId, status: 'failed', step: 'collected', source: 'webhook', observedAt: at(9) },
    ]
  return [
    created,
    ...processing,
    {
      payoutId,
      status: 'completed',
      step: 'delivered',
      completedAt: '2026-01-01T00:00:00.000Z',
      source: 'poll',
      observedAt: at(9),
    },
  ]
}

/** Observation `event` of payout `payout` (0 completes, 1 fails, 2 is cancelled), named by `naming`. */
function namedObservation(
  pick: { payout: number; event: number; naming: 'uuid' | 'read' | 'uuid+read'; owner?: string },
  ids: Array<{ uuid: string; read: string }>
): PayoutObservation {
  const { uuid, read } = ids[pick.payout]
  const events = trajectory(uuid, (['completed', 'failed', 'cancelled'] as const)[pick.payout])
  return {
    ...events[pick.event % events.length],
    payoutId: pick.naming === 'read' ? read : uuid,
    readId: pick.naming === 'uuid+read' ? read : undefined,
    fields: pick.owner ? { ownerId: pick.owner } : undefined,
  }
}

/** Resolves once `told` holds `what`: a batch applied in the background has committed. */
async function toldYet(told: string[], what: string) {
  while (!told.includes(what)) await new Promise((resolve) => setTimeout(resolve, 5))
}

/**
 * Two payouts, `first` before `second` in id order (a batch locks and tells in that order),
 * a ledger whose listener never returns for `first` (lease 1.5 s), and `second processing`
 * committed in a batch behind `first pending`: it waits there for that listener.
 */
async function behindAHungListener(
  cleanup: (fn: () => Promise<void> | void) => void,
  name: string
) {
  const { db } = await setupDatabase(cleanup, name)
  const [first, second] = [randomUUID(), randomUUID()].sort()
  const [firstCreated] = trajectory(first, 'completed')
  const [created, processing] = trajectory(second, 'completed')
  let release!: () => void
  const hung = new Promise<void>((resolve) => (release = resolve))
  cleanup(() => release())
  const told: string[] = []
  const ledger = new PayoutLedger(
    db,
    {
      onChange: (change) => {
        told.push(
          `${change.payout.payoutUuid === first ? 'first' : 'second'} ${change.current.status}`
        )
        return change.payout.payoutUuid === first ? hung : undefined
      },
    },
    { notifyLeaseMs: 1_500 }
  )
  await ledger.apply(created)
  void ledger.applyBatch([firstCreated, processing])
  await toldYet(told, 'first pending')
  return { db, ledger, told, completed: trajectory(second, 'completed').at(-1)! }
}

/** A fresh database, and ledgers on it that record every change they notify. */
async function recordingLedger(cleanup: (fn: () => Promise<void>) => void, name: string) {
  const { db } = await setupDatabase(cleanup, name)
  const changes: PayoutChange[] = []
  const make = () => new PayoutLedger(db, { onChange: (change) => void changes.push(change) })
  return { db, changes, ledger: make(), make }
}

/** The execute's answer: the payout is pending, initiated. */
function executed(ledger: PayoutLedger, payoutId: string) {
  return ledger.apply({ payoutId, status: 'pending', step: 'initiated', source: 'execute' })
}

/** A webhook naming the payout by its read id only: processing, collected. */
function collectedByReadId(ledger: PayoutLedger, readId: string) {
  return ledger.apply({
    payoutId: readId,
    status: 'processing',
    step: 'collected',
    source: 'webhook',
  })
}

/** The payouts' rows in id order, as [UUID, read id, step]. */
async function rowSteps(payoutIds: string[]) {
  const rows = await Payout.query().whereIn('payout_uuid', payoutIds).orderBy('id')
  return rows.map((r) => [r.payoutUuid, r.readId, r.step])
}

test.group('Ledger | state machine', () => {
  test('execute-time statuses map to pending; read statuses pass through', ({ assert }) => {
    assert.deepEqual(
      ['accepted', 'awaiting_escrow_deposit', 'pending', 'processing', 'whatever'].map(
        mapExecuteStatus
      ),
      ['pending', 'pending', 'pending', 'processing', 'pending']
    )
  })

  test('backwards and post-terminal observations change nothing', ({ assert }) => {
    const processing = { status: 'processing' as const, step: 'converting' as const }
    assert.deepInclude(reduce(processing, { status: 'processing', step: 'collected' }), {
      changed: false,
      reason: 'backwards',
    })
    assert.deepInclude(reduce(processing, { status: 'pending' }), {
      changed: false,
      reason: 'backwards',
    })
    const done = { status: 'completed' as const, step: 'delivered' as const }
    assert.deepInclude(reduce(done, { status: 'failed' }), {
      changed: false,
      reason: 'after_terminal',
    })
    assert.deepInclude(reduce(done, { status: 'completed', step: 'delivered' }), {
      changed: false,
      reason: 'duplicate',
    })
    assert.deepInclude(reduce(processing, { status: 'teleported' }), {
      changed: false,
      reason: 'unknown_status',
    })
    assert.deepEqual(reduce(processing, { status: 'completed' }).next, done)
  })

  test('property: any order of a trajectory, with duplicates, reduces to the same position', ({
    assert,
  }) => {
    fc.assert(
      fc.property(
        fc.constantFrom('completed' as const, 'failed' as const, 'cancelled' as const),
        fc.integer({ min: 0, max: 2 ** 31 }),
        fc.array(fc.nat(20), { maxLength: 10 }),
        (outcome, seed, dupIndexes) => {
          const events = trajectory('p', outcome)
          const withDups = [...events, ...dupIndexes.map((i) => events[i % events.length])]
          const shuffled = fc.sample(
            fc.shuffledSubarray(withDups, { minLength: withDups.length }),
            { seed, numRuns: 1 }
          )[0]
          const fold = (list: PayoutObservation[]) =>
            list.reduce((pos, o) => reduce(pos, o).next, null as any)
          assert.deepEqual(fold(shuffled), fold(events))
        }
      ),
      { seed: 4242, numRuns: 500 }
    )
  })
})

test.group(`Ledger | apply (${TEST_DB})`, () => {
  test('migrations run up and down cleanly', async ({ assert, cleanup }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'migrations')
    const names = Object.values(tableNames(prefix))
    for (const name of names) assert.isTrue(await db.connection().schema.hasTable(name), name)
    await dropPayoutsTables(db.connection().schema, prefix)
    for (const name of names) assert.isFalse(await db.connection().schema.hasTable(name), name)
    await createAllPayoutsTables(db.connection().schema, prefix)
    for (const name of names) assert.isTrue(await db.connection().schema.hasTable(name), name)
  })

  test('a webhook before the execute response lands on the same row', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup)
    const ledger = new PayoutLedger(db)
    const payoutId = randomUUID()
    await ledger.apply({
      payoutId,
      status: 'pending',
      step: 'initiated',
      source: 'webhook',
      eventType: 'payout.created',
      fields: { payoutAmount: 1701.45, payoutCurrency: 'MXN' },
    })
    await ledger.apply({
      payoutId,
      status: mapExecuteStatus('accepted'),
      source: 'execute',
      fields: { ownerId: 'user-1', flow: 'fiat_to_fiat', sourceAmount: 100, payoutAmount: 9999 },
    })
    const rows = await Payout.query().where('payout_uuid', payoutId)
    assert.lengthOf(rows, 1)
    assert.equal(rows[0].ownerId, 'user-1')
    assert.equal(
      rows[0].payoutAmount,
      '1701.45',
      'a filled field is not overwritten, and is an exact string'
    )
    assert.equal(rows[0].sourceAmount, '100')
    const events = await PayoutEvent.query().where('payout_uuid', payoutId).orderBy('id')
    assert.deepEqual(
      events.map((e) => [e.source, e.applied]),
      [
        ['webhook', true],
        ['execute', false],
      ]
    )
  })

  test('a stale observation is logged in payout_events and changes nothing', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup)
    const ledger = new PayoutLedger(db)
    const payoutId = randomUUID()
    await ledger.apply({ payoutId, status: 'processing', step: 'settling', source: 'poll' })
    const stale = await ledger.apply({
      payoutId,
      status: 'processing',
      step: 'collected',
      source: 'webhook',
    })
    assert.deepEqual([stale.changed, stale.reason], [false, 'backwards'])
    const row = await Payout.findByOrFail('payoutUuid', payoutId)
    assert.equal(row.step, 'settling')
    assert.equal(
      (await PayoutEvent.query().where('payout_uuid', payoutId).where('applied', false)).length,
      1
    )
  })

  test('property: any order of the same observations, with duplicates, ends in the same row and one completion', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'property')
    const completions: string[] = []
    const ledger = new PayoutLedger(db, {
      onChange: (change) => {
        if (change.current.status === 'completed') completions.push(change.payout.payoutUuid)
      },
    })
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: 2 ** 31 }),
        fc.array(fc.nat(6), { maxLength: 6 }),
        async (seed, dups) => {
          const payoutId = randomUUID()
          const events = trajectory(payoutId, 'completed')
          const all = [...events, ...dups.map((i) => events[i])]
          const shuffled = fc.sample(fc.shuffledSubarray(all, { minLength: all.length }), {
            seed,
            numRuns: 1,
          })[0]
          for (const observation of shuffled) await ledger.apply(observation)
          const row = await Payout.findByOrFail('payoutUuid', payoutId)
          assert.deepEqual([row.status, row.step], ['completed', 'delivered'])
          assert.equal(row.completedAt?.toUTC().toISO(), '2026-01-01T00:00:00.000Z')
          assert.equal(completions.filter((id) => id === payoutId).length, 1)
        }
      ),
      { seed: 7, numRuns: TEST_DB === 'pg' ? 25 : 40 }
    )
  })

  test('20 concurrent observations of one payout: one consistent row, one completion', async ({
    assert,
    cleanup,
  }) => {
    const { changes, ledger } = await recordingLedger(cleanup, 'concurrency')
    const payoutId = randomUUID()
    const base = trajectory(payoutId, 'completed')
    const observations = Array.from({ length: 20 }, (_, i) => base[i % base.length])
    await Promise.all(observations.map((o) => ledger.apply(o)))
    const rows = await Payout.query().where('payout_uuid', payoutId)
    assert.lengthOf(rows, 1)
    assert.deepEqual([rows[0].status, rows[0].step], ['completed', 'delivered'])
    assert.equal(changes.filter((c) => c.current.status === 'completed').length, 1)
    assert.equal(changes.filter((c) => c.created).length, 1)
    assert.equal((await PayoutEvent.query().where('payout_uuid', payoutId)).length, 20)
    // Positions reported to listeners only ever move forward.
    const ranks = changes.map((c) =>
      ['pending', 'processing', 'completed'].indexOf(c.current.status)
    )
    assert.deepEqual(
      ranks,
      [...ranks].sort((a, b) => a - b)
    )
  })
  test("a payout's changes are told in the order they committed, when telling the first one waits for the database", async ({
    assert,
    cleanup,
  }) => {
    // One connection, as SQLite's pool has: what telling the first change asks of the
    // database (its lease renewed) queues behind the second change's whole transaction.
    const { db } = await setupDatabase(cleanup, 'tell-order', {
      connection: { ...connectionConfig('tell-order'), pool: { min: 0, max: 1 } },
    })
    const told: string[] = []
    const ledger = new PayoutLedger(db, {
      onChange: (change) => void told.push(change.current.status),
    })
    const payoutId = randomUUID()
    const [created, processing] = trajectory(payoutId, 'completed')
    const completed = trajectory(payoutId, 'completed').at(-1)!
    await ledger.apply(created)
    told.length = 0
    const now = Date.now
    cleanup(() => void (Date.now = now))
    let first: Promise<void> | undefined
    let second: Promise<unknown> | undefined
    await db.transaction(async (trx) => {
      first = (await ledger.applyBatchInTransaction(trx, [processing])).notified
      // Queued for the connection this transaction holds.
      second = ledger.apply(completed)
      // A transaction that outlasts half its changes' lease (30 s): its lease is renewed
      // before they are told. The clock moves instead of the test waiting.
      Date.now = () => now() + 15_000
    })
    await Promise.all([first, second])
    assert.deepEqual(told, ['processing', 'completed'])
    assert.equal(tellingOrder.size, 0)
  })

  test('a listener that applies a change to the payout it is told of is not held behind its own telling', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'tell-nested')
    const payoutId = randomUUID()
    const [created, processing] = trajectory(payoutId, 'completed')
    const completed = trajectory(payoutId, 'completed').at(-1)!
    const told: string[] = []
    // A lease of an hour: were it held behind its own telling, it would wait 20 minutes.
    const ledger: PayoutLedger = new PayoutLedger(
      db,
      {
        onChange: async (change) => {
          told.push(change.current.status)
          if (change.current.status === 'processing') await ledger.apply(completed)
        },
      },
      { notifyLeaseMs: 3_600_000 }
    )
    await ledger.apply(created)
    await ledger.apply(processing)
    assert.deepEqual(told, ['pending', 'processing', 'completed'])
    assert.equal(tellingOrder.size, 0)
  })

  test("a listener that does not return (it waits for what the payout's next apply holds) holds none of the payout's later changes", async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'tell-hung')
    const payoutId = randomUUID()
    const [created, processing] = trajectory(payoutId, 'completed')
    const completed = trajectory(payoutId, 'completed').at(-1)!
    // What the next apply's caller holds (a lock, a row) until its apply returns.
    let release!: () => void
    const held = new Promise<void>((resolve) => (release = resolve))
    cleanup(() => release())
    let entered!: () => void
    const listening = new Promise<void>((resolve) => (entered = resolve))
    const told: string[] = []
    // A lease of an hour: held behind the listener, the next apply would wait 20 minutes.
    const ledger = new PayoutLedger(
      db,
      {
        onChange: (change) => {
          told.push(change.current.status)
          if (change.current.status !== 'processing') return
          entered()
          return held
        },
      },
      { notifyLeaseMs: 3_600_000 }
    )
    await ledger.apply(created)
    const first = ledger.apply(processing)
    await listening
    await ledger.apply(completed)
    release()
    await first
    assert.deepEqual(told, ['pending', 'processing', 'completed'])
    assert.equal(tellingOrder.size, 0)
  })

  test("a payout's change waits for the one before it in the batch ahead for a third of its lease at most", async ({
    assert,
    cleanup,
  }) => {
    const { ledger, told, completed } = await behindAHungListener(cleanup, 'tell-bound')
    await ledger.apply(completed)
    assert.deepEqual(told, ['second pending', 'first pending', 'second completed'])
  })

  test("a change waiting for its turn is held: this process's own sweep does not tell it too, however short its lease", async ({
    assert,
    cleanup,
  }) => {
    const { db, ledger, told, completed } = await behindAHungListener(cleanup, 'tell-held')
    // `completed` commits with its lease about over (a transaction that took most of it), and
    // waits for its turn behind `second processing`, itself behind `first`'s listener.
    let notified!: Promise<void>
    await db.transaction(async (trx) => {
      notified = (await ledger.applyBatchInTransaction(trx, [completed])).notified
      await new Promise((resolve) => setTimeout(resolve, 1_400))
    })
    await new Promise((resolve) => setTimeout(resolve, 200))
    // Its lease ended, as the sweep reads the clock (SQLite and MySQL keep whole seconds).
    const now = Date.now
    cleanup(() => void (Date.now = now))
    Date.now = () => now() + 2_000
    const swept = await ledger.renotify({ olderThanMs: 60_000 })
    await notified
    assert.equal(swept, 0)
    assert.deepEqual(
      told.filter((heard) => heard === 'second completed'),
      ['second completed']
    )
  })

  test("an apply a listener makes still waits for its payout's change in another batch", async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'tell-other-batch')
    const [first, second] = [randomUUID(), randomUUID()].sort()
    const [firstCreated] = trajectory(first, 'completed')
    const [created, processing] = trajectory(second, 'completed')
    const completed = trajectory(second, 'completed').at(-1)!
    let go!: () => void
    const batchCommitted = new Promise<void>((resolve) => (go = resolve))
    const told: string[] = []
    const ledger: PayoutLedger = new PayoutLedger(
      db,
      {
        onChange: async (change) => {
          const name = change.payout.payoutUuid === first ? 'first' : 'second'
          told.push(`${name} ${change.current.status}`)
          if (name === 'first') {
            go()
            // `second processing` waits behind this listener in its batch, for 300 ms.
            await new Promise((resolve) => setTimeout(resolve, 300))
          } else if (change.current.status === 'pending') {
            // Its apply is behind another batch's change of its payout, not behind this call.
            await batchCommitted
            await ledger.apply(completed)
          }
        },
      },
      { notifyLeaseMs: 3_600_000 }
    )
    const one = ledger.apply(created)
    await toldYet(told, 'second pending')
    await ledger.applyBatch([firstCreated, processing])
    await one
    assert.deepEqual(told, [
      'second pending',
      'first pending',
      'second processing',
      'second completed',
    ])
  })

  test('the changes of a batch wait a third of their lease at most, all together', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'tell-batch-bound')
    const [hanging, ...payouts] = Array.from({ length: 7 }, () => randomUUID()).sort()
    let release!: () => void
    const hung = new Promise<void>((resolve) => (release = resolve))
    cleanup(() => release())
    const told: string[] = []
    const leaseMs = 3_000
    const ledger = new PayoutLedger(
      db,
      {
        onChange: (change) => {
          told.push(`${change.payout.payoutUuid} ${change.current.status}`)
          return change.payout.payoutUuid === hanging ? hung : undefined
        },
      },
      { notifyLeaseMs: leaseMs }
    )
    await ledger.applyBatch(payouts.map((id) => trajectory(id, 'completed')[0]))
    // Each payout's `processing` waits, in its batch, behind a listener that never returns.
    void ledger.applyBatch([
      trajectory(hanging, 'completed')[0],
      ...payouts.map((id) => trajectory(id, 'completed')[1]),
    ])
    await toldYet(told, `${hanging} pending`)
    const started = Date.now()
    await ledger.applyBatch(payouts.map((id) => trajectory(id, 'completed').at(-1)!))
    // Six changes, each behind one there: had each waited its third of the lease in turn,
    // 6 s; together, 1 s (the margin to the lease is for a busy machine).
    assert.isBelow(Date.now() - started, leaseMs)
    assert.sameMembers(
      told.filter((heard) => heard.endsWith('completed')),
      payouts.map((id) => `${id} completed`)
    )
  })

  test('an apply a listener makes for a payout behind it in its batch does not wait for its own batch', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'tell-in-batch')
    const [first, second] = [randomUUID(), randomUUID()].sort()
    const [firstCreated] = trajectory(first, 'completed')
    const [created, processing] = trajectory(second, 'completed')
    const completed = trajectory(second, 'completed').at(-1)!
    const told: string[] = []
    // A lease of an hour: were the listener's apply held behind its batch, 20 minutes.
    const ledger: PayoutLedger = new PayoutLedger(
      db,
      {
        onChange: async (change) => {
          told.push(
            `${change.payout.payoutUuid === first ? 'first' : 'second'} ${change.current.status}`
          )
          if (change.payout.payoutUuid === first) await ledger.apply(completed)
        },
      },
      { notifyLeaseMs: 3_600_000 }
    )
    await ledger.apply(created)
    await ledger.applyBatch([firstCreated, processing])
    assert.deepEqual(told, [
      'second pending',
      'first pending',
      // Applied and heard during `first`'s listener: before the batch's own, as said.
      'second completed',
      'second processing',
    ])
    assert.equal(tellingOrder.size, 0)
  })
})

test.group(`Ledger | applyBatch (${TEST_DB})`, () => {
  /** The rows and notified changes a list of observations leaves, applied with `apply`. */
  async function positions(payoutIds: string[]) {
    const rows = await Payout.query().whereIn('payout_uuid', payoutIds)
    return Object.fromEntries(
      rows.map((row) => [
        row.payoutUuid,
        [row.status, row.step, row.completedAt?.toUTC().toISO() ?? null],
      ])
    )
  }

  test('property: a batch ends where applying its observations one by one ends, one commit, each change notified once', async ({
    assert,
    cleanup,
  }) => {
    const { db, changes, ledger } = await recordingLedger(cleanup, 'batch')
    const statements = recordStatements(db)
    const begins = () => statements.filter((sql) => /^begin/i.test(sql)).length
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 2 ** 31 }), async (seed) => {
        const outcomes = ['completed', 'failed', 'cancelled'] as const
        const one = [randomUUID(), randomUUID(), randomUUID()]
        const batched = [randomUUID(), randomUUID(), randomUUID()]
        const build = (ids: string[]) => ids.flatMap((id, i) => trajectory(id, outcomes[i]))
        // The same shuffle of the same trajectories, with duplicates, for both ledgers' runs.
        const order = fc.sample(
          fc.shuffledSubarray([...build(one).keys(), 0, 3, 7], {
            minLength: build(one).length + 3,
          }),
          { seed, numRuns: 1 }
        )[0]
        const serial = build(one)
        const grouped = build(batched)
        changes.length = 0
        for (const index of order) await ledger.apply(serial[index])
        const serialChanges = changes.length
        changes.length = 0
        const before = begins()
        const results = await ledger.applyBatch(order.map((index) => grouped[index]))
        assert.equal(begins() - before, 1, 'one transaction for the batch')
        assert.lengthOf(results, order.length)
        assert.equal(changes.length, serialChanges, 'as many changes as one by one')
        const rename = (map: Record<string, unknown>, ids: string[]) => ids.map((id) => map[id])
        assert.deepEqual(
          rename(await positions(batched), batched),
          rename(await positions(one), one)
        )
        // Each payout's changes reach listeners moving forward, and all are marked notified.
        for (const id of batched) {
          const ranks = changes
            .filter((change) => change.payout.payoutUuid === id)
            .map((change) => ['pending', 'processing'].indexOf(change.current.status) + 1 || 3)
          assert.deepEqual(
            ranks,
            [...ranks].sort((a, b) => a - b)
          )
        }
        const unnotified = await PayoutEvent.query()
          .whereIn('payout_uuid', batched)
          .where('applied', true)
          .whereNull('notified_at')
        assert.lengthOf(unnotified, 0)
      }),
      { seed: 11, numRuns: TEST_DB === 'pg' ? 10 : 20 }
    )
  })

  test('property: a batch naming payouts by UUID and by read id, with owners, leaves the same rows, log, results and changes as one by one', async ({
    assert,
    cleanup,
  }) => {
    const { changes, ledger } = await recordingLedger(cleanup, 'batch')
    const outcomes = ['completed', 'failed', 'cancelled'] as const
    // Per observation: which payout, which id it goes by, and which owner it gives.
    const shape = fc.array(
      fc.record({
        payout: fc.nat(2),
        event: fc.nat(8),
        naming: fc.constantFrom('uuid', 'uuid+read', 'read'),
        owner: fc.constantFrom(undefined, 'owner-a', 'owner-b'),
      }),
      { minLength: 2, maxLength: 24 }
    )
    // Everything one set of ids leaves behind, named by payout number, not by id.
    const observe = async (ids: Array<{ uuid: string; read: string }>) => {
      const name = (id: string | null) => {
        const index = ids.findIndex((p) => p.uuid === id || p.read === id)
        return index < 0 ? id : `${index}:${ids[index].uuid === id ? 'uuid' : 'read'}`
      }
      const all = ids.flatMap((p) => [p.uuid, p.read])
      const rows = await Payout.query().whereIn('payout_uuid', all).orderBy('payout_uuid')
      const events = await PayoutEvent.query().whereIn('payout_uuid', all).orderBy('id')
      return {
        rows: rows
          .map((r) => [name(r.payoutUuid), name(r.readId), r.ownerId, r.status, r.step])
          .sort((a, b) => String(a[0]).localeCompare(String(b[0]))),
        log: rows
          .map((r) => [
            name(r.payoutUuid),
            events
              .filter((e) => e.payoutUuid === r.payoutUuid)
              .map((e) => [e.status, e.step, e.applied, e.reason, e.notifiedAt !== null]),
          ])
          .sort((a, b) => String(a[0]).localeCompare(String(b[0]))),
        changes: changes
          .map((c) => [
            name(c.payout.payoutUuid),
            c.previous,
            c.current,
            c.created,
            c.payout.ownerId,
          ])
          .sort((a, b) => String(a[0]).localeCompare(String(b[0]))),
      }
    }
    await fc.assert(
      fc.asyncProperty(shape, async (picks) => {
        const run = async (batched: boolean) => {
          const ids = outcomes.map(() => ({ uuid: randomUUID(), read: `po_${randomUUID()}` }))
          const observations = picks.map((pick) => namedObservation(pick, ids))
          changes.length = 0
          let results
          if (batched) results = await ledger.applyBatch(observations)
          else {
            // One by one in the order a batch applies them (by payout id, stable).
            const order = observations
              .map((_, i) => i)
              .sort((a, b) =>
                observations[a].payoutId < observations[b].payoutId
                  ? -1
                  : observations[a].payoutId > observations[b].payoutId
                    ? 1
                    : a - b
              )
            results = []
            for (const i of order) results[i] = await ledger.apply(observations[i])
          }
          return {
            ...(await observe(ids)),
            results: results.map((r) => [r.changed, r.reason, r.ownerAttached]),
          }
        }
        assert.deepEqual(await run(true), await run(false))
      }),
      { seed: 23, numRuns: TEST_DB === 'pg' ? 15 : 30 }
    )
  })

  test('a batch of new payouts takes a few statements, plus one save per payout, not several per observation', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'batch')
    const ledger = new PayoutLedger(db)
    const statements = recordStatements(db)
    const ids = Array.from({ length: 40 }, () => randomUUID())
    // Two observations per payout: 80 observations, 40 payouts.
    const observations = ids.flatMap((id) => trajectory(id, 'completed').slice(0, 2))
    await ledger.applyBatch(observations)
    const during = statements.slice(
      statements.findIndex((sql) => /^begin/i.test(sql)),
      statements.findIndex((sql) => /^commit/i.test(sql)) + 1
    )
    // begin, select, insert, select, 40 saves, one insert into the log, commit. MySQL has
    // no RETURNING: one log INSERT where InnoDB numbers a multi-row INSERT consecutively
    // (read in one more statement), else one per observation.
    // SQLite's transaction takes the write lock first, with a DELETE that matches nothing.
    const logInserts =
      TEST_DB === 'mysql' && !(await numbersConsecutively(db.connection()))
        ? observations.length
        : 1
    const writeLock = TEST_DB === 'sqlite' ? 1 : 0
    assert.isAtMost(during.length, ids.length + logInserts + writeLock + 5)
    if (writeLock) assert.match(during[1], /^delete from .*payouts.* where 0$/i)
    assert.lengthOf(
      during.filter((sql) => /insert into .*payout_events/i.test(sql)),
      logInserts
    )
    const rows = await Payout.query().whereIn('payout_uuid', ids)
    assert.isTrue(
      rows.every((row) => row.status === 'processing' && row.step === 'compliance_cleared')
    )
  })

  test('two ledgers inserting new payouts side by side at once both commit (a deadlock victim runs again)', async ({
    assert,
    cleanup,
  }) => {
    const { make } = await recordingLedger(cleanup, 'batch')
    // Each round: two batches of new payouts whose ids interleave, so each ledger's locking
    // read meets the rows the other has just inserted (MySQL picks a deadlock victim there;
    // at REPEATABLE READ the gaps each read locked deadlock the inserts as well).
    for (let round = 0; round < 10; round++) {
      const ids = Array.from({ length: 20 }, () => randomUUID()).toSorted()
      const batch = (part: number) =>
        ids
          .filter((_, index) => index % 2 === part)
          .flatMap((id) => trajectory(id, 'completed').slice(0, 2))
      await Promise.all([make().applyBatch(batch(0)), make().applyBatch(batch(1))])
      const rows = await Payout.query().whereIn('payout_uuid', ids)
      assert.lengthOf(rows, 20)
    }
  })

  test('two ledgers applying overlapping batches at once: consistent rows, one completion each', async ({
    assert,
    cleanup,
  }) => {
    const { changes, make } = await recordingLedger(cleanup, 'batch')
    const ids = Array.from({ length: 6 }, () => randomUUID())
    const all = ids.flatMap((id) => trajectory(id, 'completed'))
    // Opposite orders: without ordered locking, PostgreSQL would find a deadlock here.
    await Promise.all([make().applyBatch(all), make().applyBatch([...all].reverse())])
    const rows = await Payout.query().whereIn('payout_uuid', ids)
    assert.lengthOf(rows, 6)
    assert.isTrue(rows.every((row) => row.status === 'completed' && row.step === 'delivered'))
    for (const id of ids) {
      const completed = changes.filter(
        (c) => c.payout.payoutUuid === id && c.current.status === 'completed'
      )
      assert.lengthOf(completed, 1)
    }
  })

  test('when one observation fails, the batch applies nothing and throws', async ({
    assert,
    cleanup,
  }) => {
    const { changes, ledger } = await recordingLedger(cleanup, 'batch')
    const good = randomUUID()
    // No payout id: the database refuses the query, whatever the dialect.
    const bad = { ...trajectory(randomUUID(), 'completed')[0], payoutId: undefined as any }
    await assert.rejects(() => ledger.applyBatch([trajectory(good, 'completed')[0], bad]))
    assert.lengthOf(await Payout.query().where('payout_uuid', good), 0)
    assert.lengthOf(changes, 0)
  })
})

test.group(`Ledger | a payout first seen by its read id (${TEST_DB})`, () => {
  const at = (i: number) => DateTime.fromMillis(1_700_000_000_000 + i * 1000)
  /** Everything the ledger holds under either id of one payout. */
  async function held(uuid: string, read: string) {
    const rows = await Payout.query().whereIn('payout_uuid', [uuid, read])
    const log = await PayoutEvent.query().whereIn('payout_uuid', [uuid, read]).orderBy('id')
    return { rows, log }
  }

  /**
   * A recording ledger, one payout's two ids, and `run`, which applies an observation alone
   * (`apply`) or in a batch with another payout's (`batch`, before or after it) and returns
   * its own result.
   */
  async function twoIds(
    cleanup: (fn: () => Promise<void>) => void,
    mode: 'apply' | 'batch',
    otherFirst: boolean
  ) {
    const { changes, ledger } = await recordingLedger(cleanup, 'readid')
    const other = trajectory(randomUUID(), 'completed')[0]
    const run = (o: PayoutObservation) =>
      mode === 'apply'
        ? ledger.apply(o)
        : ledger.applyBatch(otherFirst ? [other, o] : [o, other]).then((r) => r[otherFirst ? 1 : 0])
    const uuid = randomUUID()
    const read = `po_${randomUUID()}`
    // A reconciliation read: both ids, at processing/collected.
    const linkingRead = (observedAt: DateTime) =>
      run({
        payoutId: uuid,
        readId: read,
        status: 'processing',
        step: 'collected',
        source: 'poll',
        eventType: 'reconcile',
        observedAt,
      })
    return { changes, ledger, run, linkingRead, uuid, read }
  }

  for (const mode of ['apply', 'batch'] as const) {
    test(`a read id's placeholder becomes the UUID's row once an observation links them, announced as created there (${mode})`, async ({
      assert,
      cleanup,
    }) => {
      const { changes, run, linkingRead, uuid, read } = await twoIds(cleanup, mode, false)
      await run({
        payoutId: read,
        status: 'processing',
        step: 'compliance_cleared',
        source: 'webhook',
        observedAt: at(1),
      })
      await linkingRead(at(2))
      // The read id alone still finds the same payout.
      await run({
        payoutId: read,
        status: 'completed',
        step: 'delivered',
        source: 'webhook',
        observedAt: at(3),
      })

      const { rows, log } = await held(uuid, read)
      assert.deepEqual(
        rows.map((r) => [r.payoutUuid, r.readId, r.status, r.step]),
        [[uuid, read, 'completed', 'delivered']]
      )
      assert.deepEqual(
        log.map((e) => [e.payoutUuid, e.mergedFrom, e.eventType, e.step, e.applied]),
        [
          [uuid, read, null, 'compliance_cleared', true],
          [uuid, null, 'merge', 'compliance_cleared', true],
          [uuid, null, 'reconcile', 'collected', true],
          [uuid, null, null, 'delivered', true],
        ],
        'the placeholder log moved over as its own line; nothing is left under the read id'
      )
      assert.deepEqual(
        changes
          .filter((c) => [uuid, read].includes(c.payout.payoutUuid))
          .map((c) => [c.payout.payoutUuid, c.previous?.step ?? null, c.current.step, c.created]),
        [
          [read, null, 'compliance_cleared', true],
          [uuid, null, 'compliance_cleared', true],
          [uuid, 'compliance_cleared', 'collected', false],
          [uuid, 'collected', 'delivered', false],
        ],
        'each id has one line of changes, and the UUID hears where the read id had got to'
      )
    })

    test(`a placeholder ahead of the UUID's own row is merged into it, and the owner hears the position (${mode})`, async ({
      assert,
      cleanup,
    }) => {
      const { changes, ledger, run, linkingRead, uuid, read } = await twoIds(cleanup, mode, true)
      await ledger.apply({
        payoutId: uuid,
        status: 'pending',
        step: 'initiated',
        source: 'execute',
        eventType: 'execute',
        observedAt: at(0),
        fields: { ownerId: 'owner-1', sourceAmount: 100 },
      })
      await run({
        payoutId: read,
        status: 'processing',
        step: 'converting',
        source: 'websocket',
        observedAt: at(5),
        fields: { payoutAmount: '1701.45', payoutCurrency: 'MXN' },
      })
      // The reconciler's read: both ids, a step behind what the read id's row holds.
      const result = await linkingRead(at(6))
      assert.isFalse(result.changed, 'the reconcile read itself is stale once merged')

      const { rows, log } = await held(uuid, read)
      assert.deepEqual(
        rows.map((r) => [
          r.payoutUuid,
          r.readId,
          r.ownerId,
          r.status,
          r.step,
          r.sourceAmount,
          r.payoutAmount,
          r.payoutCurrency,
        ]),
        [[uuid, read, 'owner-1', 'processing', 'converting', '100', '1701.45', 'MXN']]
      )
      assert.deepEqual(
        log.map((e) => [e.payoutUuid, e.mergedFrom, e.source, e.eventType, e.step, e.applied]),
        [
          [uuid, null, 'execute', 'execute', 'initiated', true],
          [uuid, read, 'websocket', null, 'converting', true],
          [uuid, null, 'websocket', 'merge', 'converting', true],
          [uuid, null, 'poll', 'reconcile', 'collected', false],
        ]
      )
      const owners = changes
        .filter((c) => c.payout.payoutUuid === uuid)
        .map((c) => [c.previous?.step ?? null, c.current.step, c.payout.ownerId, c.source])
      assert.deepEqual(owners, [
        [null, 'initiated', 'owner-1', 'execute'],
        ['initiated', 'converting', 'owner-1', 'websocket'],
      ])
      const unnotified = await PayoutEvent.query()
        .where('payout_uuid', uuid)
        .where('applied', true)
        .whereNull('notified_at')
      assert.lengthOf(unnotified, 0)
    })
  }

  test('a read id sighting waiting on a merge in progress lands on the merged row', async ({
    assert,
    cleanup,
  }) => {
    const { db, changes, ledger } = await recordingLedger(cleanup, 'readid')
    const uuid = randomUUID()
    const read = `po_${randomUUID()}`
    await executed(ledger, uuid)
    await collectedByReadId(ledger, read)
    // The merge holds its transaction open while the next read-id sighting arrives (on
    // PostgreSQL that sighting waits on the placeholder's lock, then finds it gone).
    const trx = await db.transaction()
    const merging = await ledger.applyBatchInTransaction(trx, [
      { payoutId: uuid, readId: read, status: 'processing', step: 'collected', source: 'poll' },
    ])
    const sighting = ledger.apply({
      payoutId: read,
      status: 'processing',
      step: 'converting',
      source: 'webhook',
    })
    await new Promise((resolve) => setTimeout(resolve, 100))
    await trx.commit()
    await merging.notified
    assert.isTrue((await sighting).changed)
    assert.deepEqual(await rowSteps([uuid, read]), [[uuid, read, 'converting']])
    assert.deepEqual(
      changes.filter((c) => c.payout.payoutUuid === uuid).map((c) => c.current.step),
      ['initiated', 'collected', 'converting']
    )
  })

  test('a batch that links ids locks its rows in id order like any other: no deadlock with a batch locking them in that order', async ({
    assert,
    cleanup,
  }) => {
    const { db, ledger } = await recordingLedger(cleanup, 'readid')
    const [first, second] = [randomUUID(), randomUUID()]
    const read = `po_${randomUUID()}`
    for (const payoutId of [first, second]) await executed(ledger, payoutId)
    await collectedByReadId(ledger, read)
    const ids = await Payout.query().whereIn('payout_uuid', [first, second, read]).orderBy('id')
    // Another transaction takes the rows in id order, the way every ledger batch does, and
    // holds the second payout while the linking batch starts.
    const other = await db.transaction()
    const lock = (id: number) =>
      locksRows(other)
        ? other.from(Payout.table).where('id', id).forUpdate()
        : other.from(Payout.table).where('id', id)
    await lock(ids[1].id)
    const linking = ledger.applyBatch([
      { payoutId: first, readId: read, status: 'processing', step: 'collected', source: 'poll' },
      { payoutId: second, status: 'processing', step: 'collected', source: 'poll' },
    ])
    await new Promise((resolve) => setTimeout(resolve, 200))
    await lock(ids[2].id)
    await other.commit()
    await linking
    assert.deepEqual(await rowSteps([first, second, read]), [
      [first, read, 'collected'],
      [second, null, 'collected'],
    ])
  })

  test('a read id the service already gave another UUID is not taken; the observation still applies', async ({
    assert,
    cleanup,
  }) => {
    const { ledger } = await recordingLedger(cleanup, 'readid')
    const first = randomUUID()
    const second = randomUUID()
    const read = `po_${randomUUID()}`
    await ledger.apply({
      payoutId: first,
      readId: read,
      status: 'pending',
      step: 'initiated',
      source: 'poll',
    })
    await executed(ledger, second)
    const result = await ledger.apply({
      payoutId: second,
      readId: read,
      status: 'processing',
      step: 'collected',
      source: 'poll',
    })
    assert.isTrue(result.changed)
    assert.deepEqual(await rowSteps([first, second]), [
      [first, read, 'initiated'],
      [second, null, 'collected'],
    ])
  })

  test('property: in any order and any batches, a payout named by both ids ends as one row with both, at the position of all its observations', async ({
    assert,
    cleanup,
  }) => {
    const { changes, ledger } = await recordingLedger(cleanup, 'readid')
    const outcomes = ['completed', 'failed', 'cancelled'] as const
    const shape = fc.record({
      picks: fc.array(
        fc.record({
          payout: fc.nat(2),
          event: fc.nat(8),
          naming: fc.constantFrom('uuid', 'read', 'read', 'uuid+read'),
        }),
        { minLength: 1, maxLength: 16 }
      ),
      // Where each payout's linking observation (both ids) goes, and the batch cuts.
      links: fc.tuple(fc.nat(16), fc.nat(16), fc.nat(16)),
      cuts: fc.array(fc.nat(19), { maxLength: 5 }),
    })
    await fc.assert(
      fc.asyncProperty(shape, async ({ picks, links, cuts }) => {
        const ids = outcomes.map(() => ({ uuid: randomUUID(), read: `po_${randomUUID()}` }))
        const tagged = picks.map((pick) => ({ ...pick }))
        links.forEach((position, payout) =>
          tagged.splice(Math.min(position, tagged.length), 0, {
            payout,
            event: position,
            naming: 'uuid+read',
          })
        )
        const observations = tagged.map((pick) => namedObservation(pick, ids))
        changes.length = 0
        const bounds = [
          ...new Set([
            0,
            ...cuts.map((c) => Math.min(c, observations.length)),
            observations.length,
          ]),
        ].sort((a, b) => a - b)
        for (let i = 1; i < bounds.length; i++) {
          const batch = observations.slice(bounds[i - 1], bounds[i])
          if (batch.length === 1) await ledger.apply(batch[0])
          else await ledger.applyBatch(batch)
        }
        for (const [payout, { uuid, read }] of ids.entries()) {
          const own = observations.filter((o) => o.payoutId === uuid || o.payoutId === read)
          let expected: { status: string; step: string | null } | null = null
          for (const o of own)
            expected = reduce(expected as any, { status: o.status, step: o.step }).next
          const { rows, log } = await held(uuid, read)
          assert.deepEqual(
            rows.map((r) => [r.payoutUuid, r.readId, r.status, r.step]),
            [[uuid, read, expected!.status, expected!.step]],
            `payout ${payout}`
          )
          assert.equal(
            log.filter((e) => e.eventType !== 'merge').length,
            own.length,
            'every observation logged once'
          )
          assert.isTrue(log.every((e) => e.payoutUuid === uuid))
          assert.isTrue(
            log.every((e) => !e.applied || e.notifiedAt !== null),
            'every change notified'
          )
          // The position the row holds was announced, under one id or the other.
          assert.isTrue(
            changes.some(
              (c) =>
                [uuid, read].includes(c.payout.payoutUuid) &&
                c.current.status === expected!.status &&
                c.current.step === expected!.step
            )
          )
        }
      }),
      { seed: 31, numRuns: TEST_DB === 'pg' ? 25 : 60 }
    )
  })
})

test.group(`Ledger | outbox sweep (${TEST_DB})`, () => {
  test('a sweep given up at its deadline fires nothing more when it resumes', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'sweep')
    // A process whose hooks all failed: two changes left un-notified.
    const failing = new PayoutLedger(db, {
      onChange: () => {
        throw new Error('listener down')
      },
    })
    const [first, second] = [randomUUID(), randomUUID()]
    // The changes commit; their listener's failure is not thrown back at the apply.
    for (const payoutId of [first, second]) {
      const applied = await failing.apply({
        payoutId,
        status: 'pending',
        step: 'initiated',
        source: 'webhook',
      })
      assert.isTrue(applied.changed)
    }
    assert.lengthOf(await PayoutEvent.query().whereNull('notified_at'), 2)
    // A sweeping process whose first hook hangs past the sweep's deadline, then resumes. The
    // deadline bounds the next sweep too, which does real work: 200 ms was too short for it
    // on MySQL with the suite's other processes busy.
    const fired: string[] = []
    let release!: () => void
    const hanging = new Promise<void>((resolve) => (release = resolve))
    const sweeper = new PayoutLedger(
      db,
      {
        onChange: async (change) => {
          fired.push(change.payout.payoutUuid)
          if (fired.length === 1) await hanging
        },
      },
      { transactionTimeoutMs: 1500 }
    )
    const stalled = await sweeper.renotify({ olderThanMs: 0 }).then(
      () => null,
      (error) => error
    )
    assert.equal(stalled?.code, 'E_PAYOUTS_TIMEOUT')
    // The next sweep leaves the change in flight alone and fires the other one.
    assert.equal(await sweeper.renotify({ olderThanMs: 0 }), 1)
    assert.deepEqual(fired, [first, second])
    // The first sweep resumes: it was given up, so it fires nothing more.
    release()
    await new Promise((resolve) => setTimeout(resolve, 100))
    assert.deepEqual(fired, [first, second])
    assert.equal(await sweeper.renotify({ olderThanMs: 0 }), 0)
  })
})
