import { test } from '@japa/runner'
import { randomUUID } from 'node:crypto'
import type { Database } from '@adonisjs/lucid/database'
import { fromDbDate } from '../../src/database/dates.ts'
import { PayoutApplier } from '../../src/ledger/payout_applier.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { PayoutOutbox } from '../../src/ledger/payout_outbox.ts'
import type { PayoutChange, PayoutObservation } from '../../src/ledger/vocabulary.ts'
import { PayoutEvent } from '../../src/models/main.ts'
import { waitFor } from '../chaos/helpers.ts'
import { recordStatements, setupDatabase, TEST_DB } from '../helpers/database.ts'

/**
 * The notification lease between live processes, each one an outbox with its own owner on
 * one database: a change fires in one of them, whatever the database or the clock does
 * between its COMMIT and its mark.
 */

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** A process on `db`: its owner, its applier and its outbox, recording what it fires. */
function processOn(db: Database, owner: string, leaseMs: number, hook?: () => Promise<void>) {
  const lease = { owner, ms: leaseMs }
  const fired: number[] = []
  const onChange = async (change: PayoutChange) => {
    fired.push(change.eventId)
    await hook?.()
  }
  const outbox = new PayoutOutbox(db, { onChange }, undefined, 5000, lease)
  const applier = new PayoutApplier(lease)
  return { outbox, applier, fired }
}

/**
 * `db` with each UPDATE the outbox sends outside a transaction shown first to `before`,
 * which may break it (`'fail'`: the database refuses the statement).
 */
function watchedUpdates(db: Database, before: (values: Record<string, unknown>) => 'fail' | void) {
  const watched = Object.create(db) as Database
  watched.connection = ((name?: string) => {
    const client = db.connection(name)
    const from = client.from.bind(client)
    client.from = ((table: any) => {
      const query = from(table) as any
      const update = query.update.bind(query)
      query.update = (values: Record<string, unknown>, ...rest: unknown[]) =>
        before(values) === 'fail'
          ? update({ ...values, no_such_column: 1 }, ...rest)
          : update(values, ...rest)
      return query
    }) as any
    return client
  }) as any
  return watched
}

/** Whether a statement renews a lease: an UPDATE that sets `notify_until` alone. */
function isRenewal(sql: string) {
  return /^update .* set [`"]notify_until[`"] = \S+ where /i.test(sql)
}

/** How many ids the IN list of a statement names. */
function idsIn(sql: string) {
  return (/ in \(([^)]*)\)/i.exec(sql)?.[1] ?? '').split(',').length
}

/**
 * Makes the first statement `matches` finds hang, as one sent on a pooled connection that
 * died without closing its socket: no answer, ever (knex's timeout, if any, gives it up).
 */
function hangFirst(
  db: Database,
  cleanup: (fn: () => void) => void,
  matches: (sql: string, bindings: unknown[]) => boolean
) {
  const knex = (db.connection().getWriteClient() as any).client
  const query = knex._query
  let hung = 0
  knex._query = function (connection: unknown, obj: { sql: string; bindings?: unknown[] }) {
    if (hung > 0 || !matches(obj.sql, obj.bindings ?? [])) return query.call(this, connection, obj)
    hung++
    return new Promise(() => {})
  }
  cleanup(() => void (knex._query = query))
  return () => hung
}

function observation(): PayoutObservation {
  return { payoutId: randomUUID(), status: 'pending', step: 'initiated', source: 'webhook' }
}

test.group(`Outbox | fencing between live processes (${TEST_DB})`, () => {
  test('a mark the database lost stays leased and lands at a renewal: no other process fires it', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'fencing')
    let marksFailed = 0
    // The first mark fails (the database away for a moment); the ones after it land.
    const flaky = watchedUpdates(db, (values) => {
      if (!('notified_at' in values) || marksFailed > 0) return
      marksFailed++
      return 'fail'
    })
    const web = processOn(flaky, 'web', 3000)
    const worker = processOn(db, 'worker', 3000)
    const batch = await db.transaction((trx) =>
      web.applier.applyBatchInTransaction(trx, [observation()])
    )
    await web.outbox.notifyBatch(batch)
    assert.equal(marksFailed, 1)
    assert.lengthOf(web.fired, 1)

    // The web process never sweeps; the worker does, every 250 ms, past the web's lease.
    const until = Date.now() + 5000
    while (Date.now() < until) {
      await worker.outbox.renotify({ olderThanMs: 60_000 })
      await sleep(250)
    }
    assert.deepEqual(worker.fired, [], 'the worker left the change alone')
    const row = await PayoutEvent.findOrFail(web.fired[0])
    assert.isNotNull(row.notifiedAt, 'marked by the web process, without a sweep')
    assert.isNull(row.notifyUntil)
  }).timeout(20_000)

  test('a lease the applying transaction outlived, taken by another process: left to it', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'fencing')
    const slow = processOn(db, 'slow', 2000)
    const other = processOn(db, 'other', 2000)
    // The transaction outlives its lease (MySQL keeps whole seconds: a second more).
    const batch = await db.transaction(async (trx) => {
      const applied = await slow.applier.applyBatchInTransaction(trx, [observation()])
      await sleep(3200)
      return applied
    })
    assert.equal(await other.outbox.renotify({ olderThanMs: 60_000 }), 1)
    await slow.outbox.notifyBatch(batch)
    assert.deepEqual(slow.fired, [], 'the slow process fires nothing it no longer holds')
    assert.lengthOf(other.fired, 1)
    const row = await PayoutEvent.findOrFail(other.fired[0])
    assert.isNotNull(row.notifiedAt)
  }).timeout(20_000)

  test('a lease the applying transaction outlived, taken by nobody: renewed, fired once', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'fencing')
    const slow = processOn(db, 'slow', 2000)
    const other = processOn(db, 'other', 2000)
    const batch = await db.transaction(async (trx) => {
      const applied = await slow.applier.applyBatchInTransaction(trx, [
        observation(),
        observation(),
      ])
      await sleep(3200)
      return applied
    })
    await slow.outbox.notifyBatch(batch)
    assert.lengthOf(slow.fired, 2)
    assert.equal(await other.outbox.renotify({ olderThanMs: 0 }), 0)
    assert.lengthOf(await PayoutEvent.query().whereNull('notified_at'), 0)
  }).timeout(20_000)

  test('a fresh lease costs no statement before the hooks: marks only', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'fencing')
    const live = processOn(db, 'live', 30_000)
    const batch = await db.transaction((trx) =>
      live.applier.applyBatchInTransaction(trx, [observation(), observation(), observation()])
    )
    const statements = recordStatements(db)
    await live.outbox.notifyBatch(batch)
    assert.lengthOf(live.fired, 3)
    assert.isNotEmpty(statements)
    for (const sql of statements)
      assert.match(sql, /set [`"]notified_at[`"]/, 'a mark, no lease check')
  })

  test('a sweep ending while a batch of the same instance holds its change: not fired twice', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'fencing')
    let release!: () => void
    const released = new Promise<void>((resolve) => (release = resolve))
    let batch: Awaited<ReturnType<PayoutApplier['applyBatchInTransaction']>> | undefined
    let notifying: Promise<void> | undefined
    // The batch's notify starts as the sweep takes the change (after its own check), and its
    // listener is still running when the sweep lets the change go.
    const watched = watchedUpdates(db, (values) => {
      if (values.notify_owner === 'one' && batch && !notifying) {
        notifying = one.outbox.notifyBatch(batch)
      }
    })
    const one = processOn(watched, 'one', 1000, () => released)
    // The transaction outlives its lease (MySQL and SQLite keep whole seconds: a second more),
    // so the instance's own sweep may take the change as its batch starts.
    batch = await db.transaction(async (trx) => {
      const applied = await one.applier.applyBatchInTransaction(trx, [observation()])
      await sleep(2200)
      return applied
    })
    const swept = one.outbox.renotify({ olderThanMs: 0 })
    await waitFor('the batch to fire', () => one.fired.length > 0, { timeoutMs: 5000 })
    const sweptCount = await Promise.race([swept, sleep(1000).then(() => 'running')])
    release()
    await notifying
    await swept
    assert.notEqual(notifying, undefined)
    assert.equal(sweptCount, 0, 'the sweep left the change to the batch')
    assert.lengthOf(one.fired, 1)
    assert.lengthOf(await PayoutEvent.query().whereNull('notified_at'), 0)
  }).timeout(20_000)

  test('a lease with less than two thirds left is renewed before the hooks: the next renewal may come a third later', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'fencing')
    const statements = recordStatements(db)
    const live = processOn(db, 'live', 3000, async () => void statements.push('-- hook'))
    // Half the lease is gone by COMMIT (a slow transaction, a pause).
    const batch = await db.transaction(async (trx) => {
      const applied = await live.applier.applyBatchInTransaction(trx, [observation()])
      await sleep(1500)
      return applied
    })
    statements.splice(0)
    await live.outbox.notifyBatch(batch)
    assert.lengthOf(live.fired, 1)
    const beforeHook = statements.slice(0, statements.indexOf('-- hook'))
    assert.isTrue(beforeHook.some(isRenewal), 'renewed before the hook')
  })

  test('a renewal stuck on a dead connection fails in time: the next one renews, no other process fires the change', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'fencing')
    let listening = false
    // The web's first renewal while its listener runs never gets an answer.
    const hung = hangFirst(
      db,
      cleanup,
      (sql, bindings) => listening && isRenewal(sql) && bindings.includes('web')
    )
    const web = processOn(db, 'web', 3000, async () => {
      listening = true
      await sleep(4500)
    })
    const other = processOn(db, 'other', 3000)
    const batch = await db.transaction((trx) =>
      web.applier.applyBatchInTransaction(trx, [observation()])
    )
    let done = false
    const notifying = web.outbox.notifyBatch(batch).finally(() => (done = true))
    // The other process sweeps every 200 ms while the web's listener runs.
    while (!done) {
      await other.outbox.renotify({ olderThanMs: 60_000 })
      await sleep(200)
    }
    await notifying
    assert.equal(hung(), 1, 'a renewal hung')
    assert.lengthOf(web.fired, 1)
    assert.deepEqual(other.fired, [], 'the lease held: the other process left the change alone')
    assert.lengthOf(await PayoutEvent.query().whereNull('notified_at'), 0)
  }).timeout(20_000)

  test("a lease check the database refused: the change is let go with its payout's later ones, which go out in order", async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'fencing')
    let refused = 0
    // The first lease check fails (the database away for a moment).
    const flaky = watchedUpdates(db, (values) => {
      if (Object.keys(values).join() !== 'notify_until' || refused > 0) return
      refused++
      return 'fail'
    })
    const web = processOn(flaky, 'web', 30_000)
    const other = processOn(db, 'other', 30_000)
    const [first, second] = [randomUUID(), randomUUID()].sort()
    const batch = await db.transaction((trx) =>
      web.applier.applyBatchInTransaction(trx, [
        { payoutId: first, status: 'pending', step: 'initiated', source: 'webhook' },
        { payoutId: first, status: 'processing', step: 'collected', source: 'webhook' },
        { payoutId: second, status: 'pending', step: 'initiated', source: 'webhook' },
      ])
    )
    const [one, two, three] = batch.outcomes.map(({ change }) => change!.eventId)
    // The lease's end not known: each change's lease is checked before its hooks.
    await web.outbox.notifyBatch({ ...batch, notifyUntil: null })
    assert.equal(refused, 1)
    assert.deepEqual(web.fired, [three], 'the other payout went on')
    const rows = await PayoutEvent.query().whereIn('id', [one, two]).orderBy('id', 'asc')
    assert.deepEqual(
      rows.map((row) => [row.notifyOwner, row.notifiedAt]),
      [
        [null, null],
        [null, null],
      ],
      'both let go, neither fired'
    )
    assert.equal(await other.outbox.renotify({ olderThanMs: 0 }), 2)
    assert.deepEqual(other.fired, [one, two], 'in order')
  })

  test('a lease end is known as stored: whole seconds on SQLite and MySQL, never later', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'fencing')
    const statements = recordStatements(db)
    const live = processOn(db, 'live', 3000, async () => void statements.push('-- hook'))
    // Applied .600 to .700 into a second: its lease's end loses as much where whole seconds.
    await waitFor('a second .600 into', () => Date.now() % 1000 >= 600 && Date.now() % 1000 < 700, {
      timeoutMs: 2000,
      everyMs: 5,
    })
    const batch = await db.transaction((trx) =>
      live.applier.applyBatchInTransaction(trx, [observation()])
    )
    // As stored: no fraction where the column keeps none, so it is never counted later than
    // the database will see it.
    const stored = await db
      .from(PayoutEvent.table)
      .where('id', batch.outcomes[0].change!.eventId)
      .first()
    const wholeSeconds = TEST_DB !== 'pg'
    if (wholeSeconds) assert.equal(batch.notifyUntil.millisecond, 0)
    assert.isAtMost(
      batch.notifyUntil.toMillis(),
      fromDbDate(db.connection(), stored.notify_until)!.toMillis()
    )
    await live.outbox.notifyBatch(batch)
    assert.include(statements, '-- hook')
  })

  test('changes whose marks were lost are marked again at most 500 per statement', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'fencing')
    let away = true
    const flaky = watchedUpdates(db, (values) =>
      away && 'notified_at' in values ? 'fail' : undefined
    )
    const web = processOn(flaky, 'web', 1500)
    // 600 changes in three batches (SQLite's multi-row INSERT takes 500 rows at most).
    for (let batches = 0; batches < 3; batches++) {
      const observations = Array.from({ length: 200 }, () => observation())
      const batch = await db.transaction((trx) =>
        web.applier.applyBatchInTransaction(trx, observations)
      )
      await web.outbox.notifyBatch(batch)
    }
    assert.lengthOf(web.fired, 600)
    const statements = recordStatements(db)
    away = false
    await waitFor(
      'every mark to land',
      async () => (await PayoutEvent.query().whereNull('notified_at')).length === 0,
      { timeoutMs: 10_000 }
    )
    const marks = statements.filter((sql) => /set [`"]notified_at[`"]/.test(sql))
    assert.isNotEmpty(marks)
    assert.isAtMost(Math.max(...marks.map(idsIn)), 500)
  }).timeout(20_000)

  test('two ledgers of one process: one does not take a change the other is firing', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'fencing')
    let release!: () => void
    const released = new Promise<void>((resolve) => (release = resolve))
    const firedByOne: number[] = []
    const firedByTwo: number[] = []
    const one = new PayoutLedger(db, {
      onChange: async (change) => {
        firedByOne.push(change.eventId)
        await released
      },
    })
    const two = new PayoutLedger(db, { onChange: (change) => void firedByTwo.push(change.eventId) })
    const applying = one.apply(observation())
    await waitFor('the first ledger to fire', () => firedByOne.length > 0, { timeoutMs: 5000 })
    assert.equal(await two.renotify({ olderThanMs: 0 }), 0, 'leased by the other ledger')
    release()
    await applying
    assert.deepEqual(firedByTwo, [])
    assert.lengthOf(firedByOne, 1)
    assert.lengthOf(await PayoutEvent.query().whereNull('notified_at'), 0)
  })
})
