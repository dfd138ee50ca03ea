import { test } from '@japa/runner'
import { Logger } from '@adonisjs/core/logger'
import { tableNames } from '../../src/database/schema.ts'
import { WebhookDelivery } from '../../src/models/main.ts'
import {
  InboxProcessor,
  type InboxApplier,
  type InboxProcessorOptions,
} from '../../src/webhooks/inbox_processor.ts'
import { InboxStore } from '../../src/webhooks/inbox_store.ts'
import { PermanentEventError } from '../../src/webhooks/event_mapper.ts'
import { recordStatements, setupDatabase, TEST_DB } from '../helpers/database.ts'
import { inboxDelivery as delivery } from '../helpers/inbox.ts'

/** A processor whose applier is the test's own `applyOne` (and `applyBatch`). */
function processorOf({
  applyOne,
  applyBatch,
  ...options
}: Omit<InboxProcessorOptions, 'applier'> & InboxApplier) {
  return new InboxProcessor({ ...options, applier: { applyOne, applyBatch } })
}

const logger = new Logger({ enabled: false })
/** A fresh inbox table, and a store on it (row by row when asked: a failed batch's path). */
async function freshInbox(
  cleanup: (fn: () => Promise<void>) => void,
  options: { rowByRow?: boolean } = {}
) {
  const { db, prefix } = await setupDatabase(cleanup, 'inbox')
  const table = tableNames(prefix).webhookDeliveries
  return { db, table, store: new InboxStore(db, table, undefined, options) }
}

test.group(`Webhooks | inbox (${TEST_DB})`, () => {
  test('a failing handler is retried with exponential backoff, then dead-lettered', async ({
    assert,
    cleanup,
  }) => {
    const { store } = await freshInbox(cleanup)
    await store.insert(delivery('d1'))
    let clock = Date.parse('2026-01-01T00:00:00Z')
    let calls = 0
    const processor = processorOf({
      store,
      logger,
      maxAttempts: 3,
      baseBackoffMs: 1000,
      now: () => new Date(clock),
      applyOne: async () => {
        calls++
        throw new Error('database is away')
      },
    })
    assert.equal(await processor.drain(), 1)
    let row = await WebhookDelivery.findByOrFail('deliveryId', 'd1')
    assert.deepEqual([row.state, row.attempts, row.lastError], ['failed', 1, 'database is away'])
    assert.equal(await processor.drain(), 0, 'not due before the backoff expires')
    clock += 1000
    assert.equal(await processor.drain(), 1)
    clock += 1999
    assert.equal(await processor.drain(), 0, 'second backoff is 2 s')
    clock += 1
    assert.equal(await processor.drain(), 1)
    row = await WebhookDelivery.findByOrFail('deliveryId', 'd1')
    assert.deepEqual([row.state, row.attempts], ['dead', 3])
    clock += 3600_000
    assert.equal(await processor.drain(), 0)
    assert.equal(calls, 3)
  })

  for (const path of ['in the claiming transaction', 'row by row with a lease'] as const) {
    test(`a body starting with a UTF-8 BOM is parsed and applied, its bytes kept (${path})`, async ({
      assert,
      cleanup,
    }) => {
      const { store } = await freshInbox(cleanup)
      const plain = delivery('bom')
      const raw = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), plain.rawBody])
      await store.insert({ ...plain, rawBody: raw })
      const seen: unknown[] = []
      const processor = processorOf({
        store,
        logger,
        applyOne: async (envelope) => void seen.push(envelope.data),
        applyBatch:
          path === 'row by row with a lease'
            ? undefined
            : async (_trx, items) => {
                seen.push(...items.map((item) => item.envelope.data))
                return {
                  verdicts: items.map(() => ({ state: 'processed' as const, note: null })),
                  notified: Promise.resolve(),
                }
              },
      })
      assert.equal(await processor.drain(), 1)
      assert.deepEqual(seen, [{ payoutId: 'bom' }])
      const row = await WebhookDelivery.findByOrFail('deliveryId', 'bom')
      assert.deepEqual([row.state, row.lastError], ['processed', null])
      assert.isTrue(row.body.equals(raw), 'stored as received')
    })
  }

  for (const rowByRow of [false, true]) {
    const mode = rowByRow ? 'row by row, with a lease' : 'in one statement'
    test(`a row left processing by a dead process is taken over when its lease expires (claims ${mode})`, async ({
      assert,
      cleanup,
    }) => {
      const { store } = await freshInbox(cleanup, { rowByRow })
      await store.insert(delivery('d2'))
      const t0 = new Date('2026-01-01T00:00:00Z')
      const claimed = await store.claimDue(t0, 10, 60_000)
      assert.lengthOf(claimed, 1)
      // The claimer "crashes": nothing marks the row. Another instance looks too early, then late.
      assert.lengthOf(await store.claimDue(new Date(t0.getTime() + 30_000), 10, 60_000), 0)
      const handled: string[] = []
      const processor = processorOf({
        store,
        logger,
        now: () => new Date(t0.getTime() + 61_000),
        applyOne: async (envelope) => void handled.push(envelope.type),
      })
      assert.equal(await processor.drain(), 1)
      assert.deepEqual(handled, ['payout.created'])
      assert.equal((await WebhookDelivery.findByOrFail('deliveryId', 'd2')).state, 'processed')
    })

    test(`two instances draining at once handle each row exactly once (claims ${mode})`, async ({
      assert,
      cleanup,
    }) => {
      const { db, table, store } = await freshInbox(cleanup, { rowByRow })
      for (let i = 0; i < 30; i++) {
        await store.insert(delivery(`d${i}`))
      }
      const seen: number[] = []
      const make = () =>
        processorOf({
          store: new InboxStore(db, table, undefined, { rowByRow }),
          logger,
          batchSize: 7,
          applyOne: async (_e, row) => void seen.push(row.id),
        })
      await Promise.all([make().drain(), make().drain()])
      assert.lengthOf(seen, 30)
      assert.lengthOf(new Set(seen), 30)
      const rows = await db.from(table).select('state', 'attempts')
      assert.isTrue(rows.every((row) => row.state === 'processed' && Number(row.attempts) === 1))
    })
  }
})

test.group(`Webhooks | inbox rows under a lease (${TEST_DB})`, () => {
  test('row by row, each row is marked processed in the transaction that applies it', async ({
    assert,
    cleanup,
  }) => {
    const { table, store } = await freshInbox(cleanup, { rowByRow: true })
    for (const id of ['a', 'b', 'c']) await store.insert(delivery(id))
    const seenBefore: Array<[string, string[]]> = []
    const processor = processorOf({
      store,
      logger,
      applyOne: async (_envelope, row, trx) => {
        const rows = await trx.from(table).select('delivery_id', 'state').orderBy('id')
        seenBefore.push([row.deliveryId, rows.map((r) => r.state)])
        if (row.deliveryId === 'b') return 'kept, not applied'
      },
    })
    assert.equal(await processor.drain(), 3)
    assert.deepEqual(seenBefore, [
      ['a', ['processed', 'processing', 'processing']],
      ['b', ['processed', 'processed', 'processing']],
      ['c', ['processed', 'processed', 'processed']],
    ])
    const rows = await WebhookDelivery.query().orderBy('id')
    assert.deepEqual(
      rows.map((row) => [row.state, row.lastError]),
      [
        ['processed', null],
        ['processed', 'kept, not applied'],
        ['processed', null],
      ]
    )
  })

  test('a claim whose lease expired and that another process took is left to it', async ({
    assert,
    cleanup,
  }) => {
    const { db, table, store } = await freshInbox(cleanup, { rowByRow: true })
    await store.insert(delivery('slow'))
    const t0 = new Date('2026-01-01T00:00:00Z')
    const [mine] = await store.claimDue(t0, 10, 15_000)
    const other = new InboxStore(db, table, undefined, { rowByRow: true })
    const [theirs] = await other.claimDue(new Date(t0.getTime() + 15_001), 10, 15_000)
    assert.equal(theirs.attempts, mine.attempts + 1)
    // The first process comes back: its renewal, its mark and its failure touch nothing.
    assert.equal(await store.renewLeases([mine], new Date(t0.getTime() + 60_000)), 0)
    let ran = false
    const work = async () => ((ran = true), { note: null, value: 'applied' })
    assert.isNull(await store.processClaimed(mine, t0, work))
    assert.isFalse(ran)
    await store.markFailed(mine.id, 'too late', new Date(t0.getTime() + 1000), mine)
    assert.equal((await WebhookDelivery.findByOrFail('deliveryId', 'slow')).state, 'processing')
    // The process that holds the claim renews it and applies the row.
    assert.equal(await other.renewLeases([theirs], new Date(t0.getTime() + 60_000)), 1)
    assert.deepEqual(await other.processClaimed(theirs, t0, work), { value: 'applied' })
    assert.equal((await WebhookDelivery.findByOrFail('deliveryId', 'slow')).state, 'processed')
  })

  test('the row-by-row lease is 15 s by default, not a minute', async ({ assert, cleanup }) => {
    const { store } = await freshInbox(cleanup, { rowByRow: true })
    await store.insert(delivery('d'))
    const leases: number[] = []
    const claimDue = store.claimDue.bind(store)
    store.claimDue = (now, limit, leaseMs) => (leases.push(leaseMs), claimDue(now, limit, leaseMs))
    await processorOf({ store, logger, applyOne: async () => {} }).drain()
    assert.deepEqual(leases, [15_000, 15_000])
  })
})

test.group(`Webhooks | inbox group commit (${TEST_DB})`, () => {
  /** Counts the INSERT statements the database receives. */
  function countInserts(db: Awaited<ReturnType<typeof setupDatabase>>['db'], table: string) {
    const statements = recordStatements(db)
    return {
      get inserts() {
        return statements.filter((sql) => /^insert/i.test(sql) && sql.includes(table)).length
      },
    }
  }

  for (const rowByRow of [false, true]) {
    const mode = rowByRow ? 'row by row' : 'in one statement'
    test(`deliveries arriving together are stored ${mode}, each told its own outcome`, async ({
      assert,
      cleanup,
    }) => {
      const { db, table, store } = await freshInbox(cleanup, { rowByRow })
      assert.equal(await store.insert(delivery('seen-before')), 'stored')
      const seen = countInserts(db, table)

      // 40 new ids, one id sent three times in the same burst, one already stored.
      const ids = [
        ...Array.from({ length: 40 }, (_, i) => `d${i}`),
        'twice',
        'twice',
        'twice',
        'seen-before',
      ]
      const outcomes = await Promise.all(ids.map((id) => store.insert(delivery(id))))

      assert.deepEqual(outcomes.slice(0, 40), Array(40).fill('stored'))
      assert.deepEqual(outcomes.slice(40), ['stored', 'duplicate', 'duplicate', 'duplicate'])
      const rows = await db.from(table).select('delivery_id', 'raw_body', 'state')
      assert.lengthOf(rows, 42)
      const twice = rows.find((row) => row.delivery_id === 'twice')
      assert.equal(
        Buffer.from(twice.raw_body, 'base64').toString(),
        delivery('twice').rawBody.toString()
      )
      assert.isTrue(rows.every((row) => row.state === 'pending'))
      if (rowByRow) assert.equal(seen.inserts, 44, 'one INSERT per delivery')
      // MySQL has no RETURNING: its INSERT of the burst is refused for the stored id first,
      // then the burst goes again without it.
      else assert.equal(seen.inserts, TEST_DB === 'mysql' ? 2 : 1, 'one INSERT for the burst')
    })
  }

  test('a burst of new deliveries is one statement, no transaction: one round trip of the acknowledgement', async ({
    assert,
    cleanup,
  }) => {
    // Every round trip of an acknowledgement waits for a turn of the event loop, which the
    // inline processing shares: on MySQL, a transaction with a read first made it five.
    const { db, table, store } = await freshInbox(cleanup)
    const statements = recordStatements(db)
    const outcomes = await Promise.all(
      Array.from({ length: 12 }, (_, i) => store.insert(delivery(`fresh-${i}`)))
    )
    assert.deepEqual(outcomes, Array(12).fill('stored'))
    assert.lengthOf(statements, 1, statements.join('\n'))
    assert.match(statements[0], new RegExp(`^insert into .?${table}`, 'i'))
    const [{ total }] = await db.from(table).count('* as total')
    assert.equal(Number(total), 12)
  })

  test('a burst larger than a batch is split into statements of 200', async ({
    assert,
    cleanup,
  }) => {
    const { db, table, store } = await freshInbox(cleanup)
    const seen = countInserts(db, table)
    const outcomes = await Promise.all(
      Array.from({ length: 450 }, (_, i) => store.insert(delivery(`burst-${i}`)))
    )
    assert.isTrue(outcomes.every((outcome) => outcome === 'stored'))
    assert.equal(seen.inserts, 3, '200 + 200 + 50')
    const [{ total }] = await db.from(table).count('* as total')
    assert.equal(Number(total), 450)
  })

  /** Three deliveries in one burst, the middle one refused by the database (NOT NULL). */
  async function burstWithARefusedRow(store: InboxStore) {
    const results = await Promise.allSettled([
      store.insert(delivery('a')),
      store.insert({ ...delivery('b'), eventType: null as unknown as string }),
      store.insert(delivery('c')),
    ])
    return results.map((result) => result.status)
  }

  test('when the statement fails, every delivery in it is rejected and none is half-stored', async ({
    assert,
    cleanup,
  }) => {
    const { db, table, store } = await freshInbox(cleanup)
    // The refused row sinks the statement it shares with the other two.
    assert.deepEqual(await burstWithARefusedRow(store), ['rejected', 'rejected', 'rejected'])
    const [{ total }] = await db.from(table).count('* as total')
    assert.equal(Number(total), 0)
    // Each is answered 503 and delivered again; the next burst is unaffected.
    assert.deepEqual(await Promise.all(['a', 'c'].map((id) => store.insert(delivery(id)))), [
      'stored',
      'stored',
    ])
  })

  test('row by row, a refused row fails alone', async ({ assert, cleanup }) => {
    const { db, table, store } = await freshInbox(cleanup, { rowByRow: true })
    assert.deepEqual(await burstWithARefusedRow(store), ['fulfilled', 'rejected', 'fulfilled'])
    const rows = await db.from(table).select('delivery_id').orderBy('id')
    assert.deepEqual(
      rows.map((row) => row.delivery_id),
      ['a', 'c']
    )
  })
})

test.group(`Webhooks | inbox batch processing (${TEST_DB})`, () => {
  test('a claimed batch is applied inside the claiming transaction; verdicts commit with it, hooks run after', async ({
    assert,
    cleanup,
  }) => {
    const { db, table, store } = await freshInbox(cleanup)
    await Promise.all(['a', 'b', 'c', 'd'].map((id) => store.insert(delivery(id))))
    await store.insert({ ...delivery('garbled'), rawBody: Buffer.from('not json') })
    const batches: string[][] = []
    const single: string[] = []
    let seenAfterCommit: Array<[string, string]> = []
    const processor = processorOf({
      store,
      logger,
      applyOne: async (_envelope, row) => void single.push(row.deliveryId),
      applyBatch: async (trx, items) => {
        batches.push(items.map((item) => item.row.deliveryId))
        // Work of the batch, in the same transaction as the claim.
        await trx.from(table).where('delivery_id', 'a').update({ signature_header: 'applied' })
        return {
          verdicts: items.map((item) =>
            item.row.deliveryId === 'c'
              ? { state: 'processed' as const, note: 'kept, not applied' }
              : item.row.deliveryId === 'd'
                ? { state: 'dead' as const, note: 'no payoutId' }
                : { state: 'processed' as const, note: null }
          ),
          // Registered on the transaction, as the ledger does; drain waits for it.
          notified: new Promise<void>((resolve) =>
            trx.after('commit', () => {
              resolve(
                (async () => {
                  await new Promise((wait) => setTimeout(wait, 20))
                  const rows = await db.from(table).select('delivery_id', 'state').orderBy('id')
                  seenAfterCommit = rows.map((row) => [row.delivery_id, row.state])
                })()
              )
            })
          ),
        }
      },
    })
    assert.equal(await processor.drain(), 5)
    assert.deepEqual(batches, [['a', 'b', 'c', 'd']], 'one call; the garbled row never reaches it')
    assert.deepEqual(single, [])
    const expected = [
      ['a', 'processed', null, 'applied'],
      ['b', 'processed', null, 't=1,v1=x'],
      ['c', 'processed', 'kept, not applied', 't=1,v1=x'],
      ['d', 'dead', 'no payoutId', 't=1,v1=x'],
      ['garbled', 'dead', 'unparsable event body', 't=1,v1=x'],
    ]
    const rows = await db
      .from(table)
      .select('delivery_id', 'state', 'last_error', 'signature_header', 'attempts')
      .orderBy('id')
    assert.deepEqual(
      rows.map((row) => [row.delivery_id, row.state, row.last_error, row.signature_header]),
      expected
    )
    assert.isTrue(rows.every((row) => Number(row.attempts) === 1))
    assert.deepEqual(
      seenAfterCommit,
      expected.map(([id, state]) => [id, state]),
      'drain returned once what was registered after the COMMIT had run'
    )
  })

  test('a batch that fails rolls back whole, then goes row by row: only the bad row is dead-lettered', async ({
    assert,
    cleanup,
  }) => {
    const { db, table, store } = await freshInbox(cleanup)
    await Promise.all(['a', 'b', 'c'].map((id) => store.insert(delivery(id))))
    await store.insert(delivery('bad', { nothing: true }))
    let batchCalls = 0
    const single: string[] = []
    const processor = processorOf({
      store,
      logger,
      applyOne: async (envelope, row) => {
        single.push(row.deliveryId)
        if (!(envelope.data as { payoutId?: string }).payoutId) {
          throw new PermanentEventError('no payoutId')
        }
      },
      applyBatch: async (trx, items) => {
        batchCalls++
        await trx.from(table).update({ signature_header: 'half done' })
        if (items.some((item) => !(item.envelope.data as { payoutId?: string }).payoutId)) {
          throw new Error('the database refused one row')
        }
        return { verdicts: [], afterCommit: async () => {} }
      },
    })
    assert.equal(await processor.drain(), 4)
    // The batch path is tried again after the fallback, and finds nothing left.
    assert.equal(batchCalls, 1)
    assert.deepEqual(single, ['a', 'b', 'c', 'bad'])
    const rows = await db
      .from(table)
      .select('delivery_id', 'state', 'signature_header')
      .orderBy('id')
    assert.deepEqual(
      rows.map((row) => [row.delivery_id, row.state, row.signature_header]),
      [
        ['a', 'processed', 't=1,v1=x'],
        ['b', 'processed', 't=1,v1=x'],
        ['c', 'processed', 't=1,v1=x'],
        ['bad', 'dead', 't=1,v1=x'],
      ]
    )
  })

  test('two instances processing in transactions at once handle each row exactly once', async ({
    assert,
    cleanup,
  }) => {
    const { db, table } = await freshInbox(cleanup)
    await Promise.all(
      Array.from({ length: 40 }, (_, i) => new InboxStore(db, table).insert(delivery(`d${i}`)))
    )
    const seen: string[] = []
    const make = () =>
      processorOf({
        store: new InboxStore(db, table),
        logger,
        batchSize: 7,
        applyOne: async () => {
          throw new Error('the batch path should have taken every row')
        },
        applyBatch: async (_trx, items) => {
          for (const item of items) seen.push(item.row.deliveryId)
          // Hold the transaction a moment, so the other instance runs into its rows.
          await new Promise((resolve) => setTimeout(resolve, 5))
          return {
            verdicts: items.map(() => ({ state: 'processed' as const, note: null })),
            notified: Promise.resolve(),
          }
        },
      })
    const [first, second] = await Promise.all([make().drain(), make().drain()])
    assert.equal(first + second, 40)
    assert.lengthOf(seen, 40)
    assert.lengthOf(new Set(seen), 40)
    const rows = await db.from(table).select('state', 'attempts')
    assert.isTrue(rows.every((row) => row.state === 'processed' && Number(row.attempts) === 1))
  })

  test('a claim in a transaction takes at most its limit, in id order', async ({
    assert,
    cleanup,
  }) => {
    // PostgreSQL may plan the claim as a nested loop that runs its subquery once per row it
    // updates: each run would then pick `limit` more rows (see `claimReturning`).
    const { store } = await freshInbox(cleanup)
    await Promise.all(['a', 'b', 'c', 'd', 'e'].map((id) => store.insert(delivery(id))))
    const batches: string[][] = []
    for (;;) {
      const claimed = await store.processDueInTransaction(new Date(), 2, async (_trx, rows) =>
        rows.map(() => ({ state: 'processed' as const, note: null }))
      )
      if (!claimed) break
      batches.push(claimed.rows.map((row) => row.deliveryId))
    }
    assert.deepEqual(batches, [['a', 'b'], ['c', 'd'], ['e']])
  })
})

test.group(`Webhooks | inline drains go in slices (${TEST_DB})`, () => {
  /** Holds the event loop for `ms`, as better-sqlite3's synchronous statements do. */
  const hold = (ms: number) => {
    const until = performance.now() + ms
    while (performance.now() < until);
  }

  /**
   * A processor whose batches cost 1 ms per row of work that holds the event loop, and the
   * sizes of the batches it was given.
   */
  function slowProcessor(store: InboxStore, options: Partial<InboxProcessorOptions> = {}) {
    const sizes: number[] = []
    let applied = 0
    const processor = processorOf({
      store,
      logger,
      ...options,
      applyOne: async () => {
        hold(1)
        applied++
      },
      applyBatch: async (_trx, items) => {
        sizes.push(items.length)
        hold(items.length)
        applied += items.length
        return { verdicts: items.map(() => ({ state: 'processed' as const, note: null })) }
      },
    })
    return { processor, sizes, applied: () => applied }
  }

  test('a kicked drain takes slices of about sliceMs and yields between them: a delivery stored meanwhile waits for one slice, not for the backlog', async ({
    assert,
    cleanup,
  }) => {
    const { store } = await freshInbox(cleanup)
    for (let i = 0; i < 60; i++) await store.insert(delivery(`backlog-${i}`))
    const { processor, sizes, applied } = slowProcessor(store, { sliceMs: 5 })

    processor.kick()
    // An acknowledgement arriving while the backlog drains (the route announces it): its
    // insert is what it waits for.
    const answered = processor.acknowledging()
    const appliedWhenAcked = await store.insert(delivery('arrived-meanwhile')).then(() => applied())
    answered()
    await processor.idle()

    assert.isAtMost(appliedWhenAcked, 16, `stored after ${appliedWhenAcked} rows were applied`)
    assert.equal(applied(), 61, 'the backlog and the new delivery, each once')
    assert.equal(sizes[0], 8, 'the first slice, before its pace is known')
    assert.isAtMost(sizes[1], 10, `the slice after an arrival fits sliceMs: ${sizes.join(',')}`)
    assert.isAbove(sizes.length, 3)
  })

  /**
   * A processor whose slices cost 6 ms of their own plus 1 ms per row, holding the event
   * loop (SQLite: a slice's claim and commit), while `arrivals` acknowledgements begin during
   * each one; the sizes of its slices.
   */
  function costlySlices(store: InboxStore, arrivals: number) {
    const sizes: number[] = []
    const processor: InboxProcessor = processorOf({
      store,
      logger,
      sliceMs: 5,
      applyOne: async () => {},
      applyBatch: async (_trx, items) => {
        sizes.push(items.length)
        hold(6 + items.length)
        for (let i = 0; i < arrivals; i++) processor.acknowledging()()
        return { verdicts: items.map(() => ({ state: 'processed' as const, note: null })) }
      },
    })
    return { processor, sizes }
  }

  test('slices keep up with the acknowledgements arriving: each takes a quarter more rows than arrived during the last, whatever sliceMs fits', async ({
    assert,
    cleanup,
  }) => {
    const { store } = await freshInbox(cleanup)
    for (let i = 0; i < 80; i++) await store.insert(delivery(`arriving-${i}`))
    const { processor, sizes } = costlySlices(store, 8)
    processor.kick()
    await processor.idle()
    // Sized to 5 ms alone, a slice of 14 ms for 8 rows says 2 rows, then 1: fewer rows
    // than arrive, and the backlog grows without end.
    assert.equal(sizes[0], 8)
    const behind = sizes.slice(1, -1)
    assert.isNotEmpty(behind, `slices ${sizes.join(',')}`)
    for (const size of behind) assert.isAtLeast(size, 10, `slices ${sizes.join(',')}`)
    assert.equal(
      sizes.reduce((a, b) => a + b, 0),
      80
    )
  })

  test('with no acknowledgement arriving, a backlog drains in slices of up to four times sliceMs', async ({
    assert,
    cleanup,
  }) => {
    const { store } = await freshInbox(cleanup)
    for (let i = 0; i < 80; i++) await store.insert(delivery(`quiet-${i}`))
    const { processor, sizes } = costlySlices(store, 0)
    processor.kick()
    await processor.idle()
    // 8 rows in about 14 ms: 20 ms hold about 11 (sliceMs alone: 2, then 1 row a slice).
    assert.equal(sizes[0], 8)
    assert.isAtLeast(sizes[1], 6, `slices ${sizes.join(',')}`)
    assert.isAtMost(sizes.length, 12, `slices ${sizes.join(',')}`)
  })

  test('no slice starts while an acknowledgement is in flight, and one starts anyway after four times sliceMs', async ({
    assert,
    cleanup,
  }) => {
    const { store } = await freshInbox(cleanup)
    for (let i = 0; i < 5; i++) await store.insert(delivery(`waiting-${i}`))
    const { processor, sizes } = slowProcessor(store, { sliceMs: 50 })

    const answered = processor.acknowledging()
    const other = processor.acknowledging()
    processor.kick()
    await new Promise((resolve) => setTimeout(resolve, 60))
    assert.deepEqual(sizes, [], 'two acknowledgements in flight')
    answered()
    answered()
    await new Promise((resolve) => setTimeout(resolve, 30))
    assert.deepEqual(sizes, [], 'one still in flight (an end called twice counts once)')
    other()
    await processor.idle()
    assert.deepEqual(sizes, [5], 'all answered: the slice ran')

    // An acknowledgement that never ends (a stalled request) holds processing back 200 ms.
    for (let i = 0; i < 3; i++) await store.insert(delivery(`stalled-${i}`))
    processor.acknowledging()
    const kickedAt = performance.now()
    processor.kick()
    await processor.idle()
    assert.deepEqual(sizes, [5, 3])
    assert.isAtLeast(performance.now() - kickedAt, 190)
  })

  test('sliceMs 0 drains whole batches (and so does the worker, which acknowledges nothing)', async ({
    assert,
    cleanup,
  }) => {
    const { store } = await freshInbox(cleanup)
    for (let i = 0; i < 30; i++) await store.insert(delivery(`backlog-${i}`))
    const whole = slowProcessor(store, { sliceMs: 0, batchSize: 20 })
    whole.processor.kick()
    await whole.processor.idle()
    assert.deepEqual(whole.sizes, [20, 10])

    for (let i = 0; i < 30; i++) await store.insert(delivery(`worker-${i}`))
    const worker = slowProcessor(store, { batchSize: 20 })
    assert.equal(await worker.processor.drain({ maxBatches: 1 }), 20)
    assert.equal(await worker.processor.drain(), 10)
    assert.deepEqual(worker.sizes, [20, 10])
  })

  test('a slice grows back when the work gets fast again, up to batchSize', async ({
    assert,
    cleanup,
  }) => {
    const { store } = await freshInbox(cleanup)
    for (let i = 0; i < 400; i++) await store.insert(delivery(`fast-${i}`))
    const sizes: number[] = []
    const processor = processorOf({
      store,
      logger,
      // Far longer than these batches take, even on a loaded machine.
      sliceMs: 250,
      batchSize: 100,
      applyOne: async () => {},
      applyBatch: async (_trx, items) => {
        sizes.push(items.length)
        return { verdicts: items.map(() => ({ state: 'processed' as const, note: null })) }
      },
    })
    processor.kick()
    await processor.idle()
    assert.equal(sizes[0], 8)
    assert.deepEqual(sizes.slice(1, 4), [16, 32, 64], 'at most twice the last slice each time')
    assert.include(sizes, 100, `slices ${sizes.join(',')}`)
    assert.equal(
      sizes.reduce((a, b) => a + b, 0),
      400
    )
  })

  test("a batch's time is counted from its claim: a wait for the database before it does not shrink the next", async ({
    assert,
    cleanup,
  }) => {
    const { db, table, store } = await freshInbox(cleanup)
    for (let i = 0; i < 30; i++) await store.insert(delivery(`held-${i}`))
    const { processor, sizes } = slowProcessor(store, { batchSize: 20 })
    // The worker's batches on SQLite: sized to a budget from the last batch's pace.
    processor.budgetBatches(50)
    // The database held for 300 ms: SQLite's one connection in an open transaction (as the
    // web process's insert holds it), the inbox table locked elsewhere.
    const trx = await db.transaction()
    if (TEST_DB === 'pg') await trx.rawQuery(`LOCK TABLE "${table}" IN ACCESS EXCLUSIVE MODE`)
    if (TEST_DB === 'mysql') await trx.rawQuery(`LOCK TABLES \`${table}\` WRITE`)
    const released = new Promise<void>((resolve) =>
      setTimeout(async () => {
        if (TEST_DB === 'mysql') await trx.rawQuery('UNLOCK TABLES')
        await trx.commit()
        resolve()
      }, 300)
    )
    const startedAt = performance.now()
    assert.equal(await processor.drain({ maxBatches: 1 }), 20)
    assert.isAbove(performance.now() - startedAt, 290, 'the batch waited for the database')
    await released
    assert.isBelow(processor.lastBatchMs, 200, 'the wait is not the batch hold')
    // The worker's handover follows the span: a writer in the busy handler waited as long.
    assert.isAbove(processor.lastBatchSpanMs, 290, "the batch's span, its wait included")
    // 20 rows at 1 ms each fit the 50 ms budget: the next batch takes the other 10, not the
    // 3 that a hold of 300 ms would have left it.
    assert.equal(await processor.drain({ maxBatches: 1 }), 10)
    assert.deepEqual(sizes, [20, 10])
  })
})
