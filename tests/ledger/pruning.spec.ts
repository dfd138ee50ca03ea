import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import type { Database } from '@adonisjs/lucid/database'
import PayoutsPrune from '../../commands/payouts_prune.ts'
import { dbDate } from '../../src/database/dates.ts'
import { tableNames } from '../../src/database/schema.ts'
import { validateConfig } from '../../src/define_config.ts'
import { Pruner } from '../../src/ledger/pruning.ts'
import { BASE_URL, TEST_API_KEY } from '../helpers/app.ts'
import {
  connectionConfig,
  createAllPayoutsTables,
  recordStatements,
  setupDatabase,
  TEST_DB,
} from '../helpers/database.ts'
import { bootHostApp } from '../helpers/host_app.ts'
import { dropPayoutsTables } from '../../src/database/schema.ts'

const DAY = 86_400_000
const ago = (ms: number) => new Date(Date.now() - ms)

/** Inserts inbox rows in `state`, received and processed at `at`. */
async function deliveries(db: Database, prefix: string, count: number, state: string, at: Date) {
  const client = db.connection()
  const rows = Array.from({ length: count }, () => ({
    delivery_id: `dlv_${randomUUID()}`,
    event_type: 'payout.created',
    raw_body: 'e30=',
    source: 'webhook',
    state,
    attempts: 1,
    received_at: dbDate(client, at),
    processed_at: state === 'processed' ? dbDate(client, at) : null,
  }))
  await client.table(tableNames(prefix).webhookDeliveries).multiInsert(rows)
}

/** Inserts execution intents in `state`, last updated at `at`, keyed by the plugin by default. */
async function intents(
  db: Database,
  prefix: string,
  count: number,
  state: string,
  at: Date,
  keyOrigin: 'app' | 'plugin' | null = 'plugin'
) {
  const client = db.connection()
  const rows = Array.from({ length: count }, () => ({
    idempotency_key: randomUUID(),
    key_origin: keyOrigin,
    flow: 'fiat',
    request_body: '{}',
    body_hash: 'x'.repeat(64),
    state,
    attempts: 1,
    created_at: dbDate(client, at),
    updated_at: dbDate(client, at),
  }))
  await client.table(tableNames(prefix).executionIntents).multiInsert(rows)
}

/** A ledger row and its event: what pruning must never touch. */
async function ledgerRows(db: Database, prefix: string, at: Date) {
  const client = db.connection()
  const t = tableNames(prefix)
  const uuid = randomUUID()
  const stamp = dbDate(client, at)
  await client.table(t.payouts).insert({
    payout_uuid: uuid,
    status: 'completed',
    created_at: stamp,
    updated_at: stamp,
  })
  await client.table(t.payoutEvents).insert({
    payout_uuid: uuid,
    source: 'webhook',
    applied: true,
    observed_at: stamp,
    created_at: stamp,
  })
}

/** Row counts per table and state. */
async function counts(db: Database, prefix: string) {
  const client = db.connection()
  const t = tableNames(prefix)
  const count = async (table: string, state?: string) => {
    const query = client.from(table).count('* as total')
    if (state) query.where('state', state)
    const [row] = await query
    return Number(row.total)
  }
  return {
    processed: await count(t.webhookDeliveries, 'processed'),
    dead: await count(t.webhookDeliveries, 'dead'),
    failed: await count(t.webhookDeliveries, 'failed'),
    pending: await count(t.webhookDeliveries, 'pending'),
    succeeded: await count(t.executionIntents, 'succeeded'),
    refused: await count(t.executionIntents, 'refused'),
    unknown: await count(t.executionIntents, 'unknown'),
    needsAttention: await count(t.executionIntents, 'needs_attention'),
    payouts: await count(t.payouts),
    payoutEvents: await count(t.payoutEvents),
  }
}

/** Old and young rows of every kind: 5 old processed deliveries, 3 young, and so on. */
async function seed(db: Database, prefix: string) {
  await deliveries(db, prefix, 5, 'processed', ago(40 * DAY))
  await deliveries(db, prefix, 3, 'processed', ago(2 * DAY))
  await deliveries(db, prefix, 2, 'dead', ago(40 * DAY))
  await deliveries(db, prefix, 1, 'dead', ago(60_000))
  await deliveries(db, prefix, 2, 'failed', ago(40 * DAY))
  await deliveries(db, prefix, 1, 'pending', ago(40 * DAY))
  await intents(db, prefix, 4, 'succeeded', ago(3 * DAY))
  await intents(db, prefix, 1, 'succeeded', ago(3_600_000))
  await intents(db, prefix, 2, 'refused', ago(3 * DAY))
  await intents(db, prefix, 2, 'unknown', ago(3 * DAY))
  await intents(db, prefix, 1, 'needs_attention', ago(3 * DAY))
  await ledgerRows(db, prefix, ago(400 * DAY))
  await ledgerRows(db, prefix, ago(400 * DAY))
}

function pruner(db: Database, prefix: string, batchSize = 500) {
  return new Pruner({
    db,
    tables: tableNames(prefix),
    processedDeliveriesDays: 30,
    finishedIntentsHours: 48,
    batchSize,
    statementTimeoutMs: 30_000,
  })
}

const BEFORE = {
  processed: 8,
  dead: 3,
  failed: 2,
  pending: 1,
  succeeded: 5,
  refused: 2,
  unknown: 2,
  needsAttention: 1,
  payouts: 2,
  payoutEvents: 2,
}

test.group(`Pruning (${TEST_DB})`, () => {
  test('removes old processed deliveries and finished intents; keeps dead letters, the rest and the ledger', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'pruning')
    await seed(db, prefix)
    assert.deepEqual(await counts(db, prefix), BEFORE)

    const summary = await pruner(db, prefix).prune()

    assert.deepEqual(summary, {
      dryRun: false,
      processedDeliveries: 5,
      deadLetters: 0,
      finishedIntents: 6,
    })
    assert.deepEqual(await counts(db, prefix), {
      ...BEFORE,
      processed: 3,
      succeeded: 1,
      refused: 0,
    })
  })

  test('a dry run counts the same rows and changes nothing', async ({ assert, cleanup }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'pruning')
    await seed(db, prefix)
    const statements = recordStatements(db)

    const summary = await pruner(db, prefix).prune({ dryRun: true, deadLetters: true })

    assert.deepEqual(summary, {
      dryRun: true,
      processedDeliveries: 5,
      deadLetters: 2,
      finishedIntents: 6,
    })
    assert.deepEqual(
      statements.filter((sql) => /^delete/i.test(sql)),
      []
    )
    assert.deepEqual(await counts(db, prefix), BEFORE)
  })

  test('dead letters go only when asked, and never one younger than the retry window', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'pruning')
    await seed(db, prefix)

    const summary = await pruner(db, prefix).prune({ deadLetters: true })

    assert.equal(summary.deadLetters, 2)
    assert.deepEqual(await counts(db, prefix), {
      ...BEFORE,
      processed: 3,
      dead: 1,
      succeeded: 1,
      refused: 0,
    })
  })

  test("an app's key outlives retention while it made a payout; failed and refused ones go", async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'pruning')
    const old = ago(30 * DAY)
    await intents(db, prefix, 2, 'succeeded', old, 'app')
    await intents(db, prefix, 1, 'succeeded', old, null)
    await intents(db, prefix, 1, 'succeeded', old, 'plugin')
    await intents(db, prefix, 1, 'failed', old, 'app')
    await intents(db, prefix, 1, 'refused', old, 'app')
    await intents(db, prefix, 1, 'failed', old, null)

    const dry = await pruner(db, prefix).prune({ dryRun: true })
    assert.equal(dry.finishedIntents, 4)
    const summary = await pruner(db, prefix).prune()

    assert.equal(summary.finishedIntents, 4)
    const left = await db
      .connection()
      .from(tableNames(prefix).executionIntents)
      .select('state', 'key_origin')
      .orderBy('id')
    assert.deepEqual(
      left.map((row) => [row.state, row.key_origin]),
      [
        ['succeeded', 'app'],
        ['succeeded', 'app'],
        ['succeeded', null],
      ]
    )
  })

  test('batches by id start after the last id read: kept intents before them are not read again', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'pruning')
    const old = ago(30 * DAY)
    // Kept (an app's key to its payout) and removable intents, interleaved by id.
    for (const [kept, removable] of [
      [3, 2],
      [3, 2],
      [1, 1],
    ]) {
      await intents(db, prefix, kept, 'succeeded', old, 'app')
      await intents(db, prefix, removable, 'refused', old, 'app')
    }
    const table = tableNames(prefix).executionIntents
    const keptIds = (await db.connection().from(table).where('state', 'succeeded').select('id'))
      .map((row) => Number(row.id))
      .sort((a, b) => a - b)
    // Each SELECT of ids, its bindings and the ids it answered.
    const selects: Array<{ bindings: unknown[]; ids: number[] }> = []
    let recording = true
    db.connection()
      .getWriteClient()
      .on('query-response', (response: unknown, query: { sql: string; bindings?: unknown[] }) => {
        if (!recording || !/^select/i.test(query.sql.trim()) || !query.sql.includes(table)) return
        const rows = (Array.isArray(response) ? response : []) as Array<{ id: number | string }>
        selects.push({ bindings: query.bindings ?? [], ids: rows.map((row) => Number(row.id)) })
      })

    const summary = await pruner(db, prefix, 2).prune()
    recording = false

    assert.equal(summary.finishedIntents, 5)
    const left = await db.connection().from(table).select('id', 'state').orderBy('id')
    assert.deepEqual(
      left.map((row) => Number(row.id)),
      keptIds,
      'every kept intent stays, every removable one went'
    )
    assert.deepEqual(
      selects.map((select) => select.ids.length),
      [2, 2, 1]
    )
    // Each batch after the first asks only for ids above the last one the batch before read.
    for (let i = 1; i < selects.length; i++) {
      const last = selects[i - 1].ids.at(-1)!
      assert.include(
        selects[i].bindings.map(Number),
        last,
        `batch ${i + 1} is bounded below by ${last}`
      )
      assert.isTrue(selects[i].ids.every((id) => id > last))
    }
  })

  test('batches are bounded: batch size 2 over 5 rows is 3 DELETE statements of at most 2 ids', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'pruning')
    await deliveries(db, prefix, 5, 'processed', ago(40 * DAY))
    const table = tableNames(prefix).webhookDeliveries
    const statements = recordStatements(db)

    const summary = await pruner(db, prefix, 2).prune()

    assert.equal(summary.processedDeliveries, 5)
    const deletes = statements.filter((sql) => /^delete/i.test(sql) && sql.includes(table))
    assert.lengthOf(deletes, 3)
    // Each names its ids: at most 2 placeholders in the IN list.
    for (const sql of deletes) {
      const ids = /in \(([^)]*)\)/i.exec(sql)?.[1].split(',') ?? []
      assert.isAtMost(ids.length, 2)
    }
    assert.equal((await counts(db, prefix)).processed, 0)
  })
})

test.group(`Pruning | config and command (${TEST_DB})`, () => {
  test('retention below the service retry window is refused at boot', ({ assert }) => {
    const base = { apiKey: TEST_API_KEY, baseUrl: 'http://127.0.0.1:9' }
    assert.equal(validateConfig(base).retention.processedDeliveriesDays, 30)
    assert.throws(
      () => validateConfig({ ...base, retention: { processedDeliveriesDays: 0 } }),
      /retention\.processedDeliveriesDays/
    )
    assert.throws(
      () => validateConfig({ ...base, retention: { finishedIntentsHours: 12 } }),
      /retention\.finishedIntentsHours/
    )
  })

  test('payouts:prune --dry-run prints what it would remove; payouts:prune removes it', async ({
    assert,
    cleanup,
  }) => {
    const prefix = `p${randomUUID().slice(0, 6)}_`
    const app = await bootHostApp({
      root: BASE_URL,
      connection: connectionConfig('prune-command'),
      payouts: {
        apiKey: TEST_API_KEY,
        baseUrl: 'http://127.0.0.1:9',
        jobs: { enabled: false },
        ledger: { tablePrefix: prefix },
      },
    })
    const db = await app.container.make('lucid.db')
    await createAllPayoutsTables(db.connection().schema, prefix)
    cleanup(async () => {
      await dropPayoutsTables(db.connection().schema, prefix)
      await app.terminate()
    })
    await seed(db, prefix)
    const ace = await app.container.make('ace')
    ace.ui.switchMode('raw')
    const run = async (args: string[]) => {
      const command = await ace.create(PayoutsPrune, args)
      await command.exec()
      const logs = command.logger.getLogs().map((log: any) => log.message as string)
      return { exitCode: command.exitCode, last: logs.at(-1) ?? '' }
    }

    const dry = await run(['--dry-run', '--json'])
    assert.equal(dry.exitCode, 0)
    assert.deepEqual(JSON.parse(dry.last), {
      dryRun: true,
      processedDeliveries: 5,
      deadLetters: 0,
      finishedIntents: 6,
    })
    assert.deepEqual(await counts(db, prefix), BEFORE)

    const real = await run([])
    assert.equal(real.exitCode, 0)
    assert.include(real.last, 'Removed 5 processed deliveries, 0 dead letters, 6 finished intents')
    assert.deepEqual(await counts(db, prefix), {
      ...BEFORE,
      processed: 3,
      succeeded: 1,
      refused: 0,
    })
  })
})
