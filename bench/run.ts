import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import knex from 'knex'
import { format, resolveConfig } from 'prettier'
import { PG_CONNECTION, ROUTES, type BenchDb } from './app.ts'
import { measureClientOverhead, type ClientOverheadResult } from './client_overhead.ts'
import { measureFanout, type FanoutResult } from './fanout.ts'
import { measureIngest, type IngestResult, type IngestSettings } from './ingest.ts'
import { startChild, type Child } from './ipc.ts'
import { measureMemory, type MemoryResult } from './memory.ts'
import { round } from './stats.ts'

/**
 * `npm run bench`: webhook ingest, fan-out, client overhead and memory, each comparison
 * measured side by side in this run on this machine, on 127.0.0.1 only, every loop
 * bounded in count and time. Prints a table and writes bench/results.json.
 */

const QUICK = process.env.BENCH_QUICK === '1'
// BENCH_ONLY=ingest,client,memory and BENCH_DBS=sqlite,sqlite-wal,pg run a part (development).
const ONLY = new Set((process.env.BENCH_ONLY ?? 'ingest,client,memory').split(','))
const DBS = process.env.BENCH_DBS ? new Set(process.env.BENCH_DBS.split(',')) : null
const PARTIAL = process.env.BENCH_ONLY !== undefined || DBS !== null
const HARD_CAP_MS = 10 * 60_000
const TMP = new URL('./tmp/', import.meta.url)
// Quick and partial runs (development) never touch the committed figures.
const RESULTS =
  QUICK || PARTIAL
    ? new URL('./tmp/results-quick.json', import.meta.url)
    : new URL('./results.json', import.meta.url)
const APP_SERVER = new URL('./app_server.ts', import.meta.url)
const EMULATOR_SERVER = new URL('./emulator_server.ts', import.meta.url)

const INGEST: IngestSettings = {
  connections: 16,
  warmupS: 1,
  rounds: 5,
  roundS: QUICK ? 1 : 2,
  fixedRate: 500,
  fixedConnections: 20,
  fixedS: QUICK ? 2 : 4,
  drainMs: QUICK ? 1000 : 3000,
}
const FANOUT = { deliveries: QUICK ? 60 : 300, warmup: 20, perMessageTimeoutMs: 2000 }
const CLIENT = { calls: 1000, warmup: 200, rounds: QUICK ? 3 : 11 }
const MEMORY = {
  marks: QUICK ? [1000, 5000, 10_000] : [1000, 10_000, 50_000, 100_000],
  concurrency: 16,
  budgetMs: QUICK ? 30_000 : 120_000,
}

// The memory target is measured on these stores (see CONFIGS).
const MEMORY_DBS = ['sqlite-wal', 'pg']

interface MemoryRuns {
  plugin: MemoryResult | { error: string }
  insert: MemoryResult | { error: string }
  bare: MemoryResult | { error: string }
  /** SQLite's page cache limit for one connection, MB; null on PostgreSQL. */
  sqlitePageCacheMB: number | null
}

/** PRAGMA cache_size as the app opens SQLite: negative is KiB, positive is pages. */
async function sqlitePageCacheLimitMB(child: Child<{ url: string }>): Promise<number> {
  const pragmas = await child.call<{ cacheSize: number; pageSize: number }>('sqlitePragmas')
  const bytes =
    pragmas.cacheSize < 0 ? -pragmas.cacheSize * 1024 : pragmas.cacheSize * pragmas.pageSize
  return bytes / (1024 * 1024)
}

interface DbConfig {
  key: string
  db: BenchDb
  wal: boolean
  label: string
}

const CONFIGS: DbConfig[] = [
  {
    key: 'sqlite',
    db: 'sqlite',
    wal: false,
    label: 'SQLite as Lucid opens it (rollback journal, synchronous=FULL)',
  },
  { key: 'sqlite-wal', db: 'sqlite', wal: true, label: 'SQLite, WAL + synchronous=NORMAL' },
  { key: 'pg', db: 'pg', wal: false, label: 'PostgreSQL 127.0.0.1:5432 (pool 2..10)' },
]

interface Check {
  id: string
  measure: string
  db: string
  value: number | null
  unit: string
  target: string
  /** true / false against the target, null for figures reported without a target. */
  pass: boolean | null
}

const log = (line: string) => console.log(line)
const started = Date.now()
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(0)}s`

function sqliteFile(name: string) {
  return new URL(`./${name}-${process.pid}.sqlite`, TMP).pathname
}

function removeSqlite(file: string) {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(file + suffix, { force: true })
}

/** Whether PostgreSQL answers on 127.0.0.1 within 3 s; the reason when it does not. */
/** Why a configuration cannot run here (PostgreSQL away), or null. */
async function unavailable(config: DbConfig): Promise<string | null> {
  if (config.db !== 'pg') return null
  const reason = await pgAvailable()
  return reason ? `PostgreSQL unavailable: ${reason}` : null
}

async function pgAvailable(): Promise<string | null> {
  const client = knex({
    client: 'pg',
    connection: { ...PG_CONNECTION, connectionTimeoutMillis: 3000 } as any,
    pool: { min: 0, max: 1 },
    acquireConnectionTimeout: 3000,
  })
  try {
    await client.raw('select 1')
    return null
  } catch (error) {
    return (error as Error).message
  } finally {
    await client.destroy().catch(() => {})
  }
}

async function withApp<T>(
  config: DbConfig,
  fn: (child: Child<{ url: string }>) => Promise<T>,
  execArgv: string[] = []
): Promise<T> {
  const file = sqliteFile(config.key)
  removeSqlite(file)
  const child = await startChild<{ url: string }>(APP_SERVER, {
    args: [config.db, file, ...(config.wal ? ['--wal'] : [])],
    execArgv,
  })
  try {
    return await fn(child)
  } finally {
    await child.stop()
    removeSqlite(file)
  }
}

interface DbResults {
  label: string
  sqlite?: { journalMode: string; synchronous: number; cacheSize: number; pageSize: number } | null
  ingest?: IngestResult
  fanout?: FanoutResult
  fanoutError?: string
  skipped?: string
  error?: string
}

async function benchDb(config: DbConfig): Promise<DbResults> {
  const results: DbResults = { label: config.label }
  await withApp(config, async (child) => {
    results.sqlite = await child.call('sqlitePragmas')
    log(`  [${elapsed()}] ingest: 3 routes x ${INGEST.rounds} rounds x ${INGEST.roundS}s`)
    results.ingest = await measureIngest(child, INGEST, log)
    log(`  [${elapsed()}] fan-out: ${FANOUT.deliveries} sequential deliveries`)
    try {
      results.fanout = await measureFanout({ child, ...FANOUT, budgetMs: 60_000 })
    } catch (error) {
      results.fanoutError = (error as Error).message
      log(`  fan-out failed: ${results.fanoutError}`)
    }
  })
  return results
}

function ingestChecks(key: string, r: DbResults): Check[] {
  if (!r.ingest) {
    return [
      {
        id: `${key}.skipped`,
        measure: 'webhook ingest and fan-out',
        db: key,
        value: null,
        unit: '',
        target: `skipped: ${r.skipped ?? r.error}`,
        pass: r.error ? false : null,
      },
    ]
  }
  const i = r.ingest
  const failures = (route: 'plugin' | 'insert' | 'bare') => {
    const n = i.rounds.reduce((sum, x) => sum + x[route].non2xx + x[route].errors, 0)
    return n ? ` (${n} non-2xx or errors!)` : ''
  }
  const fixedNote = (x: { okPerSecond: number; non2xx: number; errors: number }) =>
    `${x.okPerSecond.toFixed(0)}/s achieved` +
    (x.non2xx + x.errors ? `, ${x.non2xx} non-2xx, ${x.errors} errors` : '')
  return [
    {
      id: `${key}.ingest.plugin_rps`,
      measure: `ingest max: plugin route (verify+insert+ack)${failures('plugin')}`,
      db: key,
      value: round(i.okPerSecond.plugin, 0),
      unit: '/s',
      target: '',
      pass: null,
    },
    {
      id: `${key}.ingest.insert_rps`,
      measure: `ingest max: insert-only route${failures('insert')}`,
      db: key,
      value: round(i.okPerSecond.insert, 0),
      unit: '/s',
      target: '',
      pass: null,
    },
    {
      id: `${key}.ingest.bare_rps`,
      measure: `ingest max: bare route (reads body, 200)${failures('bare')}`,
      db: key,
      value: round(i.okPerSecond.bare, 0),
      unit: '/s',
      target: '',
      pass: null,
    },
    {
      id: `${key}.ingest.plugin_vs_insert`,
      measure: `ratio plugin / insert-only, median of rounds ${i.perRoundPluginVsInsert.map((x) => x.toFixed(2)).join(' ')}`,
      db: key,
      value: round(i.pluginVsInsert, 4),
      unit: 'x',
      target: '>= 0.8',
      pass: i.pluginVsInsert >= 0.8,
    },
    {
      id: `${key}.ingest.plugin_vs_bare`,
      measure: 'ratio plugin / bare (median of rounds)',
      db: key,
      value: round(i.pluginVsBare, 4),
      unit: 'x',
      target: '',
      pass: null,
    },
    {
      id: `${key}.ack.p50`,
      measure: `ack latency p50 @${INGEST.fixedRate}/s, plugin (${fixedNote(i.fixedPlugin)})`,
      db: key,
      value: round(i.fixedPlugin.latency.p50, 2),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: `${key}.ack.p99`,
      measure: `ack latency p99 @${INGEST.fixedRate}/s, plugin`,
      db: key,
      value: round(i.fixedPlugin.latency.p99, 2),
      unit: 'ms',
      target: '< 20',
      pass:
        i.fixedPlugin.latency.p99 < 20 && i.fixedPlugin.non2xx === 0 && i.fixedPlugin.errors === 0,
    },
    {
      id: `${key}.ack.insert_p99`,
      measure: `p99 @${INGEST.fixedRate}/s, insert-only route (baseline; p50 ${i.fixedInsert.latency.p50.toFixed(2)})`,
      db: key,
      value: round(i.fixedInsert.latency.p99, 2),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: `${key}.ack.in_app_p99`,
      measure:
        `in-app handling p99 @${INGEST.fixedRate}/s, plugin (insert-only ` +
        `${i.fixedInsert.server.handling.p99.toFixed(2)}; event-loop delay max ` +
        `${Math.max(i.fixedPlugin.server.loopDelayMaxMs, i.fixedInsert.server.loopDelayMaxMs).toFixed(1)})`,
      db: key,
      value: round(i.fixedPlugin.server.handling.p99, 2),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: `${key}.ack.processing_p99`,
      measure:
        `ack p99 @${INGEST.fixedRate}/s, plugin, inbox processed in-process ` +
        `(${fixedNote(i.fixedPluginProcessing)}, backlog ${i.fixedPluginProcessing.backlogAfter})`,
      db: key,
      value: round(i.fixedPluginProcessing.latency.p99, 2),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: `${key}.inbox.drain_rps`,
      measure: 'inbox drain from a backlog (claim, ledger apply, mark)',
      db: key,
      value: round(i.drain.rowsPerSecond, 0),
      unit: 'rows/s',
      target: '',
      pass: null,
    },
    ...fanoutChecks(key, r),
  ]
}

function fanoutChecks(key: string, r: DbResults): Check[] {
  const f = r.fanout
  if (!f) {
    return [
      {
        id: `${key}.fanout.p99`,
        measure: `fan-out: failed, ${r.fanoutError}`,
        db: key,
        value: null,
        unit: '',
        target: '< 25',
        pass: false,
      },
    ]
  }
  return [
    {
      id: `${key}.fanout.p50`,
      measure: `fan-out POST -> Transmit subscriber p50 (${f.received}/${f.deliveries} received)`,
      db: key,
      value: round(f.latency.p50, 2),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: `${key}.fanout.p99`,
      measure:
        'fan-out POST -> Transmit subscriber p99' +
        (f.missed ? `, ${f.missed} missed` : '') +
        (f.timedOut ? ', time cap hit' : ''),
      db: key,
      value: round(f.latency.p99, 2),
      unit: 'ms',
      target: '< 25',
      pass: f.latency.p99 < 25 && f.missed === 0 && !f.timedOut,
    },
  ]
}

function clientChecks(c: ClientOverheadResult | { error: string }): Check[] {
  if ('error' in c) {
    return [
      {
        id: 'client.ratio',
        measure: 'client overhead',
        db: 'emulator',
        value: null,
        unit: '',
        target: `failed: ${c.error}`,
        pass: false,
      },
    ]
  }
  return [
    {
      id: 'client.mean',
      measure: `getPayout via PayoutsClient, mean per call (p50 ${c.client.p50.toFixed(3)})`,
      db: 'emulator',
      value: round(c.client.mean, 3),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: 'client.raw_mean',
      measure: `raw undici GET, mean per call (p50 ${c.raw.p50.toFixed(3)})`,
      db: 'emulator',
      value: round(c.raw.mean, 3),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: 'client.ratio',
      measure: `client / raw, ratio of the means, median of rounds of ${c.calls} calls per arm: ${c.perRoundRatio.map((x) => x.toFixed(3)).join(' ')}`,
      db: 'emulator',
      value: round(c.ratio, 4),
      unit: 'x',
      target: '<= 1.10',
      pass: c.ratio <= 1.1,
    },
    {
      id: 'client.median_ratio',
      measure: `client / raw, ratio of the medians, median of rounds: ${c.perRoundMedianRatio.map((x) => x.toFixed(3)).join(' ')}`,
      db: 'emulator',
      value: round(c.medianRatio, 4),
      unit: 'x',
      target: '<= 1.10',
      pass: c.medianRatio <= 1.1,
    },
    {
      id: 'client.validated_ratio',
      measure: 'raw + zod payout schema / raw (cost of response validation)',
      db: 'emulator',
      value: round(c.validatedRatio, 4),
      unit: 'x',
      target: '',
      pass: null,
    },
  ]
}

function memoryChecks(key: string, runs: MemoryRuns): Check[] {
  const { plugin: m, insert: baseline, bare } = runs
  if ('error' in m) {
    return [
      {
        id: `${key}.memory.rss_delta`,
        measure: 'memory',
        db: key,
        value: null,
        unit: '',
        target: `failed: ${m.error}`,
        pass: false,
      },
    ]
  }
  const first = m.marks[0]
  const last = m.marks[m.marks.length - 1]
  const reached = m.timedOut ? ` (time cap hit: ${m.reached} of ${m.target})` : ''
  return [
    {
      id: `${key}.memory.rss_delta`,
      measure: `RSS after ${last.deliveries} minus after ${first.deliveries} deliveries${reached}`,
      db: key,
      value: round(m.rssDeltaMB, 1),
      unit: 'MB',
      target: '< 30',
      pass: m.rssDeltaMB < 30 && !m.timedOut && m.failures === 0,
    },
    {
      id: `${key}.memory.insert_rss_delta`,
      measure:
        'same RSS delta on the insert-only route, fresh app (same DB work, no verify)' +
        ('error' in baseline
          ? `: failed, ${baseline.error}`
          : baseline.timedOut
            ? ` (time cap hit: ${baseline.reached})`
            : ''),
      db: key,
      value: 'error' in baseline ? null : round(baseline.rssDeltaMB, 1),
      unit: 'MB',
      target: '',
      pass: null,
    },
    {
      id: `${key}.memory.bare_rss_delta`,
      measure:
        'same RSS delta on the bare route, fresh app (the framework and V8 alone)' +
        ('error' in bare ? `: failed, ${bare.error}` : ''),
      db: key,
      value: 'error' in bare ? null : round(bare.rssDeltaMB, 1),
      unit: 'MB',
      target: '',
      pass: null,
    },
    {
      id: `${key}.memory.plugin_minus_bare`,
      measure: 'what the plugin route adds over the bare route (RSS delta minus bare delta)',
      db: key,
      value: 'error' in bare ? null : round(m.rssDeltaMB - bare.rssDeltaMB, 1),
      unit: 'MB',
      target: '',
      pass: null,
    },
    {
      id: `${key}.memory.heap_used_delta`,
      measure: 'heapUsed delta, same marks (after gc)',
      db: key,
      value: round(m.heapUsedDeltaMB, 1),
      unit: 'MB',
      target: '',
      pass: null,
    },
    {
      id: `${key}.memory.heap_total_delta`,
      measure: 'heapTotal delta, same marks (V8 reserved heap)',
      db: key,
      value: round(m.heapTotalDeltaMB, 1),
      unit: 'MB',
      target: '',
      pass: null,
    },
    {
      id: `${key}.memory.new_space_delta`,
      measure: "of which V8's young generation (new space) grew",
      db: key,
      value: round(m.newSpaceDeltaMB, 1),
      unit: 'MB',
      target: '',
      pass: null,
    },
    ...(runs.sqlitePageCacheMB === null
      ? []
      : [
          {
            id: `${key}.memory.sqlite_page_cache_limit`,
            measure:
              "SQLite page cache limit per connection (better-sqlite3's cache_size), held in the app process",
            db: key,
            value: round(runs.sqlitePageCacheMB, 1),
            unit: 'MB',
            target: '',
            pass: null,
          },
        ]),
    {
      id: `${key}.memory.rss_second_half`,
      measure: `RSS growth over the second half (${m.marks.find((x) => x.deliveries >= last.deliveries / 2)?.deliveries} -> ${last.deliveries})`,
      db: key,
      value: round(m.rssDeltaSecondHalfMB, 1),
      unit: 'MB',
      target: '',
      pass: null,
    },
  ]
}

function printTable(checks: Check[], previous: Record<string, number | null> | null) {
  const rows = checks.map((c) => [
    c.measure,
    c.db,
    c.value === null ? '-' : `${c.value} ${c.unit}`,
    c.target || '-',
    c.pass === null ? 'info' : c.pass ? 'PASS' : 'MISS',
    previous && c.id in previous && previous[c.id] !== null ? String(previous[c.id]) : '-',
  ])
  const header = ['measure', 'db', 'value', 'target', 'result', 'previous']
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)))
  const line = (cells: string[]) =>
    '| ' + cells.map((cell, i) => cell.padEnd(widths[i])).join(' | ') + ' |'
  log(line(header))
  log('|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|')
  for (const row of rows) log(line(row))
}

async function main() {
  const watchdog = setTimeout(() => {
    console.error(`bench: hard cap of ${HARD_CAP_MS / 60_000} min reached, aborting`)
    process.exit(2)
  }, HARD_CAP_MS)
  watchdog.unref()
  mkdirSync(TMP, { recursive: true })
  const machine = {
    platform: `${os.platform()} ${os.release()}`,
    arch: os.arch(),
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    totalmemMB: Math.round(os.totalmem() / 1024 / 1024),
    loadavgAtStart: os.loadavg().map((x) => round(x, 2)),
  }
  log(
    `bench: node ${process.version}, ${machine.cpus} cpus, ${machine.totalmemMB} MB` +
      `, load ${machine.loadavgAtStart.join(' ')}${QUICK ? ' (BENCH_QUICK)' : ''}`
  )
  log('Every request goes to 127.0.0.1; the app runs in a child process, the load here.')

  const dbs: Record<string, DbResults> = {}
  const configs = ONLY.has('ingest') ? CONFIGS.filter((c) => !DBS || DBS.has(c.key)) : []
  for (const config of configs) {
    log(`[${elapsed()}] ${config.key}: ${config.label}`)
    const skipped = await unavailable(config)
    if (skipped) {
      log(`  skipped: ${skipped}`)
      dbs[config.key] = { label: config.label, skipped }
      continue
    }
    try {
      dbs[config.key] = await benchDb(config)
    } catch (error) {
      log(`  failed: ${(error as Error).message}`)
      dbs[config.key] = { label: config.label, error: (error as Error).message }
    }
  }

  let client: ClientOverheadResult | { error: string } | undefined
  if (ONLY.has('client')) {
    log(
      `[${elapsed()}] client overhead: ${CLIENT.rounds} rounds of ${CLIENT.calls} getPayout calls per arm, interleaved`
    )
    const emulator = await startChild<{
      baseUrl: string
      apiKey: string
      paymentMethodId: string
    }>(EMULATOR_SERVER)
    try {
      client = await measureClientOverhead({ emulator, ...CLIENT })
    } catch (error) {
      client = { error: (error as Error).message }
    } finally {
      await emulator.stop()
    }
  }

  // Memory on both kinds of store: SQLite keeps its page cache inside the app process,
  // PostgreSQL keeps it in the server, so the pair separates the store from the plugin.
  const memoryConfigs = ONLY.has('memory')
    ? CONFIGS.filter((c) => MEMORY_DBS.includes(c.key) && (!DBS || DBS.has(c.key)))
    : []
  const memory: Record<string, MemoryRuns | { skipped: string }> = {}
  for (const config of memoryConfigs) {
    const skipped = await unavailable(config)
    if (skipped) {
      log(`[${elapsed()}] memory, ${config.key}: skipped, ${skipped}`)
      memory[config.key] = { skipped }
      continue
    }
    let sqlitePageCacheMB: number | null = null
    const memoryOf = async (path: string): Promise<MemoryResult | { error: string }> => {
      try {
        return await withApp(
          config,
          async (child) => {
            const result = await measureMemory({ child, path, ...MEMORY })
            // Read once the marks are taken, in the same app: nothing to start for it.
            if (config.db === 'sqlite') sqlitePageCacheMB ??= await sqlitePageCacheLimitMB(child)
            return result
          },
          ['--expose-gc']
        )
      } catch (error) {
        return { error: (error as Error).message }
      }
    }
    log(`[${elapsed()}] memory: ${MEMORY.marks.at(-1)} deliveries, ${config.label}`)
    const plugin = await memoryOf(ROUTES.plugin)
    log(`[${elapsed()}] memory: the same on the insert-only route, in a fresh app (baseline)`)
    const insert = await memoryOf(ROUTES.insert)
    log(`[${elapsed()}] memory: the same on the bare route, in a fresh app (the framework alone)`)
    const bare = await memoryOf(ROUTES.bare)
    memory[config.key] = { plugin, insert, bare, sqlitePageCacheMB }
  }

  const checks = [
    ...configs.flatMap((c) => ingestChecks(c.key, dbs[c.key])),
    ...(client ? clientChecks(client) : []),
    ...Object.entries(memory).flatMap(([key, runs]) =>
      'skipped' in runs ? [] : memoryChecks(key, runs)
    ),
  ]

  let history: Array<{ date: string; values: Record<string, number | null> }> = []
  if (existsSync(RESULTS)) {
    try {
      const before = JSON.parse(readFileSync(RESULTS, 'utf8'))
      history = Array.isArray(before.history) ? before.history : []
    } catch {}
  }
  const previous = history.length > 0 ? history[history.length - 1].values : null
  const date = new Date().toISOString()
  const values = Object.fromEntries(checks.map((c) => [c.id, c.value]))
  const output = {
    date,
    node: process.version,
    machine,
    durationS: round((Date.now() - started) / 1000, 1),
    quick: QUICK,
    notes: [
      'Each app runs in a child process; autocannon and the subscribers run in the parent.',
      'Every delivery has a unique Svc-Delivery-Id and a fresh signature timestamp.',
      'The bare and insert-only routes skip the bodyparser like the plugin route and read the raw body.',
      'The inbox is emptied before each ingest run; inbox processing (InboxProcessor.kick) is deferred during max-throughput and fixed-rate runs unless named "processed in-process".',
      'Latencies are measured from each request being written to its answer (floats, not autocannon 1 ms buckets); autocannon paces each connection, so a stalled server delays later sends (coordinated omission is not corrected).',
      'In-app handling = request event -> response finished inside the app process; the rest of a latency is queueing, the kernel and the load generator.',
      'Fan-out: the inbox is processed after each acknowledgement, as in production; deliveries are sequential with a 2 ms pause.',
      'Client: PayoutsClient with its rate limiter off (the emulator has rate limits off too).',
      'Memory, on SQLite WAL and on PostgreSQL: plugin route (verify, insert, ack), processing deferred, then the insert-only and bare routes, each in a fresh app; RSS after gc() twice.',
    ],
    settings: { ingest: INGEST, fanout: FANOUT, client: CLIENT, memory: MEMORY },
    checks,
    results: { dbs, client, memory },
    history: [...history, { date, values }].slice(-20),
  }
  // Formatted as the repository's Prettier config would, so `prettier --check` stays clean.
  const prettierConfig = await resolveConfig(RESULTS.pathname)
  writeFileSync(
    RESULTS,
    await format(JSON.stringify(output), { ...prettierConfig, parser: 'json' })
  )

  log('')
  log(`bench finished in ${elapsed()}; previous = the last run in bench/results.json`)
  for (const note of output.notes) log(`  - ${note}`)
  log('')
  printTable(checks, previous)
  const misses = checks.filter((c) => c.pass === false)
  log('')
  log(misses.length === 0 ? 'All targets met.' : `${misses.length} target(s) missed:`)
  for (const miss of misses)
    log(`  MISS ${miss.db} ${miss.measure}: ${miss.value} ${miss.unit} (target ${miss.target})`)
  log(`Figures written to ${RESULTS.pathname}`)
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
