import type { Database } from '@adonisjs/lucid/database'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { tableNames } from '../src/database/schema.ts'
import Payout from '../src/models/payout.ts'
import { dbDate } from '../src/database/dates.ts'
import { TERMINAL_STATUSES } from '../src/schemas/common.ts'
import { insertInbox, seedBody, seedLedger } from '../tests/helpers/ledger_seed.ts'
import type { BenchApp, BenchDb } from './app.ts'
import { median } from './stats.ts'
import { partsOf } from '../src/service/payouts_service.ts'

/** Runs `fn` `times` times; the median and the max of its durations, ms. */
async function timed(times: number, fn: (i: number) => Promise<unknown>) {
  const samples: number[] = []
  for (let i = 0; i < times; i++) {
    const started = performance.now()
    await fn(i)
    samples.push(performance.now() - started)
  }
  return { medianMs: median(samples), maxMs: Math.max(...samples), n: times }
}

/**
 * MySQL/MariaDB: waits until InnoDB has written its dirty pages and purged the old row
 * versions a bulk change left (what its background threads do over time), flushing at full
 * speed meanwhile (`innodb_io_capacity` raised, `innodb_max_dirty_pages_pct` at 0, both put
 * back after). The analogue of the checkpoint on SQLite and VACUUM on PostgreSQL: the measures
 * that follow must not race a seed's 8 GB being written out, or index ranges still full of
 * delete-marked entries. At most 5 minutes.
 */
async function settleInnodb(sql: QueryClientContract) {
  const value = async (query: string) => {
    const [rows] = await sql.rawQuery(query)
    return Number(Object.values(rows[0])[0])
  }
  const dirty = () =>
    value(
      "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_BUFFER_POOL_PAGES_DIRTY'"
    )
  const history = () =>
    value(
      "SELECT `count` FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'"
    )
  const saved = {
    innodb_io_capacity: await value('SELECT @@innodb_io_capacity'),
    innodb_io_capacity_max: await value('SELECT @@innodb_io_capacity_max'),
    innodb_max_dirty_pages_pct: await value('SELECT @@innodb_max_dirty_pages_pct'),
  }
  // io_capacity may never exceed io_capacity_max: raise the max first, lower it last.
  const apply = async (values: Record<string, number>) => {
    for (const [name, v] of Object.entries(values)) await sql.rawQuery(`SET GLOBAL ${name} = ${v}`)
  }
  // Without the privilege to set them, it only waits (at the server's own flushing speed).
  await apply({
    innodb_io_capacity_max: 20_000,
    innodb_io_capacity: 10_000,
    innodb_max_dirty_pages_pct: 0,
  }).catch((error) => console.error(`settleInnodb: ${(error as Error).message}; waiting as is`))
  try {
    const deadline = Date.now() + 300_000
    while (Date.now() < deadline && ((await dirty()) > 100 || (await history()) > 0)) {
      await new Promise((resolve) => setTimeout(resolve, 250))
    }
  } finally {
    await apply({
      innodb_max_dirty_pages_pct: saved.innodb_max_dirty_pages_pct,
      innodb_io_capacity: saved.innodb_io_capacity,
      innodb_io_capacity_max: saved.innodb_io_capacity_max,
    }).catch((error) => console.error(`settleInnodb: ${(error as Error).message}`))
  }
}

/**
 * Lets the app process its inbox until the backlog is gone or `ms` is up, and stops it; the
 * seconds it ran (a backlog drained early must not be divided by the whole window).
 */
export async function processFor(bench: BenchApp, ms: number) {
  const { processor } = await partsOf(bench.payouts)
  const started = performance.now()
  bench.setProcessing(true)
  processor.kick()
  let timer: NodeJS.Timeout | undefined
  await Promise.race([
    processor.idle(),
    new Promise((resolve) => (timer = setTimeout(resolve, ms))),
  ])
  clearTimeout(timer)
  const seconds = (performance.now() - started) / 1000
  bench.setProcessing(false)
  return seconds
}

/**
 * The growth bench's calls into the app child (bench/growth.ts): seed the ledger to a
 * size, and time each measure on the app's own service and connection.
 */
export function growthCommands(bench: BenchApp, lucid: Database, db: BenchDb) {
  const client = () => lucid.connection()
  const t = tableNames(bench.prefix)
  const unprocessed = () =>
    client()
      .from(t.webhookDeliveries)
      .whereIn('state', ['pending', 'processing', 'failed'])
      .count('* as total')
      .first()
      .then((row) => Number(row?.total ?? 0))
  return {
    /** Adds payouts from+1..to with their events, deposits and inbox rows. */
    seed: async (args: { from: number; to: number; horizon: number }) => {
      const started = performance.now()
      await seedLedger(client(), bench.prefix, args)
      // PostgreSQL's autovacuum would vacuum and analyze the tables this filled, in the
      // middle of the measures; a ledger that grew over months has had it done: now, then.
      // InnoDB recomputes its statistics in the background after a table changed by 10%:
      // done now too, so the measures do not race it. SQLite has none unless the app runs
      // ANALYZE.
      if (db === 'pg') {
        for (const table of Object.values(t)) await client().rawQuery(`VACUUM ANALYZE ${table}`)
      }
      if (db === 'mysql') {
        for (const table of Object.values(t)) await client().rawQuery(`ANALYZE TABLE ${table}`)
        await settleInnodb(client())
      }
      // SQLite WAL: the seed's one transaction sits in the WAL (gigabytes at 1,000,000
      // payouts) until a checkpoint; an app's WAL never holds that much. Checkpoint it now.
      if (db === 'sqlite') await client().rawQuery('PRAGMA wal_checkpoint(TRUNCATE)')
      return { seconds: (performance.now() - started) / 1000 }
    },
    /** Rows of each table. */
    rows: async () => {
      const out: Record<string, number> = {}
      for (const [name, table] of Object.entries(t)) {
        const row = await client().from(table).count('* as total').first()
        out[name] = Number(row?.total ?? 0)
      }
      return out
    },
    /** Processes the backlog the deferred ack run left; rows per second. */
    drainBacklog: async (args: { ms: number }) => {
      const before = await unprocessed()
      const seconds = await processFor(bench, args.ms)
      const { processor } = await partsOf(bench.payouts)
      await processor.idle()
      const rows = before - (await unprocessed())
      return { rows, seconds, rowsPerSecond: rows / seconds }
    },
    /** Waits until the inbox has nothing left to process. */
    settle: async () => {
      const { processor } = await partsOf(bench.payouts)
      bench.setProcessing(true)
      processor.kick()
      await processor.idle()
      bench.setProcessing(false)
      return unprocessed()
    },
    /**
     * One reconciliation pass in steady state: every in-flight payout observed within the
     * last minute (as the job keeps them), so the pass is its query.
     */
    reconcile: async (args: { times: number }) => {
      const sql = client()
      await sql
        .from(t.payouts)
        .whereIn('status', ['pending', 'processing'])
        .update({ last_observed_at: sql.knexRawQuery('CURRENT_TIMESTAMP') })
      // A running app's reconciler has read, once, the routing detail of each payout that
      // ended within its window (GET /payouts/{id}; this bench's service address answers
      // nothing, so each such read would be a refused call and its retries): read already.
      await sql
        .from(t.payouts)
        .whereIn('status', [...TERMINAL_STATUSES])
        .where('last_observed_at', '>=', dbDate(sql, new Date(Date.now() - 25 * 3600_000)))
        .whereNull('provider_metadata_at')
        .update({ provider_metadata_at: dbDate(sql, new Date()), provider_metadata_due_at: null })
      // Those bulk updates (every in-flight payout at once, unlike the trickle of observations
      // of a running app) left their old index entries for InnoDB's purge: let it run.
      if (db === 'mysql') await settleInnodb(sql)
      let checked = 0
      const time = await timed(args.times, async () => {
        const summary = await bench.payouts.reconcile()
        checked += summary.checked
      })
      return { ...time, checked }
    },
    /** The health report (`payouts:status`, the AdonisJS health check). */
    health: async (args: { times: number }) => {
      let report: unknown
      const time = await timed(args.times, async () => {
        report = await bench.payouts.health()
      })
      return { ...time, report }
    },
    /**
     * A single payout read by its UUID, `times` payouts spread evenly over the table's ids
     * (the seeded ones and those the ack runs created), picked before the clock starts. As
     * many other payouts, between those, are read first, untimed: a running app has its
     * indexes' upper pages in the store's cache, where a ledger just seeded in bulk has not
     * (on SQLite at 1,000,000 payouts the first reads after the seed took 0.17 ms, the next
     * ones 0.07). Each timed read is still of a payout not read before.
     */
    payoutRead: async (args: { times: number; round?: number }) => {
      const last = await client().from(t.payouts).max('id as id').first()
      const top = Number(last?.id ?? 0)
      const spread = (shift: number) =>
        Array.from({ length: args.times }, (_, i) =>
          Math.max(1, Math.round(((i + shift) * top) / args.times))
        )
      const uuidsOf = async (ids: number[]) => {
        const rows: Array<{ payout_uuid: string }> = await client()
          .from(t.payouts)
          .whereIn('id', ids)
          .select('payout_uuid')
        return rows.map((row) => row.payout_uuid)
      }
      // Each round of the measure reads payouts no earlier round read.
      const shift = 1 - (args.round ?? 0) * 0.2
      const timedIds = spread(shift)
      const warmIds = spread(shift - 0.5).filter((id) => !timedIds.includes(id))
      for (const uuid of await uuidsOf(warmIds)) await Payout.findBy('payout_uuid', uuid)
      const uuids = await uuidsOf(timedIds)
      let found = 0
      const time = await timed(uuids.length, async (i) => {
        if (await Payout.findBy('payout_uuid', uuids[i])) found++
      })
      return { ...time, found }
    },
    /**
     * The inbox's size on disk, bytes: PostgreSQL's table, indexes and TOAST; MySQL's data and
     * index length; SQLite's whole file.
     */
    inboxBytes: async () => {
      const sql = client()
      if (db === 'pg') {
        const result = await sql.rawQuery('select pg_total_relation_size(?) as bytes', [
          t.webhookDeliveries,
        ])
        return Number(result.rows[0].bytes)
      }
      if (db === 'mysql') {
        await sql.rawQuery(`ANALYZE TABLE ${t.webhookDeliveries}`)
        const [rows] = await sql.rawQuery(
          'select data_length + index_length as bytes from information_schema.tables where table_schema = database() and table_name = ?',
          [t.webhookDeliveries]
        )
        return Number(rows[0].bytes)
      }
      // SQLite: the whole database file (its pages, free ones included): a table's freed
      // pages stay in the file and are reused, so the file is what grows or not.
      const [count] = await sql.rawQuery('PRAGMA page_count')
      const [size] = await sql.rawQuery('PRAGMA page_size')
      return Number(count.page_count) * Number(size.page_size)
    },
    /** `payouts:prune` as the app's config has it (processed rows past 30 days). */
    prune: async () => {
      const started = performance.now()
      const summary = await bench.payouts.prune()
      return { ...summary, seconds: (performance.now() - started) / 1000 }
    },
    /**
     * `rows` fresh processed inbox rows after `after` (the seed's last inbox row): what the
     * days after a prune add, to see whether the table grows or reuses the freed space.
     */
    refill: async (args: { after: number; rows: number }) => {
      const started = performance.now()
      const to = args.after + args.rows
      await insertInbox(client(), bench.prefix, {
        from: args.after,
        to,
        horizon: to,
        span: 86_400,
        body: seedBody(),
      })
      return { seconds: (performance.now() - started) / 1000 }
    },
    /** PostgreSQL's plain VACUUM (what autovacuum does): space freed for reuse. */
    vacuum: async () => {
      if (db === 'pg') await client().rawQuery(`VACUUM ${t.webhookDeliveries}`)
      return db === 'pg'
    },
  }
}
