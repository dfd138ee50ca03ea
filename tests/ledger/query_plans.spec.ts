import { test } from '@japa/runner'
import type { Database } from '@adonisjs/lucid/database'
import { Logger } from '@adonisjs/core/logger'
import { DateTime } from 'luxon'
import { PayoutsResponseError } from '../../src/client/main.ts'
import { dbDate } from '../../src/database/dates.ts'
import { tableNames } from '../../src/database/schema.ts'
import { validateConfig } from '../../src/define_config.ts'
import type { Reachability } from '../../src/health/reachability.ts'
import { EscrowDeposits } from '../../src/ledger/escrow_deposits.ts'
import { depositConfirmedBy } from '../../src/ledger/escrow_detection.ts'
import { EscrowFallback } from '../../src/jobs/escrow_fallback.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import Payout from '../../src/models/payout.ts'
import { Pruner } from '../../src/ledger/pruning.ts'
import { Reconciler } from '../../src/jobs/reconciler.ts'
import { BroadcastRelay } from '../../src/service/broadcast_relay.ts'
import { readHealth } from '../../src/health/report.ts'
import { InboxStore } from '../../src/webhooks/inbox_store.ts'
import { readInboxBacklog } from '../../src/webhooks/inbox_backlog.ts'
import { TEST_API_KEY } from '../helpers/app.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'
import { analyzeLedger, seedLedger, seededPayoutUuid } from '../helpers/ledger_seed.ts'

/** Payouts seeded: 7 events and 10 inbox rows each, a deposit for one in three. */
const PAYOUTS = 6_000

interface Statement {
  sql: string
  bindings: unknown[]
}

/** Every statement the connection sends while `fn` runs, with its bindings. */
async function capture(db: Database, fn: () => Promise<unknown>): Promise<Statement[]> {
  const statements: Statement[] = []
  const client = db.connection().getWriteClient()
  const listener = (query: { sql: string; bindings?: unknown[] }) =>
    void statements.push({ sql: query.sql.trim(), bindings: query.bindings ?? [] })
  client.on('query', listener)
  try {
    await fn()
  } finally {
    client.off('query', listener)
  }
  // SQLite's write lock taken first (`delete from <table> where 0`, src/database/dialects.ts)
  // reads no row; its plan says SCAN all the same, so it is left out.
  return statements.filter(
    (s) =>
      /^(select|update|delete|with)\b/i.test(s.sql) && !/^delete from \S+ where 0$/i.test(s.sql)
  )
}

/**
 * The plan of a statement as the store would run it: `EXPLAIN` on PostgreSQL (the bound
 * values given, so the planner sees what the code sends), `EXPLAIN` on MySQL (access type
 * `ALL`), `EXPLAIN QUERY PLAN` on SQLite.
 * Returns the lines that read a large table whole: a `Seq Scan` of it, or a `SCAN` of it
 * without an index.
 */
async function fullScans(db: Database, statement: Statement, large: string[]): Promise<string[]> {
  const client = db.connection()
  // knex's event shows PostgreSQL's $1 placeholders; raw queries take knex's `?`.
  const sql = statement.sql.replace(/\$\d+/g, '?')
  if (TEST_DB === 'pg') {
    const result = await client.rawQuery(`EXPLAIN ${sql}`, statement.bindings as any[])
    const lines: string[] = result.rows.map((row: Record<string, string>) => row['QUERY PLAN'])
    return lines.filter((line) => large.some((table) => line.includes(`Seq Scan on ${table} `)))
  }
  if (TEST_DB === 'mysql') {
    // One row per table read; access type ALL is a full scan (MySQL and MariaDB alike).
    const [rows] = await client.rawQuery(`EXPLAIN ${sql}`, statement.bindings as any[])
    return (rows as Array<{ table: string; type: string }>)
      .filter((row) => row.type === 'ALL' && large.includes(row.table))
      .map((row) => `ALL ${row.table}`)
  }
  const rows: Array<{ detail: string }> = await client.rawQuery(
    `EXPLAIN QUERY PLAN ${sql}`,
    statement.bindings as any[]
  )
  // A search by the account alone reads the account's every row: one account holds them all.
  // Unless the statement asks only whether the account has a row (its first index entry).
  const existenceCheck = /^select \S+ from \S+ where \S*account\S* = \? limit \?$/i.test(sql)
  const byAccountAlone = (table: string) =>
    new RegExp(`^SEARCH ${table}( AS \\w+)? USING (COVERING )?INDEX \\S+ \\(account=\\?\\)$`)
  return rows
    .map((row) => row.detail)
    .filter((detail) =>
      large.some(
        (table) =>
          new RegExp(`^SCAN ${table}( AS \\w+)?$`).test(detail.trim()) ||
          (!existenceCheck && byAccountAlone(table).test(detail.trim()))
      )
    )
}

/**
 * PostgreSQL only (SQLite has no EXPLAIN ANALYZE): runs the statement under EXPLAIN ANALYZE
 * in a transaction rolled back, and returns the rows its plan read and threw away (removed
 * by a filter or an index recheck) beside the rows it returned.
 */
async function wastedRows(db: Database, statement: Statement) {
  const sql = statement.sql.replace(/\$\d+/g, '?')
  const trx = await db.connection().transaction()
  try {
    const result = await trx.rawQuery(`EXPLAIN ANALYZE ${sql}`, statement.bindings as any[])
    const lines: string[] = result.rows.map((row: Record<string, string>) => row['QUERY PLAN'])
    const removed = lines
      .map((line) => /Rows Removed by (?:Filter|Index Recheck): (\d+)/.exec(line)?.[1])
      .reduce((sum, n) => sum + Number(n ?? 0), 0)
    const returned = Number(/actual time=\S+ rows=(\d+)/.exec(lines[0])?.[1] ?? 0)
    return { removed, returned, plan: lines.join('\n') }
  } finally {
    await trx.rollback()
  }
}

test.group(`Ledger | query plans on a large ledger (${TEST_DB})`, (group) => {
  group.each.timeout(120_000)

  test('the hot queries read the large tables through an index, never whole', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'plans')
    const t = tableNames(prefix)
    const client = db.connection()
    await seedLedger(client, prefix, { from: 0, to: PAYOUTS, horizon: PAYOUTS })
    // A few rows that the queries find: a backlog, a dead letter, a deposit due.
    await client
      .from(t.webhookDeliveries)
      .whereIn('id', [1, 2, 3])
      .update({ state: 'pending', processed_at: null })
    await client.from(t.webhookDeliveries).where('id', 4).update({ state: 'dead' })
    await analyzeLedger(client, prefix)
    const large = [t.payouts, t.payoutEvents, t.webhookDeliveries, t.escrowDeposits]

    const config = validateConfig({
      apiKey: TEST_API_KEY,
      baseUrl: 'http://127.0.0.1:9',
      ledger: { tablePrefix: prefix },
    })
    const reachability = {
      read: async () => ({ status: 'ok', value: null, message: 'not measured here' }),
    } as unknown as Reachability
    const ledger = new PayoutLedger(db)
    const refuse = () => Promise.reject(new Error('the service is not called in this test'))
    const missing = () => Promise.reject(new PayoutsResponseError({ status: 404 }))
    const deposits = new EscrowDeposits({
      db,
      client: { getQuoteStatus: refuse, confirmEscrowDeposit: refuse },
    })
    const inbox = new InboxStore(db, t.webhookDeliveries)
    const now = new Date()

    /**
     * What each path runs (after its `prepare`, whose statements are not looked at), and, for
     * a query whose index range is bounded otherwise, the rows it may read and throw away.
     */
    const paths: Record<
      string,
      | (() => Promise<unknown>)
      | {
          prepare?: () => Promise<unknown>
          run: () => Promise<unknown>
          maxRemoved?: (sql: string) => number | undefined
        }
    > = {
      'the health report': () => readHealth({ config, environment: 'sandbox', db, reachability }),
      // Nothing stale; the payouts that ended within the last day, their routing detail never
      // read, are read once (the service answers 404 here: they stay as they are).
      'a reconciliation run (nothing stale, ended payouts to read)': {
        run: () =>
          new Reconciler({
            db,
            ledger,
            client: { rateLimit: null, getPayout: missing },
          }).run(),
      },
      // Every ended payout's detail read after its end, as the ledger leaves them: no longer
      // marked (provider_metadata_due_at). The query reads the marked range from the window's
      // start, empty here, and no payout that ended within the window (a few thousand).
      'a reconciliation run (nothing stale, every ended payout read)': {
        prepare: () =>
          client
            .from(t.payouts)
            .whereNotNull('status_changed_at')
            .update({
              provider_metadata_at: client.raw('status_changed_at'),
              provider_metadata_due_at: null,
            }),
        run: async () => {
          const summary = await new Reconciler({
            db,
            ledger,
            client: { rateLimit: null, getPayout: refuse },
          }).run()
          if (summary.checked !== 0) throw new Error(`${summary.checked} payouts read`)
        },
      },
      'the escrow fallback job (nothing due)': () => new EscrowFallback({ db, deposits }).run(),
      'the deposit a change confirmed': () =>
        depositConfirmedBy({
          payout: { payoutUuid: seededPayoutUuid(3), flow: 'stablecoin_to_fiat' },
          previous: { status: 'pending', step: null },
          current: { status: 'processing', step: null },
          eventId: 2 * 7 + 2,
        } as any),
      'payouts:replay --since --until': () =>
        inbox.requeue({
          since: new Date(now.getTime() - 3_600_000),
          until: new Date(now.getTime() - 1_800_000),
        }),
      'claiming due inbox rows': () => inbox.claimDue(now, 50, 60_000),
      'processing due inbox rows in a transaction (the drain)': () =>
        inbox.processDueInTransaction(now, 50, async (_trx, rows) =>
          rows.map(() => ({ state: 'processed' as const, note: null }))
        ),
      'pruning': () =>
        new Pruner({
          db,
          tables: t,
          processedDeliveriesDays: 30,
          finishedIntentsHours: 48,
          batchSize: 500,
          statementTimeoutMs: 0,
        }).prune({ deadLetters: true }),
      'a payout read': () => Payout.findBy('payout_uuid', seededPayoutUuid(PAYOUTS / 2)),
      'the outbox sweep': () => ledger.renotify({ olderThanMs: 0 }),
      'the broadcast relay: its start, a read of new changes, a gap read back': async () => {
        const relay = new BroadcastRelay({
          db,
          notifier: { broadcast: () => {} },
          logger: new Logger({ enabled: false }),
          intervalMs: 250,
          gapWaitMs: 30_000,
        })
        await relay.readOnce()
        // An id taken by a transaction rolled back (PostgreSQL, MySQL): a gap behind the next.
        const trx = await db.transaction()
        await ledger.applyBatchInTransaction(trx, [
          { payoutId: seededPayoutUuid(60), status: 'completed', step: null, source: 'webhook' },
        ])
        await trx.rollback()
        await ledger.apply({
          payoutId: seededPayoutUuid(61),
          status: 'completed',
          step: null,
          source: 'webhook',
        })
        await relay.readOnce()
        await relay.readOnce()
      },
      'an observation applied': () =>
        ledger.apply({
          payoutId: seededPayoutUuid(50),
          status: 'completed',
          step: null,
          source: 'webhook',
          eventType: 'payout.completed',
          observedAt: DateTime.now(),
        }),
    }

    const found: string[] = []
    for (const [name, entry] of Object.entries(paths)) {
      const path = typeof entry === 'function' ? { run: entry } : entry
      await path.prepare?.()
      const statements = await capture(db, path.run)
      assert.isAbove(statements.length, 0, `${name} sent no query`)
      for (const statement of statements) {
        for (const line of await fullScans(db, statement, large)) {
          found.push(`${name}: ${line.trim()}\n    in: ${statement.sql}`)
        }
        // An index can still be read far past what a query needs (a range that the index
        // does not bound, filtered row by row): fail when a statement throws away more
        // rows than it returns, beyond a few.
        if (TEST_DB !== 'pg') continue
        const { removed, returned, plan } = await wastedRows(db, statement)
        if (removed > (path.maxRemoved?.(statement.sql) ?? 50 + 2 * returned)) {
          found.push(
            `${name}: read ${removed} rows it threw away for ${returned} returned\n    in: ${statement.sql}\n${plan}`
          )
        }
      }
    }
    assert.deepEqual(found, [], `full scans of large tables:\n${found.join('\n')}`)
  })
})

test.group(`Ledger | the inbox on a SQLite file without statistics (${TEST_DB})`, () => {
  test('the drain, the leased claim, the backlog gauges, the health report and a replay by time search their index, not the account’s every row', async ({
    assert,
    cleanup,
  }) => {
    if (TEST_DB !== 'sqlite') {
      // The servers keep statistics of their own; the suite above plans them analyzed.
      assert.equal(TEST_DB === 'pg' || TEST_DB === 'mysql', true)
      return
    }
    const { db, prefix } = await setupDatabase(cleanup, 'claim_plans')
    const t = tableNames(prefix)
    const client = db.connection()
    const at = dbDate(client, new Date())
    // What an inbox keeps: processed rows by the thousand (never ANALYZEd: an app does not),
    // and a small backlog.
    for (let start = 0; start < 5_000; start += 500) {
      await client.table(t.webhookDeliveries).multiInsert(
        Array.from({ length: 500 }, (_, index) => ({
          account: 'main',
          delivery_id: `done-${start + index}`,
          event_type: 'payout.status.updated',
          raw_body: 'e30=',
          source: 'webhook',
          state: 'processed',
          attempts: 1,
          received_at: at,
          processed_at: at,
        }))
      )
    }
    const inbox = new InboxStore(db, t.webhookDeliveries)
    /** The health report of `account` on this ledger (the service's reachability not read). */
    const healthOf = (account: string) =>
      readHealth({
        config: {
          ...validateConfig({
            apiKey: TEST_API_KEY,
            baseUrl: 'http://127.0.0.1:9',
            ledger: { tablePrefix: prefix },
          }),
          account,
        },
        environment: 'sandbox',
        db,
        reachability: {
          read: async () => ({ status: 'ok', value: null, message: 'not measured here' }),
        } as unknown as Reachability,
      })
    // A backlog of a slice's size: claimed by a list of 30 ids, which SQLite without statistics
    // read along the account's index (a list of 3 it still read id by id).
    for (let index = 0; index < 30; index++) {
      await inbox.insert({
        deliveryId: `due-${index}`,
        eventType: 'payout.status.updated',
        rawBody: Buffer.from('{}'),
        signatureHeader: null,
        source: 'webhook',
      })
    }
    const drained = await capture(db, () =>
      inbox.processDueInTransaction(new Date(), 50, async (_trx, rows) =>
        rows.map(() => ({ state: 'processed' as const, note: null }))
      )
    )
    const leased = await capture(db, async () => {
      await client.from(t.webhookDeliveries).where('delivery_id', 'like', 'due-%').update({
        state: 'pending',
      })
      return inbox.claimDue(new Date(), 50, 60_000)
    })
    const statements = [
      ...drained,
      ...leased,
      ...(await capture(db, () =>
        readInboxBacklog(client, t.webhookDeliveries, Date.now(), (query) => query)
      )),
      // payouts:replay --since/--until (a time range, no delivery id).
      ...(await capture(db, () =>
        inbox.requeue({ since: new Date(Date.now() - 60_000), until: new Date(Date.now() + 1000) })
      )),
      ...(await capture(db, () => healthOf('main'))),
    ].filter((statement) => statement.sql.includes(t.webhookDeliveries))
    const reads = statements.filter(
      (statement) => !/^update .* where .delivery_id. like/i.test(statement.sql)
    )
    assert.isAbove(reads.length, 2)
    const found: string[] = []
    for (const statement of reads) {
      for (const line of await fullScans(db, statement, [t.webhookDeliveries])) {
        found.push(`${line}\n    in: ${statement.sql}`)
      }
    }
    assert.deepEqual(found, [], `claims that read the whole inbox:\n${found.join('\n')}`)

    // Another account, with no delivery: its newest delivery is not looked for along the
    // received_at index, which it would walk backwards through every row of `main`.
    const otherAccount = await capture(db, () => healthOf('eu'))
    const walks: string[] = []
    for (const statement of otherAccount.filter((s) => s.sql.includes(t.webhookDeliveries))) {
      const plan: Array<{ detail: string }> = await client.rawQuery(
        `EXPLAIN QUERY PLAN ${statement.sql}`,
        statement.bindings as any[]
      )
      for (const { detail } of plan) {
        if (detail.startsWith(`SCAN ${t.webhookDeliveries}`))
          walks.push(`${detail}\n  in: ${statement.sql}`)
      }
    }
    assert.deepEqual(walks, [], 'an account without deliveries walks no index of the inbox')

    // The claims find their rows by their ids alone, not through the due rows' indexes (an
    // OR of two that reads the whole backlog for each batch): the drain's UPDATE, and the
    // leased claim's read again and UPDATE.
    const byIds = [
      drained.find((statement) => /^update .* returning /i.test(statement.sql))!,
      ...leased.filter((statement) => /^(select|update) .* `id` in \(/i.test(statement.sql)),
    ]
    assert.lengthOf(byIds, 3)
    for (const claim of byIds) {
      const plan: Array<{ detail: string }> = await client.rawQuery(
        `EXPLAIN QUERY PLAN ${claim.sql}`,
        claim.bindings as any[]
      )
      const details = plan.map((row) => row.detail).join(' / ')
      assert.match(details, /USING INTEGER PRIMARY KEY \(rowid=\?\)/, `by its ids: ${claim.sql}`)
      assert.notMatch(details, /MULTI-INDEX OR|USING INDEX/, `${details}\n  in: ${claim.sql}`)
    }
  })
})
