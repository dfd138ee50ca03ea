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
 * table's size before and after. Target: each figure within 1.25x of the empty ledger's, at
 * the largest size (the smaller ones are reported beside their lines, without a verdict).
 *
 * At the largest size a second app, whose ledger on the same store is empty, is measured
 * alongside: acknowledgement runs alternating with the grown ledger's (judged round by round),
 * its drain just before the grown ledger's, the reads in alternating rounds. Each figure is
 * judged against the empty ledger's of the same minutes, not of ten minutes and a seed earlier
 * (a single run's p99 on this shared 2-core machine moves by 2x; GROWTH_PAIR_EMPTY=1 pairs the
 * empty size too, two empty ledgers, to show the method's own spread: docs/benchmarks.md).
 *
 * GROWTH_SIZES=0,100000,1000000 (payouts; 7 events and 10 inbox rows each) and
 * GROWTH_DBS=sqlite-wal,pg,mysql choose what runs; GROWTH_MAX_<DB>=n caps a store's size.
 * A run of some stores keeps the last figures of the others in bench/results.json, each
 * store with the date it was measured.
 *
 * SQLite is opened with a memory map for reads (see SQLITE_MMAP_MB).
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
/**
 * The size the targets are judged at (the 1,000,000 payouts in a default run); the
 * figures of the smaller sizes are reported beside their lines, without a verdict.
 */
const JUDGED = Math.max(...SIZES)
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
  /**
   * Each acknowledgement measure: this many fixed-rate runs of `fixedS` seconds on each side
   * (GROWTH_ACK_RUNS, GROWTH_FIXED_S for experiments).
   */
  fixedS: Number(process.env.GROWTH_FIXED_S ?? 2),
  ackRuns: Number(process.env.GROWTH_ACK_RUNS ?? 11),
  /** The sizes not judged (see JUDGED) run this many, unpaired. */
  infoRuns: Number(process.env.GROWTH_INFO_RUNS ?? 5),
  /** The start of each run left out of its latencies (see loadRoute's rampMs). */
  rampMs: 250,
  drainMs: 20_000,
  reconcileTimes: 5,
  /** Rounds of the reads (reconciliation, health, payout read) beside the empty ledger. */
  readRounds: 3,
  healthTimes: 5,
  readTimes: 200,
  /** How far over the empty ledger's figure a size may be. */
  factor: 1.25,
}

/**
 * SQLite: its pages read through a memory map of this size (BENCH_SQLITE_MMAP_MB, which the
 * app children inherit; 2047 MB, under better-sqlite3's build limit of 2 GB), as
 * docs/production.md advises for a large ledger on SQLite: a page not in SQLite's own cache
 * (16 MB per connection) is then read without a system call. The analogue of MySQL's buffer pool.
 */
const SQLITE_MMAP_MB = (process.env.BENCH_SQLITE_MMAP_MB ??= '2047')

const STORES: DbConfig[] = [
  {
    key: 'sqlite-wal',
    db: 'sqlite',
    wal: true,
    label: `SQLite, WAL + synchronous=NORMAL + mmap_size ${SQLITE_MMAP_MB} MB`,
  },
  { key: 'pg', db: 'pg', wal: false, label: 'PostgreSQL 127.0.0.1:5432 (pool 2..10)' },
  { key: 'mysql', db: 'mysql', wal: false, label: 'MySQL/MariaDB 127.0.0.1:3306 (pool 2..10)' },
]

/** The runs of one acknowledgement measure on one ledger (see ackMeasure). */
type AckResult = LoadResult & { p99s: number[]; p99Median: number }

/** The figures of one ledger at one moment. */
interface Measures {
  ack: AckResult
  drain: { rows: number; seconds: number; rowsPerSecond: number }
  ackProcessing: AckResult
  reconcile: { medianMs: number; maxMs: number; checked: number }
  health: { medianMs: number; maxMs: number }
  payoutRead: { medianMs: number; maxMs: number; found: number; n: number }
}

/** What one size measured on one store. */
interface SizeResult extends Measures {
  payouts: number
  seedSeconds: number
  rows: Record<string, number>
  /**
   * At the size judged: the same measures on an empty ledger of the same store, taken
   * alongside (acknowledgement runs and read rounds alternating, its drain just before this
   * size's): what this size's figures are judged against.
   */
  empty?: Measures
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

/** The runs of one side, summed up: answers added, samples pooled, and each run's p99. */
function ackResult(runs: LoadRun[]): AckResult {
  const p99s = runs.map((run) => run.latency.p99)
  return { ...pool(runs), p99s, p99Median: median(p99s) }
}

/** One fixed-rate run of the plugin route of `child`. */
function fixedRun(child: Child<{ url: string }>, tag: string, durationS = GROWTH.fixedS) {
  return loadRoute({
    url: child.ready.url,
    path: ROUTES.plugin,
    tag,
    durationS,
    connections: GROWTH.connections,
    overallRate: GROWTH.rate,
    rampMs: GROWTH.rampMs,
  })
}

/**
 * One acknowledgement measure: `runs` fixed-rate runs on the ledger measured and,
 * when there is a `baseline` app (an empty ledger on the same store), as many on it, the two
 * alternating in ABBA order (baseline first in even rounds, last in odd ones), so that both
 * sides meet the same minute of this shared machine. Each side's figure is the median of its
 * runs' p99s, and the verdict the median of the rounds' ratios (growthChecks): one run's p99 is
 * its 1% slowest answers, which one stall (a commit's fsync, a checkpoint, a collection) makes,
 * and it moves by 2x between runs here; a figure measured ten minutes earlier, before a seed,
 * meets other stalls than the one it is compared with.
 */
async function ackMeasure(
  child: Child<{ url: string }>,
  baseline: Child<{ url: string }> | null,
  tag: string,
  runs: number
): Promise<{ subject: AckResult; baseline?: AckResult }> {
  const subject: LoadRun[] = []
  const base: LoadRun[] = []
  for (let i = 0; i < runs; i++) {
    if (baseline && i % 2 === 0) base.push(await fixedRun(baseline, `${tag}_base`))
    subject.push(await fixedRun(child, tag))
    if (baseline && i % 2 === 1) base.push(await fixedRun(baseline, `${tag}_base`))
  }
  return baseline
    ? { subject: ackResult(subject), baseline: ackResult(base) }
    : { subject: ackResult(subject) }
}

/**
 * Every measure at the current size; the acknowledgement measures alternate with `baseline`'s
 * runs when there is one.
 */
async function measureSize(
  child: Child<{ url: string }>,
  baseline: Child<{ url: string }> | null,
  payouts: number,
  seedSeconds: number
): Promise<SizeResult> {
  const apps = baseline ? [child, baseline] : [child]
  const all = (fn: (app: Child<{ url: string }>) => Promise<unknown>) => Promise.all(apps.map(fn))
  const rows = await child.call<Record<string, number>>('rows', undefined, 600_000)
  await all((app) => app.call('processing', { on: false }))
  // Warm-up: connections, JIT, the pages of the inbox's newest end.
  for (const app of apps) await fixedRun(app, 'warm', 1)
  await all((app) => app.call('settle', undefined, 120_000))
  const runs = baseline ? GROWTH.ackRuns : GROWTH.infoRuns
  const deferred = await ackMeasure(child, baseline, 'growth_ack', runs)
  const ack = deferred.subject
  // The baseline's deferred runs left it a backlog too: its drain is the line's base, and it
  // runs first. A drain leaves the store work of its own (a checkpoint, autovacuum, a purge)
  // that slows the one after it: on two empty ledgers, the second drained 3 to 13% slower.
  const drainOf = (app: Child<{ url: string }>) =>
    app.call<SizeResult['drain']>('drainBacklog', { ms: GROWTH.drainMs }, GROWTH.drainMs + 120_000)
  const drainBaseline = baseline ? await drainOf(baseline) : undefined
  const drain = await drainOf(child)
  await all((app) => app.call('settle', undefined, 120_000))
  await all((app) => app.call('processing', { on: true }))
  const inline = await ackMeasure(child, baseline, 'growth_proc', runs)
  const ackProcessing = inline.subject
  await all((app) => app.call('processing', { on: false }))
  await all((app) => app.call('settle', undefined, 120_000))
  // Beside an empty ledger: three rounds on each, alternating (ABBA), the median of each
  // figure over its side's rounds.
  const subjectRounds: ReadFigures[] = []
  const emptyRounds: ReadFigures[] = []
  for (let i = 0; i < (baseline ? GROWTH.readRounds : 1); i++) {
    if (baseline && i % 2 === 0) emptyRounds.push(await readMeasures(baseline, i))
    subjectRounds.push(await readMeasures(child, i))
    if (baseline && i % 2 === 1) emptyRounds.push(await readMeasures(baseline, i))
  }
  const reads = combineReads(subjectRounds)
  const emptyReads = baseline ? combineReads(emptyRounds) : undefined
  const { reconcile, health, payoutRead } = reads
  const p99s = (r: AckResult) =>
    `${r.p99Median.toFixed(1)} ms (${r.p99s.map((x) => x.toFixed(1)).join(', ')})`
  const beside = (text?: string) => (text === undefined ? '' : ` [empty alongside: ${text}]`)
  const ms = (value: number | undefined, digits = 1) => value?.toFixed(digits)
  log(
    `    [${elapsed()}] ${payouts} payouts: ack p99 ${p99s(ack)}${beside(deferred.baseline && p99s(deferred.baseline))},` +
      ` inline ${p99s(ackProcessing)}${beside(inline.baseline && p99s(inline.baseline))},` +
      ` drain ${drain.rowsPerSecond.toFixed(0)} rows/s${beside(drainBaseline?.rowsPerSecond.toFixed(0))},` +
      ` reconcile ${ms(reconcile.medianMs)} ms${beside(ms(emptyReads?.reconcile.medianMs))},` +
      ` health ${ms(health.medianMs)} ms${beside(ms(emptyReads?.health.medianMs))},` +
      ` read ${ms(payoutRead.medianMs, 2)} ms${beside(ms(emptyReads?.payoutRead.medianMs, 2))}`
  )
  return {
    payouts,
    seedSeconds,
    rows,
    ack,
    drain,
    ackProcessing,
    ...reads,
    ...(deferred.baseline &&
      inline.baseline &&
      drainBaseline &&
      emptyReads && {
        empty: {
          ack: deferred.baseline,
          drain: drainBaseline,
          ackProcessing: inline.baseline,
          ...emptyReads,
        },
      }),
  }
}

type ReadFigures = Pick<Measures, 'reconcile' | 'health' | 'payoutRead'>

/** Rounds of the read measures as one: each figure the median over the rounds. */
function combineReads(rounds: ReadFigures[]): ReadFigures {
  if (rounds.length === 1) return rounds[0]
  const mid = (pick: (r: ReadFigures) => number) => median(rounds.map(pick))
  const max = (pick: (r: ReadFigures) => number) => Math.max(...rounds.map(pick))
  return {
    reconcile: {
      medianMs: mid((r) => r.reconcile.medianMs),
      maxMs: max((r) => r.reconcile.maxMs),
      checked: rounds[0].reconcile.checked,
    },
    health: { medianMs: mid((r) => r.health.medianMs), maxMs: max((r) => r.health.maxMs) },
    payoutRead: {
      medianMs: mid((r) => r.payoutRead.medianMs),
      maxMs: max((r) => r.payoutRead.maxMs),
      found: rounds.reduce((n, r) => n + r.payoutRead.found, 0),
      n: rounds.reduce((n, r) => n + r.payoutRead.n, 0),
    },
  }
}

/** The reconciliation pass, the health report and a payout read, on one app (`rounds` before). */
async function readMeasures(app: Child<{ url: string }>, rounds = 0): Promise<ReadFigures> {
  const reconcile = await app.call<Measures['reconcile']>(
    'reconcile',
    { times: GROWTH.reconcileTimes },
    600_000
  )
  const health = await app.call<Measures['health'] & { report: unknown }>(
    'health',
    { times: GROWTH.healthTimes },
    600_000
  )
  const payoutRead = await app.call<Measures['payoutRead']>(
    'payoutRead',
    { times: GROWTH.readTimes, round: rounds },
    600_000
  )
  return {
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

/**
 * The store's ledger app, grown size by size, and beside it a second app on an empty ledger of
 * the same store (its own SQLite file, or its own tables) whose acknowledgement runs alternate
 * with the grown ledger's: the baseline its p99s are judged against. GROWTH_PAIR_EMPTY=1 pairs
 * the empty size too: two empty ledgers, the method's own spread.
 */
async function benchStoreSized(config: DbConfig, sizes: number[]): Promise<StoreResult> {
  const pairEmpty = process.env.GROWTH_PAIR_EMPTY === '1'
  if (!sizes.some((size) => (size > 0 && size === JUDGED) || pairEmpty)) {
    return grow(config, sizes, null)
  }
  return withApp(
    config,
    async (baseline) => {
      await baseline.call('seed', { from: 0, to: 0, horizon: 1, ...GROWTH }, 600_000)
      return grow(config, sizes, baseline)
    },
    [],
    `${config.key}-empty`
  )
}

async function grow(
  config: DbConfig,
  sizes: number[],
  baseline: Child<{ url: string }> | null
): Promise<StoreResult> {
  const pairEmpty = process.env.GROWTH_PAIR_EMPTY === '1'
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
      const pair = (size > 0 && size === JUDGED) || pairEmpty ? baseline : null
      result.sizes.push(await measureSize(child, pair, size, seconds))
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

/** The median of `sides[i] / bases[i]` over the rounds (the middle two averaged when even). */
function roundRatio(sides: number[], bases: number[]): number {
  const ratios = sides.map((value, i) => value / bases[i]).sort((a, b) => a - b)
  const middle = Math.floor(ratios.length / 2)
  return ratios.length % 2 ? ratios[middle] : (ratios[middle - 1] + ratios[middle]) / 2
}

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
    value: (s: Measures) => number
    /** Higher is better (a rate): the target is the empty figure divided by the factor. */
    rate?: boolean
    /** The acknowledgement runs of a side, to be compared round by round. */
    runs?: (s: Measures) => number[]
  }> = [
    {
      id: 'ack_p99',
      measure: `ack p99 @${GROWTH.rate}/s, processing deferred, median of the runs' p99s`,
      unit: 'ms',
      value: (s) => s.ack.p99Median,
      runs: (s) => s.ack.p99s,
    },
    {
      id: 'ack_inline_p99',
      measure: `ack p99 @${GROWTH.rate}/s, processing inline, median of the runs' p99s`,
      unit: 'ms',
      value: (s) => s.ackProcessing.p99Median,
      runs: (s) => s.ackProcessing.p99s,
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
      // The empty ledger's figure measured alongside this size's, when it was.
      const paired = s.empty ? m.value(s.empty) : undefined
      const base = paired ?? (empty ? m.value(empty) : null)
      const value = m.value(s)
      const failed = [s.ack, s.ackProcessing, s.empty?.ack, s.empty?.ackProcessing].reduce(
        (n, run) => n + (run ? run.non2xx + run.errors : 0),
        0
      )
      const bound = base === null ? null : m.rate ? base / GROWTH.factor : base * GROWTH.factor
      const isEmpty = s.payouts === 0 && paired === undefined
      const judged = !isEmpty && s.payouts === JUDGED
      const runs = m.id === 'ack_inline_p99' ? s.ackProcessing.p99s.length : s.ack.p99s.length
      // Acknowledgement runs alternating with the empty ledger's: judged round by round, on the
      // median of each round's p99 over its neighbour's (what the hour's slow and quiet minutes
      // do to both sides cancels out there, not in a ratio of the two sides' medians).
      const ratio = s.empty && m.runs ? roundRatio(m.runs(s), m.runs(s.empty)) : undefined
      checks.push({
        id: `${key}.growth.${s.payouts}.${m.id}`,
        measure:
          `${m.measure}, ${s.payouts.toLocaleString('en-US')} payouts` +
          (m.id.startsWith('ack') ? ` (${runs} runs)` : '') +
          (m.id.startsWith('ack') && failed ? ` (${failed} non-2xx or errors!)` : ''),
        db: key,
        value: round(value, m.unit === 'rows/s' ? 0 : 2),
        unit: m.unit,
        target:
          isEmpty || bound === null
            ? isEmpty
              ? 'baseline'
              : 'no empty-ledger baseline'
            : (judged ? '' : 'info, judged at the largest size; ') +
              (ratio === undefined
                ? `${m.rate ? '>=' : '<='} ${round(bound, 2)} (${GROWTH.factor}x empty` +
                  (paired === undefined
                    ? ')'
                    : `: ${round(paired, m.unit === 'rows/s' ? 0 : 2)} on an empty ledger measured alongside)`)
                : `round by round <= ${GROWTH.factor}x the empty ledger's runs alongside ` +
                  `(median ${round(paired!, 2)} ms): median ratio ${round(ratio, 2)}`),
        pass:
          !judged || bound === null
            ? null
            : (ratio === undefined
                ? m.rate
                  ? value >= bound
                  : value <= bound
                : ratio <= GROWTH.factor) &&
              (!m.id.startsWith('ack') || !failed),
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
        `SQLite WAL: PRAGMA mmap_size = ${SQLITE_MMAP_MB} MB on each connection (docs/production.md, a large ledger on SQLite): without it a read of a payout not read since the seed took 0.178 ms at 1,000,000 payouts against 0.085 empty (run of 2026-11-24 03:58 UTC), its pages in the OS page cache but not in SQLite's own 16 MB.`,
        'Per payout: 7 payout_events rows, 10 processed inbox rows (600-byte bodies), an escrow deposit for one in three; one in 50 payouts in flight (observed within the last minute), one in 5,000 stuck.',
        `Each acknowledgement measure: runs of ${GROWTH.fixedS} s posting unique signed deliveries of new payouts at ${GROWTH.rate}/s over ${GROWTH.connections} connections, the first ${GROWTH.rampMs} ms of each run (the connections opening at once) left out of its latencies; the figure is the median of the runs' p99s. At the size judged (the largest), ${GROWTH.ackRuns} runs alternate (ABBA order) with as many on an app with an empty ledger of the same store, whose figure is the line's base; the other sizes run ${GROWTH.infoRuns}, reported without a verdict. The deferred runs leave the backlog the drain then processes.`,
        'Reconciliation: every in-flight payout observed just before the pass, and the routing detail of every payout that ended within the window already read (steady state), so a pass is its queries; it reads the service for none.',
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
