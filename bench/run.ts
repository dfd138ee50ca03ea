import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import { format, resolveConfig } from 'prettier'
import {
  CLIENT,
  clientChecks,
  runClientOverhead,
  type ClientOverheadResult,
} from './client_overhead.ts'
import { FANOUT, fanoutChecks, measureFanout, type FanoutResult } from './fanout.ts'
import { INGEST, ingestChecks, measureIngest, type IngestResult } from './ingest.ts'
import { MEMORY, MEMORY_DBS, memoryChecks, runMemory, type MemoryRuns } from './memory.ts'
import {
  measureOtelIngest,
  OTEL,
  OTEL_DBS,
  otelClientChecks,
  otelIngestChecks,
  runOtelClient,
  type OtelClientResult,
  type OtelIngestResult,
} from './otel.ts'
import { measureRelay, RELAY, RELAY_DBS, relayChecks, type RelayResult } from './relay.ts'
import {
  CONFIGS,
  QUICK,
  TMP,
  elapsed,
  log,
  startedAt,
  unavailable,
  withApp,
  type Check,
  type DbConfig,
} from './setup.ts'
import { round } from './stats.ts'
import { runWorkerMode, WORKER, workerChecks, type WorkerModeResult } from './worker_mode.ts'

/**
 * `npm run bench`: webhook ingest, fan-out, client overhead, memory, the relay's cost, the
 * OpenTelemetry instrumentation's and worker mode's (web and worker processes on one store),
 * each comparison measured side by side in this run on this machine, on 127.0.0.1 only, every
 * loop bounded in count and time. Each measure, its settings and its rows of the table are in
 * its own file (ingest.ts, fanout.ts, client_overhead.ts, memory.ts, relay.ts, otel.ts,
 * worker_mode.ts); this file runs them, prints the table and writes bench/results.json.
 */

// BENCH_ONLY=ingest,client,memory,relay,otel,worker and BENCH_DBS=sqlite,sqlite-wal,pg,mysql run a part.
const ONLY = new Set(
  (process.env.BENCH_ONLY ?? 'ingest,client,memory,relay,otel,worker').split(',')
)
const DBS = process.env.BENCH_DBS ? new Set(process.env.BENCH_DBS.split(',')) : null
const PARTIAL = process.env.BENCH_ONLY !== undefined || DBS !== null
// BENCH_MERGE=1: a partial run replaces its own rows in bench/results.json, keeps the others.
const MERGE = PARTIAL && !QUICK && process.env.BENCH_MERGE === '1'
const HARD_CAP_MS = 20 * 60_000
// Quick and partial runs (development) never touch the committed figures, unless merged.
const RESULTS =
  (QUICK || PARTIAL) && !MERGE
    ? new URL('./tmp/results-quick.json', import.meta.url)
    : new URL('./results.json', import.meta.url)

interface DbResults {
  label: string
  sqlite?: { journalMode: string; synchronous: number; cacheSize: number; pageSize: number } | null
  ingest?: IngestResult
  fanout?: FanoutResult
  fanoutError?: string
  skipped?: string
  error?: string
}

/** Ingest, then fan-out, on one app on `config`'s store. */
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

/** The ingest and fan-out rows of one store; one skipped row when it did not run. */
function dbChecks(key: string, r: DbResults): Check[] {
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
  return [...ingestChecks(key, r.ingest), ...fanoutChecks(key, r.fanout, r.fanoutError)]
}

/** The results table, with each figure of the previous run beside it. */
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

/** What the observability-cost part measured: each store's ingest, and the client. */
interface OtelResults {
  dbs: Record<string, OtelIngestResult | { skipped: string } | { error: string }>
  client?: OtelClientResult | { error: string }
}

/** The parts of the results a partial run measured. */
function mergedResults(
  dbs: object,
  client: unknown,
  clientBusy: unknown,
  memory: object,
  relay: object,
  otel: OtelResults | undefined,
  worker: object
) {
  return {
    ...(Object.keys(dbs).length ? { dbs } : {}),
    ...(client ? { client } : {}),
    ...(clientBusy ? { clientBusy } : {}),
    ...(Object.keys(memory).length ? { memory } : {}),
    ...(Object.keys(relay).length ? { relay } : {}),
    ...(otel ? { otel } : {}),
    ...(Object.keys(worker).length ? { worker } : {}),
  }
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
  let clientBusy: ClientOverheadResult | { error: string } | undefined
  if (ONLY.has('client')) {
    log(
      `[${elapsed()}] client overhead: ${CLIENT.rounds} rounds of ${CLIENT.calls} getPayout calls per arm, interleaved`
    )
    client = await runClientOverhead()
    log(`[${elapsed()}] client overhead again, one core kept busy by another process`)
    clientBusy = await runClientOverhead({ busyCore: true })
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
    memory[config.key] = await runMemory(config)
  }

  // The relay's cost: SQLite WAL polls its log, PostgreSQL LISTENs for the commits.
  const relayConfigs = ONLY.has('relay')
    ? CONFIGS.filter((c) => RELAY_DBS.includes(c.key) && (!DBS || DBS.has(c.key)))
    : []
  const relay: Record<string, RelayResult | { skipped: string } | { error: string }> = {}
  for (const config of relayConfigs) {
    const skipped = await unavailable(config)
    log(`[${elapsed()}] relay, ${config.key}${skipped ? `: skipped, ${skipped}` : ''}`)
    if (skipped) {
      relay[config.key] = { skipped }
      continue
    }
    relay[config.key] = await measureRelay(config, log).catch((error) => {
      log(`  failed: ${(error as Error).message}`)
      return { error: (error as Error).message }
    })
  }

  // The OpenTelemetry instrumentation's cost: the webhook route on SQLite WAL and PostgreSQL,
  // an app with nothing installed beside one instrumented; then the client, a process with
  // nothing installed beside one instrumented.
  let otel: OtelResults | undefined
  if (ONLY.has('otel')) {
    otel = { dbs: {} }
    const otelConfigs = CONFIGS.filter((c) => OTEL_DBS.includes(c.key) && (!DBS || DBS.has(c.key)))
    for (const config of otelConfigs) {
      const skipped = await unavailable(config)
      log(
        `[${elapsed()}] otel, ${config.key}${skipped ? `: skipped, ${skipped}` : ''}` +
          (skipped
            ? ''
            : `: nothing installed vs instrumented, ${OTEL.rounds} rounds max, ` +
              `${OTEL.fixedRounds} rounds @${OTEL.fixedRate}/s`)
      )
      if (skipped) {
        otel.dbs[config.key] = { skipped }
        continue
      }
      otel.dbs[config.key] = await measureOtelIngest(config, log).catch((error) => {
        log(`  failed: ${(error as Error).message}`)
        return { error: (error as Error).message }
      })
    }
    log(
      `[${elapsed()}] otel, client: ${OTEL.client.rounds} rounds of ${OTEL.client.calls} ` +
        `getPayout calls per arm, two processes, in blocks of ${OTEL.client.block}`
    )
    otel.client = await runOtelClient()
  }

  // Worker mode: a web process and `node ace payouts:work` on one SQLite WAL file (the demo's
  // shape), and on PostgreSQL; the worker running against the worker stopped.
  const worker: Record<string, WorkerModeResult | { skipped: string } | { error: string }> =
    ONLY.has('worker') ? await runWorkerMode(DBS, log) : {}

  const checks = [
    ...configs.flatMap((c) => dbChecks(c.key, dbs[c.key])),
    ...(client ? clientChecks(client, clientBusy) : []),
    ...Object.entries(memory).flatMap(([key, runs]) =>
      'skipped' in runs ? [] : memoryChecks(key, runs)
    ),
    ...Object.entries(relay).flatMap(([key, r]) => ('arms' in r ? relayChecks(key, r) : [])),
    ...Object.entries(otel?.dbs ?? {}).flatMap(([key, o]): Check[] => {
      if ('max' in o) return otelIngestChecks(key, o, dbs[key]?.ingest)
      return [
        {
          id: `${key}.otel.skipped`,
          measure: 'observability cost, ingest',
          db: key,
          value: null,
          unit: '',
          target: 'skipped' in o ? `skipped: ${o.skipped}` : `failed: ${o.error}`,
          pass: 'skipped' in o ? null : false,
        },
      ]
    }),
    ...(otel?.client ? otelClientChecks(otel.client, client) : []),
    ...Object.entries(worker).flatMap(([key, r]) => workerChecks(key, r)),
  ]

  let history: Array<{ date: string; values: Record<string, number | null> }> = []
  let before: any = {}
  if (existsSync(RESULTS)) {
    try {
      before = JSON.parse(readFileSync(RESULTS, 'utf8'))
      history = Array.isArray(before.history) ? before.history : []
    } catch {}
  }
  // Rows this run did not measure and keeps: the growth bench's (npm run bench:growth), and
  // with BENCH_MERGE every other row of the previous run.
  const measured = new Set(checks.map((c) => c.id))
  const kept: Check[] = (Array.isArray(before.checks) ? before.checks : []).filter(
    (c: Check) => !measured.has(c.id) && (MERGE || c.id.includes('growth'))
  )
  // Each row's figure in the last run that measured it (a partial run measures a few).
  const previous = history.length > 0 ? Object.assign({}, ...history.map((h) => h.values)) : null
  const date = new Date().toISOString()
  const values = Object.fromEntries(checks.map((c) => [c.id, c.value]))
  const output = {
    date,
    node: process.version,
    machine,
    durationS: round((Date.now() - startedAt) / 1000, 1),
    quick: QUICK,
    notes: [
      'Each app runs in a child process; autocannon and the subscribers run in the parent.',
      'Every delivery has a unique Svc-Delivery-Id and a fresh signature timestamp.',
      'The bare and insert-only routes skip the bodyparser like the plugin route and read the raw body.',
      'The inbox is emptied before each ingest run; inbox processing (InboxProcessor.kick) is deferred during max-throughput and fixed-rate runs unless named "processed in-process".',
      `Latencies are measured from each request being written to its answer (floats, not autocannon 1 ms buckets); autocannon paces each connection, so a stalled server delays later sends (coordinated omission is not corrected). Fixed-rate runs leave out the first ${INGEST.rampMs} ms of each run (its connections opening and sending at once, a burst a steady rate does not have), as the growth, otel and worker-mode measures do; the load generator's own event-loop delay is reported beside the inline figures (how late it could read an answer).`,
      'In-app handling = request event -> response finished inside the app process; the rest of a latency is queueing, the kernel and the load generator.',
      'Fan-out: the inbox is processed after each acknowledgement, as in production; deliveries are sequential with a 2 ms pause.',
      'Client: PayoutsClient with its rate limiter off (the emulator has rate limits off too).',
      'Memory, on SQLite WAL and on PostgreSQL: plugin route (verify, insert, ack), processing deferred, then the insert-only and bare routes, each in a fresh app; RSS after gc() twice.',
      "Relay, on SQLite WAL and on PostgreSQL: a fresh app per arm, relay off, on, on, off; plugin route with the inbox processed in-process; the relay's statements counted in the app (on PostgreSQL the NOTIFYs apart).",
      'Worker mode, on one SQLite WAL file (journal_mode = WAL, busy_timeout = 10000, as docs/production.md) and on PostgreSQL: a web process (webhook.processing: worker; verify, store, acknowledge) and `node ace payouts:work` (its defaults), both bench/soak_child.ts, the emulator as the service; the plugin route at a fixed rate of unique signed deliveries (each a new payout, which the worker applies), runs in ABBA order between the worker running and stopped (the same web process; baseline), the first 250 ms of each run left out of its latencies, and before the measured part of a worker run a lead-in that finds the worker at work (an idle worker reads the inbox every 5 s); backlog = inbox rows pending, processing or failed; the drain rate from the backlog the stopped runs leave, counted from the restarted worker being ready.',
      'Observability cost (otel), on SQLite WAL and on PostgreSQL: two apps alive together, one with nothing installed, one with new PayoutsInstrumentation(), a BatchSpanProcessor into an in-memory exporter and a periodic metric reader (each emptied every second) installed before it boots; plugin route, processing deferred, the arms alternating in rounds; fixed-rate p99 judged round by round. Client: two child processes, one instrumented, on one emulator, the arms alternating in blocks of 100 calls.',
    ],
    settings: {
      ingest: INGEST,
      fanout: FANOUT,
      client: CLIENT,
      memory: MEMORY,
      relay: RELAY,
      otel: OTEL,
      worker: WORKER,
    },
    checks: [...checks, ...kept],
    results: MERGE
      ? {
          ...before.results,
          ...mergedResults(dbs, client, clientBusy, memory, relay, otel, worker),
        }
      : { dbs, client, clientBusy, memory, relay, otel, worker },
    growth: before.growth,
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
