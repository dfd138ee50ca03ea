import { test } from '@japa/runner'
import { randomUUID } from 'node:crypto'
import type { Database } from '@adonisjs/lucid/database'
import { PayoutApplier } from '../../src/ledger/payout_applier.ts'
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
  const applier = new PayoutApplier({}, lease)
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
    const one = processOn(watched, 'one', 30_000, () => released)
    batch = await db.transaction((trx) => one.applier.applyBatchInTransaction(trx, [observation()]))
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
  })
})
