import { test } from '@japa/runner'
import { DateTime } from 'luxon'
import { PayoutsValidationError } from '../../src/client/main.ts'
import { E_PAYOUTS_IDEMPOTENCY_KEY_REUSED } from '../../src/errors.ts'
import {
  PayoutExecutor,
  type BatchOptions,
  type ExecutedBatch,
} from '../../src/ledger/payout_executor.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { Pruner } from '../../src/ledger/pruning.ts'
import { tableNames } from '../../src/database/schema.ts'
import type { PayoutChange } from '../../src/ledger/vocabulary.ts'
import { ExecutionIntent, Payout } from '../../src/models/main.ts'
import { IntentsDesk } from '../../src/service/intents_desk.ts'
import { executeBodies, startEmulator, testClient } from '../emulator/helpers.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'
import { startRecordingProxy } from '../helpers/recording_proxy.ts'
import { startCrashChild } from './fixtures/crash_parent.ts'

const BATCH = '/rfq/execute-batch'

/** A well-formed recipient id the service does not know: it refuses the row. */
const unknownRecipient = (index: number) =>
  `00000000-0000-4000-8000-${String(index).padStart(12, '0')}`

/**
 * An executor on the suite's database, sending to the emulator through a recording proxy
 * (what went over the wire, with its Idempotency-Key; answers it can lose), and the created
 * changes the ledger told.
 */
async function setup(
  cleanup: (fn: () => Promise<void>) => void,
  clientOptions: Record<string, unknown> = {}
) {
  const { db, prefix } = await setupDatabase(cleanup, 'batch')
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const proxy = await startRecordingProxy(cleanup, emu.baseUrl)
  const client = testClient(cleanup, { apiKey: emu.apiKey, baseUrl: proxy.baseUrl }, clientOptions)
  const changes: PayoutChange[] = []
  const ledger = new PayoutLedger(db, { onChange: (change) => void changes.push(change) })
  const executor = new PayoutExecutor({ db, ledger, client })
  const { fiat } = executeBodies(emu)
  /** `n` fiat rows of distinct amounts; `refused` of them name a recipient the service lacks. */
  const rows = (n: number, refused: number[] = []) =>
    Array.from({ length: n }, (_, index) => ({
      ...fiat,
      amount: 100 + index,
      reference: `row-${index}`,
      ...(refused.includes(index) ? { recipientId: unknownRecipient(index) } : {}),
    }))
  const sent = () => proxy.requests.filter((r) => r.method === 'POST' && r.path === BATCH)
  return { db, prefix, emu, proxy, client, ledger, executor, changes, rows, sent }
}

/** The payouts:created changes the ledger told, per payout: each must be 1. */
function createdPerPayout(changes: PayoutChange[]) {
  const counts = new Map<string, number>()
  for (const change of changes.filter((c) => c.created)) {
    counts.set(change.payout.payoutUuid, (counts.get(change.payout.payoutUuid) ?? 0) + 1)
  }
  return counts
}

function outcomesOf(batch: ExecutedBatch) {
  return batch.rows.map((row) => row.outcome)
}

test.group(`Ledger | executeBatch (${TEST_DB})`, () => {
  test('250 rows go in 3 requests under derived keys: 250 ledger rows, 250 created, once each', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, changes, rows, sent } = await setup(cleanup)
    const batch = await executor.executeBatch(rows(250), {
      idempotencyKey: 'payroll-2026-05',
      ownerId: 'tenant-1',
    })
    assert.deepEqual(
      sent().map((r) => r.idempotencyKey),
      ['payroll-2026-05-c0', 'payroll-2026-05-c1', 'payroll-2026-05-c2']
    )
    assert.equal(batch.counts.created, 250)
    assert.isTrue(batch.complete)
    assert.deepEqual(
      batch.rows.map((row) => row.index),
      Array.from({ length: 250 }, (_, i) => i)
    )
    const atService = emu.admin.payouts()
    assert.lengthOf(atService, 250)
    assert.lengthOf(await Payout.all(), 250)
    const created = createdPerPayout(changes)
    assert.equal(created.size, 250)
    assert.deepEqual([...new Set(created.values())], [1])
    // Each row is the payout of its own row at the service, with the ledger's row.
    const byId = new Map(atService.map((p) => [p.payoutId, p]))
    for (const row of batch.rows) {
      assert.equal(row.outcome, 'created')
      if (row.outcome !== 'created') continue
      const remote = byId.get(row.result.payoutId)!
      assert.equal(remote.sourceAmount, 100 + row.index)
      assert.equal(remote.batchKey, `payroll-2026-05-c${row.chunk}`)
      assert.equal(row.payout.payoutUuid, row.result.payoutId)
      assert.equal(row.payout.ownerId, 'tenant-1')
      assert.equal(row.payout.reference, `row-${row.index}`)
    }
    const intents = await ExecutionIntent.query().orderBy('id')
    assert.deepEqual(
      intents.map((i) => [i.flow, i.state, i.attempts]),
      [
        ['batch', 'succeeded', 1],
        ['batch', 'succeeded', 1],
        ['batch', 'succeeded', 1],
      ]
    )

    // The same key and rows again: answered from the ledger, without a request.
    const again = await executor.executeBatch(rows(250), {
      idempotencyKey: 'payroll-2026-05',
      ownerId: 'tenant-1',
    })
    assert.lengthOf(sent(), 3)
    assert.deepEqual(
      again.rows.map((row) => (row.outcome === 'created' ? row.result.payoutId : row.outcome)),
      batch.rows.map((row) => (row.outcome === 'created' ? row.result.payoutId : row.outcome))
    )
    assert.lengthOf(emu.admin.payouts(), 250)
    assert.equal(createdPerPayout(changes).size, 250)

    // And the ledger finds it by its key alone.
    const found = await executor.findBatch('payroll-2026-05')
    assert.equal(found?.counts.created, 250)
    assert.isNull(await executor.findBatch('payroll-2026-0'))
  }).timeout(60_000)

  test('a chunk whose answer is lost: recovery sends it again under its key, nothing twice', async ({
    assert,
    cleanup,
  }) => {
    const { emu, proxy, executor, changes, rows, sent } = await setup(cleanup, {
      retry: { maxRetries: 0 },
    })
    // The service makes the second chunk's payouts; its answer never reaches the client.
    proxy.loseNext(1, 1)
    const batch = await executor.executeBatch(rows(250), { idempotencyKey: 'friday-lost-1' })
    assert.deepEqual(batch.counts, {
      created: 100,
      unknown: 100,
      not_sent: 50,
      refused: 0,
      failed: 0,
      needs_attention: 0,
    })
    assert.isFalse(batch.complete)
    assert.lengthOf(emu.admin.payouts(), 200, 'the lost chunk was made at the service')
    assert.lengthOf(await Payout.all(), 100)
    assert.deepEqual(
      (await ExecutionIntent.query().orderBy('id')).map((i) => i.state),
      ['succeeded', 'unknown', 'refused']
    )

    // Recovery sends the unknown chunk again under its key: the service answers the same
    // payouts. The refused chunk was never sent: recovery leaves it.
    const summary = await executor.recover({ olderThanMs: 0 })
    assert.deepInclude(summary, { resent: 1, succeeded: 1 })
    assert.deepEqual(
      sent().map((r) => r.idempotencyKey),
      ['friday-lost-1-c0', 'friday-lost-1-c1', 'friday-lost-1-c1']
    )
    assert.lengthOf(emu.admin.payouts(), 200)
    assert.lengthOf(await Payout.all(), 200)

    // The same key and rows again: the last chunk only.
    const resumed = await executor.executeBatch(rows(250), { idempotencyKey: 'friday-lost-1' })
    assert.deepEqual(
      sent().map((r) => r.idempotencyKey),
      ['friday-lost-1-c0', 'friday-lost-1-c1', 'friday-lost-1-c1', 'friday-lost-1-c2']
    )
    assert.isTrue(resumed.complete)
    assert.equal(resumed.counts.created, 250)
    assert.lengthOf(emu.admin.payouts(), 250)
    assert.lengthOf(await Payout.all(), 250)
    const created = createdPerPayout(changes)
    assert.equal(created.size, 250)
    assert.deepEqual([...new Set(created.values())], [1], 'each payouts:created fired once')
  }).timeout(60_000)

  test('a chunk whose answer is lost: the same key and rows again finish it, nothing twice', async ({
    assert,
    cleanup,
  }) => {
    const { emu, proxy, executor, changes, rows, sent } = await setup(cleanup, {
      retry: { maxRetries: 0 },
    })
    proxy.loseNext(1)
    const first = await executor.executeBatch(rows(250), { idempotencyKey: 'friday-lost-2' })
    assert.deepEqual(outcomesOf(first).slice(99, 101), ['unknown', 'not_sent'])
    assert.lengthOf(emu.admin.payouts(), 100)
    // What an operator sees (`payouts:intents`): the chunk, never its key.
    const [view] = await new IntentsDesk(executor).list(['unknown'], 10)
    assert.deepInclude(view, { state: 'unknown', flow: 'batch', retryable: true })
    assert.deepEqual(view.batch, { chunk: 0, chunks: 3, rows: 100 })
    assert.notInclude(JSON.stringify(view), 'friday-lost-2')
    const again = await executor.executeBatch(rows(250), { idempotencyKey: 'friday-lost-2' })
    assert.isTrue(again.complete)
    assert.deepEqual(
      sent().map((r) => r.idempotencyKey),
      ['friday-lost-2-c0', 'friday-lost-2-c0', 'friday-lost-2-c1', 'friday-lost-2-c2']
    )
    assert.lengthOf(emu.admin.payouts(), 250)
    assert.lengthOf(await Payout.all(), 250)
    assert.deepEqual([...new Set(createdPerPayout(changes).values())], [1])
    assert.equal(createdPerPayout(changes).size, 250)
  }).timeout(60_000)

  test("an operator's --retry sends a chunk again under its key", async ({ assert, cleanup }) => {
    const { emu, proxy, executor, rows, sent } = await setup(cleanup, {
      retry: { maxRetries: 0 },
    })
    proxy.loseNext(1)
    await executor.executeBatch(rows(150), { idempotencyKey: 'operator-batch' })
    const desk = new IntentsDesk(executor)
    const [lost] = await desk.list(['unknown'], 10)
    const retried = await desk.retry(lost.id)
    assert.deepInclude(retried, { state: 'succeeded', attempts: 2 })
    assert.deepEqual(
      sent().map((r) => r.idempotencyKey),
      ['operator-batch-c0', 'operator-batch-c0']
    )
    assert.lengthOf(emu.admin.payouts(), 100)
    // The stopped chunk is refused, final: only the same key and rows again send it.
    const [stopped] = await desk.list(['refused'], 10)
    assert.deepInclude(stopped, {
      retryable: false,
      note: 'not sent: the batch stopped at chunk 0 (NETWORK_ERROR)',
    })
    const batch = await executor.executeBatch(rows(150), { idempotencyKey: 'operator-batch' })
    assert.isTrue(batch.complete)
    assert.lengthOf(emu.admin.payouts(), 150)
    assert.lengthOf(await Payout.all(), 150)
  }).timeout(60_000)

  test('5 % of the rows refused by the service: reported with its code, never sent again', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, changes, rows, sent } = await setup(cleanup)
    const refusedRows = Array.from({ length: 10 }, (_, i) => i * 20 + 3)
    const batch = await executor.executeBatch(rows(200, refusedRows), {
      idempotencyKey: 'sellers-refused',
    })
    assert.deepEqual([batch.counts.created, batch.counts.refused], [190, 10])
    assert.isTrue(batch.complete, 'a refusal is final')
    for (const row of batch.rows) {
      if (!refusedRows.includes(row.index)) {
        assert.equal(row.outcome, 'created')
        continue
      }
      assert.deepInclude(row, { outcome: 'refused', code: 'INVALID_PARAMETER' })
      assert.match((row as { message: string }).message, /recipientId/)
    }
    assert.lengthOf(emu.admin.payouts(), 190)
    assert.lengthOf(await Payout.all(), 190)
    assert.equal(createdPerPayout(changes).size, 190)
    assert.lengthOf(sent(), 2)

    // Neither recovery nor the same call again sends a refused row.
    assert.deepInclude(await executor.recover({ olderThanMs: 0 }), { resent: 0 })
    const again = await executor.executeBatch(rows(200, refusedRows), {
      idempotencyKey: 'sellers-refused',
    })
    assert.deepEqual([again.counts.created, again.counts.refused], [190, 10])
    assert.lengthOf(sent(), 2)
    assert.lengthOf(emu.admin.batches(), 2)
  }).timeout(60_000)

  test('the same key with other rows, owner or chunk size is refused, and nothing is sent', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, rows, sent } = await setup(cleanup)
    await executor.executeBatch(rows(250), { idempotencyKey: 'reused-batch-key', ownerId: 'u1' })
    assert.lengthOf(sent(), 3)
    const other = rows(250)
    other[240].amount = 999
    const attempts: Array<[unknown[], Record<string, unknown>]> = [
      [other, { ownerId: 'u1' }],
      [rows(150), { ownerId: 'u1' }],
      [rows(251), { ownerId: 'u1' }],
      [rows(250), { ownerId: 'u2' }],
      [rows(250), { ownerId: 'u1', chunkSize: 50 }],
    ]
    for (const [batchRows, options] of attempts) {
      const error = await executor
        .executeBatch(batchRows as any, { idempotencyKey: 'reused-batch-key', ...options })
        .catch((e) => e)
      assert.instanceOf(error, E_PAYOUTS_IDEMPOTENCY_KEY_REUSED)
      assert.equal(error.code, 'E_PAYOUTS_IDEMPOTENCY_KEY_REUSED')
    }
    assert.lengthOf(sent(), 3, 'nothing sent')
    assert.lengthOf(emu.admin.payouts(), 250)
    assert.lengthOf(await ExecutionIntent.all(), 3, 'no intent written')
  }).timeout(60_000)

  test('bad input is refused before anything is written, the bad row named', async ({
    assert,
    cleanup,
  }) => {
    const { executor, rows, sent } = await setup(cleanup)
    const bad = rows(5)
    ;(bad[3] as any).amount = -2
    const missing = rows(5)
    delete (missing[1] as any).recipientId
    const cases: Array<[unknown, Record<string, unknown>, string]> = [
      [[], {}, 'rows'],
      ['rows', {}, 'rows'],
      [Array.from({ length: 10_001 }, () => rows(1)[0]), {}, 'rows'],
      [bad, {}, 'rows.3.amount'],
      [missing, {}, 'rows.1.recipientId'],
      [[...rows(2), null], {}, 'rows.2'],
      [rows(2), { chunkSize: 0 }, 'chunkSize'],
      [rows(2), { chunkSize: 101 }, 'chunkSize'],
      [rows(2), { idempotencyKey: 'short' }, 'idempotencyKey'],
      [rows(2), { idempotencyKey: 'k'.repeat(241) }, 'idempotencyKey'],
    ]
    for (const [input, options, field] of cases) {
      const error = await executor.executeBatch(input as any, options).catch((e) => e)
      assert.instanceOf(error, PayoutsValidationError, field)
      assert.equal(error.field, field)
    }
    assert.lengthOf(sent(), 0)
    assert.lengthOf(await ExecutionIntent.all(), 0)
  }).timeout(60_000)

  test('past the replay window a chunk whose answer was lost is flagged, never sent again', async ({
    assert,
    cleanup,
  }) => {
    const { db, ledger, client, emu, proxy, executor, rows, sent } = await setup(cleanup, {
      retry: { maxRetries: 0 },
    })
    proxy.loseNext(1)
    await executor.executeBatch(rows(120), { idempotencyKey: 'late-batch-key' })
    assert.lengthOf(sent(), 1)
    const late = new PayoutExecutor({
      db,
      ledger,
      client,
      now: () => DateTime.now().plus({ hours: 23, minutes: 30 }),
    })
    const batch = await late.executeBatch(rows(120), { idempotencyKey: 'late-batch-key' })
    assert.deepEqual(
      [batch.counts.needs_attention, batch.counts.created],
      [100, 20],
      'the chunk never sent goes; the one that may have been made waits for a human'
    )
    assert.deepEqual(
      sent().map((r) => r.idempotencyKey),
      ['late-batch-key-c0', 'late-batch-key-c1']
    )
    assert.lengthOf(emu.admin.payouts(), 120)
    assert.equal(
      (await ExecutionIntent.findByOrFail('idempotencyKey', 'late-batch-key-c0')).state,
      'needs_attention'
    )
  }).timeout(60_000)

  test('an aborted batch stops before its next chunk; the same key and rows again send the rest', async ({
    assert,
    cleanup,
  }) => {
    const { emu, client, executor, rows, sent, changes } = await setup(cleanup)
    const controller = new AbortController()
    // Ctrl-C while the first chunk is on its way: that one finishes.
    client.on('request', () => controller.abort())
    const batch = await executor.executeBatch(rows(250), {
      idempotencyKey: 'aborted-batch',
      signal: controller.signal,
    })
    assert.lengthOf(sent(), 1)
    assert.deepEqual([batch.counts.created, batch.counts.not_sent], [100, 150])
    assert.deepInclude(batch.rows[100], { outcome: 'not_sent', code: 'ABORTED' })
    assert.deepInclude(await executor.recover({ olderThanMs: 0 }), { resent: 0 })
    const resumed = await executor.executeBatch(rows(250), { idempotencyKey: 'aborted-batch' })
    assert.isTrue(resumed.complete)
    assert.lengthOf(emu.admin.payouts(), 250)
    assert.equal(createdPerPayout(changes).size, 250)
  }).timeout(60_000)

  test('onChunk is told after each chunk, sent, answered from the ledger or not sent', async ({
    assert,
    cleanup,
  }) => {
    const { client, executor, rows, sent } = await setup(cleanup)
    type Told = Parameters<NonNullable<BatchOptions['onChunk']>>[0]
    const told: Told[] = []
    const onChunk = (progress: Told) => void told.push(progress)
    const controller = new AbortController()
    // Aborted while chunk 1 is on its way: chunk 2 is not sent, and told so.
    let requests = 0
    client.on('request', () => ++requests === 2 && controller.abort())
    const input = rows(250, [7])
    const key = 'progress-batch'
    await executor.executeBatch(input, { idempotencyKey: key, onChunk, signal: controller.signal })
    const summary = (list: Told[]) =>
      list.map(({ chunk, chunks, rows: all, done, counts }) => ({
        chunk,
        chunks,
        all,
        done,
        created: counts.created,
        refused: counts.refused,
        notSent: counts.not_sent,
      }))
    assert.deepEqual(summary(told), [
      { chunk: 0, chunks: 3, all: 250, done: 100, created: 99, refused: 1, notSent: 0 },
      { chunk: 1, chunks: 3, all: 250, done: 200, created: 199, refused: 1, notSent: 0 },
      { chunk: 2, chunks: 3, all: 250, done: 250, created: 199, refused: 1, notSent: 50 },
    ])
    assert.isTrue(told.every((progress) => progress.elapsedMs >= 0))

    // Again: two chunks answered from the ledger, the last one sent; a throwing callback is
    // ignored, and the batch still finishes.
    const again: Told[] = []
    const resumed = await executor.executeBatch(input, {
      idempotencyKey: key,
      onChunk: (progress) => {
        again.push(progress)
        throw new Error('a broken progress bar')
      },
    })
    assert.isTrue(resumed.complete)
    assert.deepEqual(
      summary(again).map(({ done, created, notSent }) => [done, created, notSent]),
      [
        [100, 99, 0],
        [200, 199, 0],
        [250, 249, 0],
      ]
    )
    assert.lengthOf(sent(), 3)
    await assert.rejects(() => executor.executeBatch(input, { onChunk: 'yes' as never }), /onChunk/)
  }).timeout(60_000)

  test('crash: a process killed after committing the intents is recovered, nothing twice', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, prefix, rows, changes } = await setup(cleanup)
    // The service holds the first chunk long enough for the parent to kill the child.
    emu.admin.setFaults({ processingDelayMs: 800 })
    const { child, exited, output } = startCrashChild({
      connection: 'batch',
      prefix,
      emu,
      work: { CRASH_ROWS: JSON.stringify(rows(250)) },
    })
    // Killed once every chunk's intent is committed and the first request is held.
    const started = Date.now()
    while ((await ExecutionIntent.all()).length < 3 || emu.state.idempotency.size === 0) {
      if (Date.now() - started > 20_000) throw new Error(`child never sent: ${output()}`)
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    child.kill('SIGKILL')
    assert.equal(await exited, 'SIGKILL')
    assert.notInclude(output(), 'finished')
    assert.deepEqual(
      (await ExecutionIntent.query().orderBy('id')).map((i) => [i.state, i.attempts]),
      [
        ['pending', 1],
        ['pending', 0],
        ['pending', 0],
      ],
      'a killed process leaves the chunks pending, the first one with its attempt'
    )
    assert.lengthOf(await Payout.all(), 0)
    await new Promise((resolve) => setTimeout(resolve, 900))
    emu.admin.setFaults({})
    const summary = await executor.recover({ olderThanMs: 0 })
    assert.deepInclude(summary, { resent: 3, succeeded: 3 })
    assert.lengthOf(emu.admin.payouts(), 250)
    assert.lengthOf(emu.admin.batches(), 3, 'the held chunk was made once, and answered again')
    const local = await Payout.all()
    assert.lengthOf(local, 250)
    assert.deepEqual([...new Set(local.map((p) => p.ownerId))], ['tenant-crash'])
    assert.deepEqual([...new Set(createdPerPayout(changes).values())], [1])
    const found = await executor.findBatch('crash-batch-key')
    assert.isTrue(found?.complete)
  }).timeout(60_000)
})

test.group(`Ledger | executeBatch beside another caller (${TEST_DB})`, () => {
  const waitFor = async (done: () => boolean) => {
    while (!done()) await new Promise((resolve) => setTimeout(resolve, 5))
  }

  test('a chunk another caller refused as not sent is not sent by a stale copy; a chunk being sent is never refused', async ({
    assert,
    cleanup,
  }) => {
    const { db, client, emu, executor, rows, sent } = await setup(cleanup, {
      retry: { maxRetries: 0 },
    })
    const other = new PayoutExecutor({ db, ledger: new PayoutLedger(db), client })
    emu.admin.setFaults({ processingDelayMs: 400 })
    const first = executor.executeBatch(rows(200), { idempotencyKey: 'stale-batch-key' })
    await waitFor(() => sent().length >= 1)
    // A second process, same key and rows: its chunk 0 meets the first's in flight (409),
    // it stops and refuses chunk 1, which the first has not counted yet.
    const second = await other.executeBatch(rows(200), { idempotencyKey: 'stale-batch-key' })
    assert.equal(second.counts.not_sent, 100)
    const done = await first
    emu.admin.setFaults({})
    const chunk1 = await ExecutionIntent.findByOrFail('idempotencyKey', 'stale-batch-key-c1')
    assert.deepEqual(
      [chunk1.state, chunk1.attempts],
      ['refused', 0],
      'refused before any attempt: and so never sent'
    )
    assert.lengthOf(
      sent().filter((request) => request.idempotencyKey === 'stale-batch-key-c1'),
      0,
      'the first process did not send what the second refused'
    )
    assert.equal(done.counts.created, 100)
    assert.lengthOf(emu.admin.payouts(), 100)
  }).timeout(60_000)

  test('a process that dies after its chunk was answered: the same key and rows past the window pay nothing twice', async ({
    assert,
    cleanup,
  }) => {
    const { db, ledger, client, emu, rows, sent } = await setup(cleanup, {
      retry: { maxRetries: 0 },
    })
    // The first process never comes back once the service answered its chunk 1.
    const dying = {
      execute: client.execute.bind(client),
      executeBatch: async (...args: Parameters<typeof client.executeBatch>) => {
        const answer = await client.executeBatch(...args)
        if (args[1]?.idempotencyKey?.endsWith('-c1')) await new Promise(() => {})
        return answer
      },
    } as unknown as typeof client
    const first = new PayoutExecutor({ db, ledger: new PayoutLedger(db), client: dying })
    const second = new PayoutExecutor({ db, ledger: new PayoutLedger(db), client })
    emu.admin.setFaults({ processingDelayMs: 400 })
    void first.executeBatch(rows(200), { idempotencyKey: 'crash-stale-key' })
    await waitFor(() => sent().length >= 1)
    await second.executeBatch(rows(200), { idempotencyKey: 'crash-stale-key' })
    await waitFor(() => emu.admin.payouts().length >= 100)
    await new Promise((resolve) => setTimeout(resolve, 500))
    emu.admin.setFaults({})
    await second.recover({ olderThanMs: 0 })
    // A day and an hour later the app runs the same call again (the documented resume).
    await emu.admin.advance(25 * 3_600_000)
    const late = new PayoutExecutor({
      db,
      ledger,
      client,
      now: () => DateTime.now().plus({ hours: 25 }),
    })
    await late.executeBatch(rows(200), { idempotencyKey: 'crash-stale-key' })
    const keys = sent().map((request) => request.idempotencyKey)
    assert.isAtMost(
      keys.filter((key) => key === 'crash-stale-key-c1').length,
      1,
      `chunk 1 sent at most once: ${keys.join(', ')}`
    )
    assert.isAtMost(emu.admin.payouts().length, 200, 'no row paid twice at the service')
  }).timeout(60_000)
})

test.group(`Ledger | executeBatch and the database's errors (${TEST_DB})`, () => {
  test('a database error of executeBatch or findBatch names no key, in the message or its causes', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix, executor, rows } = await setup(cleanup)
    const table = `${prefix}execution_intents`
    await db.connection().rawQuery(`ALTER TABLE ${table} RENAME TO ${table}_gone`)
    cleanup(async () => {
      await db.connection().rawQuery(`ALTER TABLE ${table}_gone RENAME TO ${table}`)
    })
    const failures = [
      await executor.executeBatch(rows(2), { idempotencyKey: 'secret-batch-key-42' }).then(
        () => null,
        (error: Error) => error
      ),
      await executor.findBatch('secret-batch-key-42').then(
        () => null,
        (error: Error) => error
      ),
    ]
    assert.deepEqual(
      failures.map((error) => (error as { code?: string } | null)?.code),
      ['E_PAYOUTS_EXECUTE_NOT_STORED', 'E_PAYOUTS_LEDGER_UNREADABLE']
    )
    for (const error of failures) {
      // What a logger prints: the message and stack of the error and of each cause.
      let printed = ''
      for (let at: unknown = error; at; at = (at as { cause?: unknown }).cause) {
        printed += `${(at as Error).message}\n${(at as Error).stack}\n`
      }
      assert.include(printed, 'database error')
      assert.notInclude(printed, 'secret-batch-key-42')
    }
  })
})

test.group(`Ledger | a batch chunk at the operator's desk (${TEST_DB})`, () => {
  test('a needs_attention chunk lists the ledger payouts that match its rows', async ({
    assert,
    cleanup,
  }) => {
    const { db, ledger, client, emu, proxy, executor, rows } = await setup(cleanup, {
      retry: { maxRetries: 0 },
    })
    proxy.loseNext(1)
    await executor.executeBatch(rows(3), { idempotencyKey: 'desk-batch-key' })
    assert.lengthOf(emu.admin.payouts(), 3, 'the chunk whose answer was lost was made')
    // The webhooks (or reconciliation) bring the service's payouts into the ledger.
    await ledger.applyBatch(
      emu.admin.payouts().map((payout) => ({
        payoutId: payout.payoutId,
        status: 'pending' as const,
        step: 'initiated',
        source: 'webhook' as const,
        fields: {
          recipientId: payout.recipientId,
          sourceAmount: String(payout.sourceAmount),
          sourceCurrency: payout.sourceCurrency,
          payoutCurrency: payout.payoutCurrency,
        } as never,
      }))
    )
    // Past the window (the margin before it), recovery flags it for a person.
    const late = new PayoutExecutor({
      db,
      ledger,
      client,
      now: () => DateTime.now().plus({ hours: 23, minutes: 30 }),
    })
    await late.recover({ olderThanMs: 0 })
    const [view] = await new IntentsDesk(late).list(['needs_attention'], 10)
    assert.equal(view.state, 'needs_attention')
    assert.sameMembers(
      (view.candidates ?? []).map((candidate) => candidate.payoutUuid),
      emu.admin.payouts().map((payout) => payout.payoutId),
      'each row of the chunk has its candidate: an empty list would point to --as=not-sent'
    )
  }).timeout(60_000)
})

test.group(`Ledger | findBatch after pruning (${TEST_DB})`, () => {
  test('a batch whose unsent chunks the pruner removed is not complete', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix, client, executor, rows } = await setup(cleanup)
    const controller = new AbortController()
    client.on('request', () => controller.abort())
    const batch = await executor.executeBatch(rows(250), {
      idempotencyKey: 'pruned-batch',
      signal: controller.signal,
    })
    assert.deepEqual([batch.counts.created, batch.counts.not_sent], [100, 150])
    await new Pruner({
      db,
      tables: tableNames(prefix),
      processedDeliveriesDays: 30,
      finishedIntentsHours: 48,
      batchSize: 500,
      statementTimeoutMs: 30_000,
      now: () => new Date(Date.now() + 49 * 3_600_000),
    }).prune()
    const found = await executor.findBatch('pruned-batch')
    assert.equal(found?.counts.created, 100, 'the chunk that paid is kept')
    assert.isFalse(found?.complete, '150 rows were never paid')
  }).timeout(60_000)
})
