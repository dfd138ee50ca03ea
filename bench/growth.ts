import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import knex from 'knex'
import { format, resolveConfig } from 'prettier'
import { MYSQL_CONNECTION, ROUTES } from './app.ts'
import type { Child } from './ipc.ts'
import { loadRoute, pool, type LoadResult, type LoadRun } from './load.ts'
import {
  TMP,
  elapsed,
  log,
  startedAt,
  unavailable,
  withApp,
  type Check,
  type DbConfig,
} from './setup.ts'
import { median, round } from './stats.ts'

/**
 * `npm run bench:growth`: the same measures on a ledger seeded in bulk to growing sizes
 * (issue #20): acknowledgement p99 at 500 deliveries/s (processing deferred, then inline),
 * the inbox drain rate, one reconciliation pass, the health report and a single payout
 * read, at each size, on each store; then `payouts:prune` on the largest inbox, with the
 * table's size before and after. Target: each figure within 1.25x of the empty ledger's.
 *
 * GROWTH_SIZES=0,100000,1000000 (payouts; 7 events and 10 inbox rows each) and
 * GROWTH_DBS=sqlite-wal,pg,mysql choose what runs; GROWTH_MAX_<DB>=n caps a store's size.
 * A run of some stores keeps the last figures of the others in bench/results.json, each
 * store with the date it was measured.
 *
 * MySQL/MariaDB: InnoDB caches pages in its own buffer pool only (O_DIRECT), where PostgreSQL
 * and SQLite also read through the OS page cache (18 GB of this machine's memory is free; the
 * ledger is about 10 GB at 1,000,000 payouts). So that the three compare alike, for its run the bench
 * sets `innodb_buffer_pool_size` to GROWTH_MYSQL_BUFFER_POOL_MB (12288; the distro default is
 * 128 MB) and the redo log to 1 GB when they are smaller (both dynamic on MariaDB 10.11 and
 * MySQL 8), and restores them after.
 */

const SIZES = (process.env.GROWTH_SIZES ?? '0,100000,1000000').split(',').map(Number)
const DB_KEYS = (process.env.GROWTH_DBS ?? 'sqlite-wal,pg,mysql').split(',')
const HARD_CAP_MS = Number(process.env.GROWTH_CAP_MIN ?? 25) * 60_000
/** Figures of a development run (sizes other than the default) go to bench/tmp. */
const RESULTS =
  process.env.GROWTH_SIZES === undefined || process.env.GROWTH_WRITE === '1'
    ? new URL('./results.json', import.meta.url)
    : new URL('./tmp/results-growth.json', import.meta.url)

export const GROWTH = {
  eventsPerPayout: 7,
  inboxPerPayout: 10,
  spanDays: 33,
  bodyBytes: 600,
  rate: 500,
  connections: 20,
  /** Each acknowledgement measure: this many fixed-rate runs of `fixedS` seconds. */
  fixedS: 3,
  ackRuns: 3,
  drainMs: 20_000,
  reconcileTimes: 5,
  healthTimes: 5,
  readTimes: 200,
  /** How far over the empty ledger's figure a size may be. */
  factor: 1.25,
}

const STORES: DbConfig[] = [
  { key: 'sqlite-wal', db: 'sqlite', wal: true, label: 'SQLite, WAL + synchronous=NORMAL' },
  { key: 'pg', db: 'pg', wal: false, label: 'PostgreSQL 127.0.0.1:5432 (pool 2..10)' },
  { key: 'mysql', db: 'mysql', wal: false, label: 'MySQL/MariaDB 127.0.0.1:3306 (pool 2..10)' },
]

/** The runs of one acknowledgement measure (see fixedRuns). */
type AckResult = LoadResult & { p99s: number[]; p99Median: number }

/** What one size measured on one store. */
interface SizeResult {
  payouts: number
  seedSeconds: number
  rows: Record<string, number>
  ack: AckResult
  drain: { rows: number; seconds: number; rowsPerSecond: number }
  ackProcessing: AckResult
  reconcile: { medianMs: number; maxMs: number; checked: number }
  health: { medianMs: number; maxMs: number }
  payoutRead: { medianMs: number; maxMs: number; found: number; n: number }
}

interface PruneResult {
  payouts: number
  inboxRowsBefore: number
  inboxRowsAfter: number
  bytesBefore: number
  bytesAfterPrune: number
  bytesAfterVacuum: number | null
  /** Fresh rows inserted after the prune, and the table's size then (freed space reused). */
  refill: { rows: number; bytes: number }
  removed: number
  seconds: number
}

interface StoreResult {
  label: string
  sizes: SizeResult[]
  prune?: PruneResult
  skipped?: string
  error?: string
  /** Sizes of GROWTH_SIZES not run on this store, and why. */
  notRun?: string
  /** MySQL: the server's buffer pool and redo log, before the run and during it. */
  server?: ServerSettings
  /** When this store was measured (a run of other stores keeps it). */
  measuredAt?: string
}

/**
 * Fixed-rate runs of the plugin route, `GROWTH.ackRuns` of them: their answers added up and
 * their samples pooled, and each run's p99. The figure judged is the median of those p99s:
 * one run's p99 is its 1% slowest answers, which one stall (a checkpoint, a collection) can
 * make, and moves by 2x between runs on this machine.
 */
async function fixedRuns(child: Child<{ url: string }>, tag: string): Promise<AckResult> {
  const runs: LoadRun[] = []
  for (let i = 0; i < GROWTH.ackRuns; i++) {
    runs.push(
      await loadRoute({
        url: child.ready.url,
        path: ROUTES.plugin,
        tag,
        durationS: GROWTH.fixedS,
        connections: GROWTH.connections,
        overallRate: GROWTH.rate,
      })
    )
  }
  const p99s = runs.map((run) => run.latency.p99)
  return { ...pool(runs), p99s, p99Median: median(p99s) }
}

/** Every measure at the current size. */
async function measureSize(
  child: Child<{ url: string }>,
  payouts: number,
  seedSeconds: number
): Promise<SizeResult> {
  const rows = await child.call<Record<string, number>>('rows', undefined, 600_000)
  await child.call('processing', { on: false })
  // Warm-up: connections, JIT, the pages of the inbox's newest end.
  await loadRoute({
    url: child.ready.url,
    path: ROUTES.plugin,
    tag: 'warm',
    durationS: 1,
    connections: GROWTH.connections,
    overallRate: GROWTH.rate,
  })
  await child.call('settle', undefined, 120_000)
  const ack = await fixedRuns(child, 'growth_ack')
  const drain = await child.call<SizeResult['drain']>(
    'drainBacklog',
    { ms: GROWTH.drainMs },
    GROWTH.drainMs + 120_000
  )
  await child.call('settle', undefined, 120_000)
  await child.call('processing', { on: true })
  const ackProcessing = await fixedRuns(child, 'growth_proc')
  await child.call('processing', { on: false })
  await child.call('settle', undefined, 120_000)
  const reconcile = await child.call<SizeResult['reconcile']>(
    'reconcile',
    { times: GROWTH.reconcileTimes },
    600_000
  )
  const health = await child.call<SizeResult['health'] & { report: unknown }>(
    'health',
    { times: GROWTH.healthTimes },
    600_000
  )
  const payoutRead = await child.call<SizeResult['payoutRead']>(
    'payoutRead',
    { times: GROWTH.readTimes },
    600_000
  )
  log(
    `    ${payouts} payouts: ack p99 ${ack.p99Median.toFixed(1)} ms (${ack.p99s.map((x) => x.toFixed(1)).join(', ')}), inline ${ackProcessing.p99Median.toFixed(1)} ms (${ackProcessing.p99s.map((x) => x.toFixed(1)).join(', ')}),` +
      ` drain ${drain.rowsPerSecond.toFixed(0)} rows/s, reconcile ${reconcile.medianMs.toFixed(1)} ms,` +
      ` health ${health.medianMs.toFixed(1)} ms, read ${payoutRead.medianMs.toFixed(2)} ms`
  )
  return {
    payouts,
    seedSeconds,
    rows,
    ack,
    drain,
    ackProcessing,
    reconcile: { medianMs: reconcile.medianMs, maxMs: reconcile.maxMs, checked: reconcile.checked },
    health: { medianMs: health.medianMs, maxMs: health.maxMs },
    payoutRead,
  }
}

/** `payouts:prune` on the inbox as seeded: rows past 30 days removed, sizes around it. */
async function measurePrune(child: Child<{ url: string }>, payouts: number): Promise<PruneResult> {
  const inboxRows = () =>
    child
      .call<Record<string, number>>('rows', undefined, 600_000)
      .then((rows) => rows.webhookDeliveries)
  const inboxRowsBefore = await inboxRows()
  const bytesBefore = await child.call<number>('inboxBytes', undefined, 600_000)
  const pruned = await child.call<{ processedDeliveries: number; seconds: number }>(
    'prune',
    undefined,
    1_800_000
  )
  const bytesAfterPrune = await child.call<number>('inboxBytes', undefined, 600_000)
  const vacuumed = await child.call<boolean>('vacuum', undefined, 1_800_000)
  const bytesAfterVacuum = vacuumed
    ? await child.call<number>('inboxBytes', undefined, 600_000)
    : null
  const inboxRowsAfter = await inboxRows()
  const refillRows = Math.min(pruned.processedDeliveries, 200_000)
  await child.call(
    'refill',
    { after: payouts * GROWTH.inboxPerPayout, rows: refillRows },
    1_800_000
  )
  const refill = {
    rows: refillRows,
    bytes: await child.call<number>('inboxBytes', undefined, 600_000),
  }
  return {
    payouts,
    inboxRowsBefore,
    inboxRowsAfter,
    bytesBefore,
    bytesAfterPrune,
    bytesAfterVacuum,
    refill,
    removed: pruned.processedDeliveries,
    seconds: pruned.seconds,
  }
}

/** The MySQL server's settings the bench raises for its run, as they were and as run. */
interface ServerSettings {
  before: Record<string, number>
  during: Record<string, number>
}

/**
 * Runs `fn` with InnoDB's buffer pool and redo log at least as large as the bench's
 * (see the top of this file), then puts back the server's own values.
 */
async function withMysqlSized<T>(fn: (settings: ServerSettings) => Promise<T>): Promise<T> {
  const poolMb = Number(process.env.GROWTH_MYSQL_BUFFER_POOL_MB ?? 12_288)
  const wanted: Record<string, number> = {
    innodb_buffer_pool_size: poolMb * 1024 * 1024,
    innodb_log_file_size: 1024 * 1024 * 1024,
  }
  const server = knex({ client: 'mysql2', connection: MYSQL_CONNECTION, pool: { min: 0, max: 1 } })
  const read = async () => {
    const [rows] = await server.raw(
      'SELECT @@innodb_buffer_pool_size AS innodb_buffer_pool_size, @@innodb_log_file_size AS innodb_log_file_size'
    )
    return Object.fromEntries(Object.entries(rows[0]).map(([k, v]) => [k, Number(v)]))
  }
  const set = async (values: Record<string, number>) => {
    for (const [name, value] of Object.entries(values)) {
      await server.raw(`SET GLOBAL ${name} = ${Math.round(value)}`)
    }
    // The buffer pool grows in the background: wait until it has.
    const deadline = Date.now() + 120_000
    while (Date.now() < deadline) {
      const now = await read()
      const target = values.innodb_buffer_pool_size
      // (rounded by the server to its chunk size, 128 MB by default)
      if (
        target === undefined ||
        Math.abs(now.innodb_buffer_pool_size - target) < 128 * 1024 * 1024
      )
        break
      await new Promise((resolve) => setTimeout(resolve, 500))
    }
  }
  try {
    const before = await read()
    const raise = Object.fromEntries(
      Object.entries(wanted).filter(([name, value]) => before[name] < value)
    )
    try {
      await set(raise)
    } catch (error) {
      log(`  could not size the MySQL server (${(error as Error).message}); running as it is`)
    }
    const during = await read()
    log(
      `  MySQL server: buffer pool ${mb(during.innodb_buffer_pool_size)} MB, redo log ` +
        `${mb(during.innodb_log_file_size)} MB (was ${mb(before.innodb_buffer_pool_size)} / ${mb(before.innodb_log_file_size)})`
    )
    try {
      return await fn({ before, during })
    } finally {
      const restore = Object.fromEntries(Object.keys(raise).map((name) => [name, before[name]]))
      await set(restore).catch((error) =>
        log(`  could not restore the MySQL server's settings: ${(error as Error).message}`)
      )
    }
  } finally {
    await server.destroy()
  }
}

/** Grows one store's ledger size by size, measuring at each. */
async function benchStore(config: DbConfig, sizes: number[]): Promise<StoreResult> {
  if (config.db === 'mysql') {
    return withMysqlSized(async (server) => ({
      ...(await benchStoreSized(config, sizes)),
      server,
    }))
  }
  return benchStoreSized(config, sizes)
}

async function benchStoreSized(config: DbConfig, sizes: number[]): Promise<StoreResult> {
  const result: StoreResult = { label: config.label, sizes: [] }
  const horizon = Math.max(1, ...sizes)
  await withApp(config, async (child) => {
    let seeded = 0
    let secondsPerPayout = 0
    for (const size of sizes) {
      // A size whose seeding (at the last size's rate, with a margin) and measures would
      // run past the cap is left out, said so, rather than cut off by the watchdog.
      const predictedMs = (size - seeded) * secondsPerPayout * 1500 + 90_000
      if (Date.now() - startedAt + predictedMs > HARD_CAP_MS - 120_000) {
        result.notRun =
          `${sizes.filter((s) => s >= size).join(', ')} payouts not run: seeding and measuring ` +
          `would take about ${Math.round(predictedMs / 60_000)} more min, past the run's ${HARD_CAP_MS / 60_000} min bound`
        break
      }
      log(`  [${elapsed()}] ${config.key}: seeding ${seeded} -> ${size} payouts`)
      const { seconds } = await child.call<{ seconds: number }>(
        'seed',
        { from: seeded, to: size, horizon, ...GROWTH },
        3_600_000
      )
      if (size > seeded) secondsPerPayout = seconds / (size - seeded)
      seeded = size
      log(`  [${elapsed()}] ${config.key}: seeded in ${seconds.toFixed(0)} s; measuring`)
      result.sizes.push(await measureSize(child, size, seconds))
    }
    if (seeded > 0 && process.env.GROWTH_PRUNE !== '0') {
      log(`  [${elapsed()}] ${config.key}: payouts:prune on ${seeded} payouts' inbox`)
      result.prune = await measurePrune(child, seeded)
      const p = result.prune
      log(
        `    removed ${p.removed} rows in ${p.seconds.toFixed(0)} s; inbox ${mb(p.bytesBefore)} -> ${mb(p.bytesAfterPrune)} MB` +
          (p.bytesAfterVacuum === null ? '' : ` (after VACUUM ${mb(p.bytesAfterVacuum)} MB)`) +
          `, ${mb(p.refill.bytes)} MB after ${p.refill.rows} fresh rows`
      )
    }
  })
  return result
}

const mb = (bytes: number) => round(bytes / 1024 / 1024, 1)

/** The growth rows of the results table for one store. */
function growthChecks(key: string, r: StoreResult): Check[] {
  if (r.sizes.length === 0) {
    return [
      {
        id: `${key}.growth.skipped`,
        measure: 'ledger growth',
        db: key,
        value: null,
        unit: '',
        target: `skipped: ${r.skipped ?? r.error ?? r.notRun}`,
        pass: r.error ? false : null,
      },
    ]
  }
  const empty = r.sizes.find((s) => s.payouts === 0)
  const measures: Array<{
    id: string
    measure: string
    unit: string
    value: (s: SizeResult) => number
    /** Higher is better (a rate): the target is the empty figure divided by the factor. */
    rate?: boolean
  }> = [
    {
      id: 'ack_p99',
      measure: `ack p99 @${GROWTH.rate}/s, processing deferred, median of ${GROWTH.ackRuns} runs`,
      unit: 'ms',
      value: (s) => s.ack.p99Median,
    },
    {
      id: 'ack_inline_p99',
      measure: `ack p99 @${GROWTH.rate}/s, processing inline, median of ${GROWTH.ackRuns} runs`,
      unit: 'ms',
      value: (s) => s.ackProcessing.p99Median,
    },
    {
      id: 'drain',
      measure: 'inbox drain',
      unit: 'rows/s',
      value: (s) => s.drain.rowsPerSecond,
      rate: true,
    },
    {
      id: 'reconcile',
      measure: 'one reconciliation pass (steady state), median',
      unit: 'ms',
      value: (s) => s.reconcile.medianMs,
    },
    {
      id: 'health',
      measure: 'health report (payouts:status), median',
      unit: 'ms',
      value: (s) => s.health.medianMs,
    },
    {
      id: 'payout_read',
      measure: 'single payout read by UUID, median',
      unit: 'ms',
      value: (s) => s.payoutRead.medianMs,
    },
  ]
  const checks: Check[] = []
  for (const m of measures) {
    for (const s of r.sizes) {
      const base = empty ? m.value(empty) : null
      const value = m.value(s)
      const failed = s.ack.non2xx + s.ack.errors + s.ackProcessing.non2xx + s.ackProcessing.errors
      const bound = base === null ? null : m.rate ? base / GROWTH.factor : base * GROWTH.factor
      const isEmpty = s.payouts === 0
      checks.push({
        id: `${key}.growth.${s.payouts}.${m.id}`,
        measure:
          `${m.measure}, ${s.payouts.toLocaleString('en-US')} payouts` +
          (m.id.startsWith('ack') && failed ? ` (${failed} non-2xx or errors!)` : ''),
        db: key,
        value: round(value, m.unit === 'rows/s' ? 0 : 2),
        unit: m.unit,
        target:
          isEmpty || bound === null
            ? isEmpty
              ? 'baseline'
              : 'no empty-ledger baseline'
            : `${m.rate ? '>=' : '<='} ${round(bound, 2)} (${GROWTH.factor}x empty)`,
        pass:
          isEmpty || bound === null
            ? null
            : (m.rate ? value >= bound : value <= bound) && (!m.id.startsWith('ack') || !failed),
      })
    }
  }
  if (r.prune) {
    const p = r.prune
    const what = key.startsWith('sqlite') ? 'database file size' : 'inbox size (table and indexes)'
    checks.push({
      id: `${key}.growth.prune.inbox_bytes_after`,
      measure:
        `${what} after payouts:prune (${p.removed.toLocaleString('en-US')} of ` +
        `${p.inboxRowsBefore.toLocaleString('en-US')} rows past 30 days removed in ${p.seconds.toFixed(0)} s; ` +
        `${mb(p.bytesBefore)} MB before` +
        (p.bytesAfterVacuum === null ? '' : `, ${mb(p.bytesAfterVacuum)} MB after VACUUM`) +
        ')',
      db: key,
      value: mb(p.bytesAfterPrune),
      unit: 'MB',
      target: '',
      pass: null,
    })
    // Without reuse the fresh rows would add what as many rows took before the prune.
    const perRow = p.bytesBefore / p.inboxRowsBefore
    const freed = p.bytesAfterVacuum ?? p.bytesAfterPrune
    const reused = 1 - (p.refill.bytes - freed) / (p.refill.rows * perRow)
    checks.push({
      id: `${key}.growth.prune.inbox_bytes_after_refill`,
      measure:
        `${what} after ${p.refill.rows.toLocaleString('en-US')} fresh rows inserted after the prune ` +
        `(${Math.round(Math.min(1, Math.max(0, reused)) * 100)}% of their size went into freed space)`,
      db: key,
      value: mb(p.refill.bytes),
      unit: 'MB',
      target: '',
      pass: null,
    })
  }
  if (r.notRun) {
    checks.push({
      id: `${key}.growth.not_run`,
      measure: 'ledger sizes not measured on this store',
      db: key,
      value: null,
      unit: '',
      target: r.notRun,
      pass: null,
    })
  }
  return checks
}

/** The largest size a store runs (GROWTH_MAX_PG=100000, ...), or all of them. */
function sizesFor(key: string): { sizes: number[]; notRun?: string } {
  const cap = process.env[`GROWTH_MAX_${key.replace(/\W/g, '_').toUpperCase()}`]
  if (cap === undefined) return { sizes: SIZES }
  const sizes = SIZES.filter((s) => s <= Number(cap))
  const dropped = SIZES.filter((s) => s > Number(cap))
  return {
    sizes,
    notRun: dropped.length
      ? `${dropped.join(', ')} payouts not run on this store (capped at ${cap}: seeding takes too long for the run's bound on this machine; see docs/benchmarks.md)`
      : undefined,
  }
}

async function main() {
  const watchdog = setTimeout(() => {
    console.error(`bench:growth: hard cap of ${HARD_CAP_MS / 60_000} min reached, aborting`)
    process.exit(2)
  }, HARD_CAP_MS)
  watchdog.unref()
  mkdirSync(TMP, { recursive: true })
  log(
    `bench:growth: node ${process.version}, ${os.cpus().length} cpus, sizes ${SIZES.join(', ')} payouts` +
      ` (${GROWTH.eventsPerPayout} events and ${GROWTH.inboxPerPayout} inbox rows each), stores ${DB_KEYS.join(', ')}`
  )
  const stores: Record<string, StoreResult> = {}
  const before = readPrevious()
  const configs = DB_KEYS.map((key) => STORES.find((c) => c.key === key)).filter(
    (c) => c !== undefined
  )
  for (const config of configs) {
    log(`[${elapsed()}] ${config.key}: ${config.label}`)
    const skipped = await unavailable(config)
    if (skipped) {
      log(`  skipped: ${skipped}`)
      stores[config.key] = { label: config.label, sizes: [], skipped }
      continue
    }
    const { sizes, notRun } = sizesFor(config.key)
    try {
      stores[config.key] = await benchStore(config, sizes)
    } catch (error) {
      log(`  failed: ${(error as Error).stack}`)
      stores[config.key] = { label: config.label, sizes: [], error: (error as Error).message }
    }
    if (notRun) stores[config.key].notRun ??= notRun
    // Written after each store: a run stopped later keeps what it measured.
    await writeResults(checksOf(stores), stores, before)
  }
  const checks = checksOf(stores)

  const misses = checks.filter((c) => c.pass === false)
  log('')
  for (const c of checks) {
    const verdict = c.pass === null ? 'info' : c.pass ? 'PASS' : 'MISS'
    log(
      `  ${verdict.padEnd(4)} ${c.db.padEnd(10)} ${c.measure}: ${c.value ?? '-'} ${c.unit} ${c.target}`
    )
  }
  log(misses.length === 0 ? 'All growth targets met.' : `${misses.length} growth target(s) missed.`)
  log(`bench:growth finished in ${elapsed()}; figures in ${RESULTS.pathname}`)
}

/** bench/results.json as it was before this run. */
function readPrevious(): any {
  if (!existsSync(RESULTS)) return {}
  try {
    return JSON.parse(readFileSync(RESULTS, 'utf8'))
  } catch {
    return {}
  }
}

/** The growth rows of every store. */
function checksOf(stores: Record<string, StoreResult>): Check[] {
  return Object.entries(stores).flatMap(([key, r]) => growthChecks(key, r))
}

/**
 * Replaces the growth rows and the `growth` section of bench/results.json, keeping every
 * other row of the last `npm run bench`.
 */
async function writeResults(checks: Check[], stores: Record<string, StoreResult>, before: any) {
  const date = new Date().toISOString()
  // The stores this run did not measure keep their last figures (and the date of those).
  const previous: Record<string, StoreResult> = before.growth?.results ?? {}
  const others = Object.fromEntries(
    Object.entries(previous)
      .filter(([key]) => !(key in stores))
      .map(([key, r]) => [key, { ...r, measuredAt: r.measuredAt ?? before.growth?.date }])
  )
  const measured = Object.fromEntries(
    Object.entries(stores).map(([key, r]) => [key, { ...r, measuredAt: date }])
  )
  const kept = (Array.isArray(before.checks) ? before.checks : []).filter(
    (c: Check) => !c.id.includes('growth') || (c.db in others && !(c.db in stores))
  )
  const history = Array.isArray(before.growth?.history) ? before.growth.history : []
  const output = {
    ...before,
    checks: [...kept, ...checks],
    growth: {
      date,
      node: process.version,
      cpus: os.cpus().length,
      loadavgAtEnd: os.loadavg().map((x) => round(x, 2)),
      durationS: round((Date.now() - startedAt) / 1000, 1),
      settings: { ...GROWTH, sizes: SIZES, stores: DB_KEYS },
      notes: [
        "Seeded in bulk: INSERT ... SELECT per table (generate_series on PostgreSQL, a recursive CTE on SQLite, MariaDB's SEQUENCE engine in statements of 100,000 rows on MySQL/MariaDB), then VACUUM ANALYZE on PostgreSQL and ANALYZE TABLE on MySQL (what autovacuum and InnoDB's statistics do over time, done before the measures rather than during them; SQLite keeps no statistics unless the app runs ANALYZE).",
        "MySQL/MariaDB: innodb_buffer_pool_size raised to 12 GB and the redo log to 1 GB for the run (InnoDB caches only in its pool, with O_DIRECT; PostgreSQL and SQLite also have the OS page cache, 18 GB free on this machine), restored after; results.mysql.server has both. After seeding, and after the reconciliation measure's bulk update, InnoDB's dirty pages are flushed and its purge waited for (the analogue of the checkpoint on SQLite and VACUUM on PostgreSQL).",
        'Per payout: 7 payout_events rows, 10 processed inbox rows (600-byte bodies), an escrow deposit for one in three; one in 50 payouts in flight (observed within the last minute), one in 5,000 stuck.',
        'Ack runs post unique signed deliveries of new payouts at 500/s over 20 connections for 4 s; the deferred run leaves the backlog the drain then processes.',
        'Reconciliation: every in-flight payout observed just before the pass (steady state), so a pass is its query; it reads the service for none.',
      ],
      results: { ...others, ...measured },
      history: [
        ...history,
        { date, values: Object.fromEntries(checks.map((c) => [c.id, c.value])) },
      ].slice(-10),
    },
  }
  const prettierConfig = await resolveConfig(RESULTS.pathname)
  writeFileSync(
    RESULTS,
    await format(JSON.stringify(output), { ...prettierConfig, parser: 'json' })
  )
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
