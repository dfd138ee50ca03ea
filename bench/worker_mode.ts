/**
 * Worker mode on one database, the demo's shape (issue #30): a web process (the host app,
 * `webhook.processing: 'worker'`: the route verifies, stores and acknowledges) and
 * `node ace payouts:work` as a second process, both bench/soak_child.ts, on one SQLite WAL file
 * opened as docs/production.md advises (and, to compare, on PostgreSQL), the emulator as the
 * service. On SQLite the two processes share one write lock: while the worker applies a batch,
 * the web process's insert waits for it synchronously (better-sqlite3) and its event loop
 * stops. Measured: the acknowledgement latency at a fixed rate of unique signed deliveries
 * (bench/load.ts, as the ingest part), in runs that alternate between the worker running and
 * the worker stopped (the same web process, nothing processed: the baseline that isolates what
 * the worker's lock costs the acknowledgements), the web process's event-loop delay, the inbox
 * backlog at the end of each run and after a bounded wait, and the worker's drain rate from the
 * backlog the stopped runs leave. The worker runs with its defaults (an idle worker reads the
 * inbox every 5 s): a worker run measures once the worker is at work (see WORKER.leadInMinS).
 *
 * The deliveries are the ingest part's: `payout.status.updated` (processing,
 * compliance_cleared) of a new payout each. The worker applies each one as an app does the
 * first sighting of a payout created elsewhere: it inserts the payout's row (pending), moves it
 * to processing and logs the event, in the batch's transaction; no call to the service, no
 * dead letter (the inbox and the ledger are counted at the end to show it).
 */
import { mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { PG_CONNECTION } from './app.ts'
import { BENCH_SECRET } from './deliveries.ts'
import { startChild, type Child } from './ipc.ts'
import { loadRoute, pool, strip, type LoadResult, type LoadRun } from './load.ts'
import { CONFIGS, QUICK, TMP, elapsed, unavailable, type Check } from './setup.ts'
import type { SoakChildOptions } from './soak_child.ts'
import { median, round, sleep } from './stats.ts'

const CHILD = new URL('./soak_child.ts', import.meta.url)
const EMULATOR = new URL('./emulator_server.ts', import.meta.url)
const WEBHOOK_PATH = '/webhooks/payouts'
const UNPROCESSED = ['pending', 'processing', 'failed']

/** The settings of this part. */
export const WORKER = {
  rate: 500,
  connections: 20,
  warmupS: 1,
  /** Runs per arm, in ABBA order: worker, baseline, baseline, worker, worker, baseline. */
  runs: 3,
  /** The measured part of a run. */
  runS: QUICK ? 2 : 4,
  /**
   * How long an idle worker waits before it reads the inbox again: `webhook.retryIntervalMs`,
   * whose default (5 s) the worker runs with, as in the demo.
   */
  workerIdlePollMs: 5000,
  /**
   * Worker runs: the load runs a lead-in before the measured part, left out of it, so that
   * the measured part finds the worker at work as under a steady load (batch after batch
   * while rows are due, a pause of workerIdlePollMs once it caught up): leadInMinS when the
   * worker was still working at the run's start (rows left), else until workerIdlePollMs +
   * 0.5 s after it found the inbox empty.
   */
  leadInMinS: 0.5,
  /** The start of each measured part left out of its latencies (see loadRoute's rampMs). */
  rampMs: 250,
  /** How long the worker is given to empty the inbox after a worker run or a restart. */
  drainWaitMs: QUICK ? 3000 : 4000,
  /** How often the inbox is counted while it drains (never during a run). */
  pollMs: 100,
  /** As docs/production.md has them (synchronous: better-sqlite3's build defaults to NORMAL in WAL). */
  sqlitePragmas: ['journal_mode = WAL', 'busy_timeout = 10000'],
}

interface Store {
  key: string
  db: 'sqlite' | 'pg'
  label: string
  /** Whether its acknowledgement p99 is judged (< 20 ms). */
  judged: boolean
}

/** The stores this part runs on: the judged one (SQLite WAL), and PostgreSQL to compare. */
const STORES: Store[] = [
  {
    key: 'sqlite-wal',
    db: 'sqlite',
    label: `SQLite, one WAL file for the web process and the worker (${WORKER.sqlitePragmas.join(', ')})`,
    judged: true,
  },
  {
    key: 'pg',
    db: 'pg',
    label: 'PostgreSQL 127.0.0.1:5432 (pool 2..10 in each process)',
    judged: false,
  },
]

type Arm = 'worker' | 'baseline'

/** A drain of the inbox by the worker, with no load: from a backlog, or a run's leftover. */
interface Drain {
  /** Rows not processed when the wait began, and when it ended. */
  from: number
  left: number
  seconds: number
  /** Rows processed per second over the wait (from the worker's ready, after a restart). */
  rowsPerSecond: number | null
}

export interface WorkerModeRun {
  arm: Arm
  load: LoadResult
  /** The web process's event-loop delay over the run, ms. */
  loopDelayMaxMs: number
  loopDelayP99Ms: number
  /** Inbox rows not processed (pending, processing, failed) when the run began and ended. */
  backlogStart: number
  backlogEnd: number
  /** Worker runs: the lead-in before the measured part, s. */
  leadInS: number
  /** Worker runs: rows the worker processed per second over the measured part. */
  processedPerSecond: number | null
  /** Worker runs: the wait that followed the run. */
  drain: Drain | null
}

export interface WorkerModeArm {
  /** Pooled over the arm's runs. */
  load: LoadResult
  perRunP50: number[]
  perRunP99: number[]
  loopDelayMaxMs: number
  backlogEndMax: number
}

export interface WorkerModeResult {
  label: string
  settings: typeof WORKER
  runs: WorkerModeRun[]
  worker: WorkerModeArm
  baseline: WorkerModeArm
  /** Worker arm p99 / baseline p99, pooled, and run by run (the pairs of each round). */
  p99Ratio: number
  perRunP99Ratio: number[]
  /** The worker's drains of the backlogs the stopped runs left (started fresh each time). */
  backlogDrains: Drain[]
  drainRowsPerSecond: number | null
  /** Worst rows left after a worker run's drain wait. */
  backlogAfterDrainMax: number
  /** The inbox and the ledger by state once the last drain ended. */
  inboxAtEnd: Record<string, number>
  ledgerAtEnd: Record<string, number>
  backlogAtEnd: number
  /** How long the worker took to start (fork to ready), ms. */
  workerStartMs: number[]
  /** Warnings and errors the two processes logged, by message. */
  logged: Record<string, number>
  /** The worker's batches (its `payouts worker batch` lines): how many, rows in all, largest. */
  batches: { count: number; rows: number; max: number }
}

const backlogOf = (states: Record<string, number>) =>
  UNPROCESSED.reduce((n, state) => n + (states[state] ?? 0), 0)

function removeSqlite(file: string) {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(file + suffix, { force: true })
}

/**
 * What the log files in `dir` tell: warnings and errors (pino level >= 40) counted by
 * message, and the worker's batches.
 */
function readLogs(dir: string) {
  const counts: Record<string, number> = {}
  const batches = { count: 0, rows: 0, max: 0 }
  let files: string[] = []
  try {
    files = readdirSync(dir)
  } catch {
    return { logged: counts, batches }
  }
  for (const file of files) {
    for (const line of readFileSync(`${dir}/${file}`, 'utf8').split('\n')) {
      if (!line) continue
      let entry: { level?: number; msg?: string; err?: { message?: string }; processed?: number }
      try {
        entry = JSON.parse(line)
      } catch {
        continue
      }
      if (entry.msg === 'payouts worker batch') {
        batches.count++
        batches.rows += entry.processed ?? 0
        batches.max = Math.max(batches.max, entry.processed ?? 0)
      }
      if ((entry.level ?? 0) < 40) continue
      const key = `${file.replace(/\.log$/, '')}: ${entry.msg ?? ''}${
        entry.err?.message ? ` (${entry.err.message.slice(0, 120)})` : ''
      }`
      counts[key] = (counts[key] ?? 0) + 1
    }
  }
  return { logged: counts, batches }
}

function arm(runs: WorkerModeRun[]): WorkerModeArm {
  const loads = runs.map((r) => r.load as LoadRun)
  return {
    load: pool(loads),
    perRunP50: runs.map((r) => r.load.latency.p50),
    perRunP99: runs.map((r) => r.load.latency.p99),
    loopDelayMaxMs: Math.max(...runs.map((r) => r.loopDelayMaxMs)),
    backlogEndMax: Math.max(...runs.map((r) => r.backlogEnd)),
  }
}

/** One store: its web process, the worker started and stopped, the runs. */
async function measureStore(
  store: Store,
  emulator: { baseUrl: string; apiKey: string },
  log: (line: string) => void
): Promise<WorkerModeResult> {
  const sqliteFile = new URL(`./worker-${process.pid}-${store.key}.sqlite`, TMP).pathname
  const logDir = new URL(`./worker-${process.pid}-${store.key}-logs`, TMP).pathname
  removeSqlite(sqliteFile)
  rmSync(logDir, { recursive: true, force: true })
  mkdirSync(logDir, { recursive: true })
  const base: Omit<SoakChildOptions, 'role' | 'logFile'> = {
    db: store.db,
    connection:
      store.db === 'pg'
        ? { client: 'pg', connection: { ...PG_CONNECTION }, pool: { min: 2, max: 10 } }
        : {
            client: 'better-sqlite3',
            connection: { filename: sqliteFile },
            useNullAsDefault: true,
          },
    sqlitePragmas: store.db === 'sqlite' ? WORKER.sqlitePragmas : undefined,
    prefix: `wm${Math.random().toString(36).slice(2, 7)}_`,
    secret: BENCH_SECRET,
    apiKey: emulator.apiKey,
    baseUrl: emulator.baseUrl,
    webhookPath: WEBHOOK_PATH,
  }
  const start = <Ready>(role: 'web' | 'worker') =>
    startChild<Ready>(CHILD, {
      args: [JSON.stringify({ ...base, role, logFile: `${logDir}/${role}.log` })],
    })
  const workerStartMs: number[] = []
  let worker: Child<{ pid: number }> | undefined
  const web = await start<{ url: string; pid: number }>('web')
  const inbox = () => web.call<Record<string, number>>('inbox')
  const backlog = async () => backlogOf(await inbox())
  /** Inbox rows done (processed or dead letters) and not, now. */
  const rows = async () => {
    const states = await inbox()
    const left = backlogOf(states)
    return { left, done: Object.values(states).reduce((n, x) => n + x, 0) - left }
  }
  /** When the running worker was last seen to empty the inbox (it then idles), or null. */
  let idleSince: number | null = null
  /** Starts the worker; answers when it was ready (its loop begins right after). */
  const startWorker = async () => {
    const t0 = performance.now()
    worker = await start<{ pid: number }>('worker')
    idleSince = null
    const ready = performance.now()
    workerStartMs.push(round(ready - t0, 0))
    return ready
  }
  const stopWorker = async () => {
    await worker?.stop()
    worker = undefined
  }
  /** Counts the inbox until it is empty or drainWaitMs is over; rows/s from `since` (ms). */
  const drain = async (since: number | null): Promise<Drain> => {
    const began = performance.now()
    const from = await backlog()
    let left = from
    while (left > 0 && performance.now() - began < WORKER.drainWaitMs) {
      await sleep(WORKER.pollMs)
      left = await backlog()
    }
    idleSince = left === 0 ? performance.now() : null
    const seconds = (performance.now() - (since ?? began)) / 1000
    return {
      from,
      left,
      seconds: round(seconds, 2),
      rowsPerSecond: since === null || from === left ? null : round((from - left) / seconds, 0),
    }
  }
  const load = (tag: string, durationS: number, rampMs = 0) =>
    loadRoute({
      url: web.ready.url,
      path: WEBHOOK_PATH,
      tag,
      durationS,
      connections: WORKER.connections,
      overallRate: WORKER.rate,
      rampMs,
    })
  /**
   * One run: a worker run's lead-in, then the measured part, whose start resets the web
   * process's event-loop monitor and counts the inbox (both left out with the ramp).
   */
  const oneRun = async (which: Arm, index: number): Promise<WorkerModeRun> => {
    const backlogStart = await backlog()
    const leadInMs =
      which === 'baseline'
        ? 0
        : Math.round(
            Math.max(
              WORKER.leadInMinS * 1000,
              idleSince === null || backlogStart > 0
                ? 0
                : idleSince + WORKER.workerIdlePollMs + 500 - performance.now()
            )
          )
    await web.call('loopDelay', { reset: true })
    let atStart: Promise<{ left: number; done: number; at: number }> | undefined
    const timer = setTimeout(() => {
      atStart = web
        .call('loopDelay', { reset: true })
        .then(rows)
        .then((counted) => ({ ...counted, at: performance.now() }))
    }, leadInMs)
    const run = await load(`wm_${which}`, leadInMs / 1000 + WORKER.runS, leadInMs + WORKER.rampMs)
    clearTimeout(timer)
    const loop = await web.call<{ maxMs: number; p99Ms: number }>('loopDelay', { reset: true })
    const end = await rows()
    const began = await atStart
    const backlogEnd = end.left
    const processed =
      began && which === 'worker'
        ? round((end.done - began.done) / ((performance.now() - began.at) / 1000), 0)
        : null
    const result: WorkerModeRun = {
      arm: which,
      load: run,
      loopDelayMaxMs: round(loop.maxMs, 1),
      loopDelayP99Ms: round(loop.p99Ms, 1),
      backlogStart,
      backlogEnd,
      leadInS: leadInMs / 1000,
      processedPerSecond: processed,
      drain: which === 'worker' ? await drain(null) : null,
    }
    log(
      `    run ${index + 1} ${which.padEnd(8)}: p50 ${run.latency.p50.toFixed(1)} p99 ` +
        `${run.latency.p99.toFixed(1)} ms (${run.okPerSecond.toFixed(0)}/s ok` +
        `${run.non2xx + run.errors ? `, ${run.non2xx} non-2xx, ${run.errors} errors` : ''})` +
        `, loop delay max ${result.loopDelayMaxMs} ms, backlog ${backlogStart} -> ${backlogEnd}` +
        (result.drain
          ? `, ${result.drain.left} after ${result.drain.seconds}s; lead-in ${result.leadInS}s` +
            ` (worker ${result.processedPerSecond} rows/s under load)`
          : '')
    )
    return result
  }

  const runs: WorkerModeRun[] = []
  const backlogDrains: Drain[] = []
  try {
    await startWorker()
    log(`    web pid ${web.ready.pid}, worker pid ${worker!.pid} (${workerStartMs[0]} ms to start)`)
    // Warm-up: the route, the worker's batches, the pools; then an empty inbox.
    await load('wm_warmup', WORKER.warmupS)
    await drain(null)
    const ABBA: Arm[] = ['worker', 'baseline', 'baseline', 'worker']
    for (let i = 0; i < WORKER.runs * 2; i++) {
      const which = ABBA[i % 4]
      if (which === 'baseline' && worker) await stopWorker()
      if (which === 'worker' && !worker) {
        const since = await startWorker()
        const drained = await drain(since)
        backlogDrains.push(drained)
        log(
          `    worker restarted (${workerStartMs.at(-1)} ms): ${drained.from} rows -> ` +
            `${drained.left} in ${drained.seconds}s from its ready (${drained.rowsPerSecond} rows/s)`
        )
      }
      runs.push(await oneRun(which, runs.filter((r) => r.arm === which).length))
    }
    if (!worker) {
      const since = await startWorker()
      const drained = await drain(since)
      backlogDrains.push(drained)
      log(
        `    worker restarted (${workerStartMs.at(-1)} ms): ${drained.from} rows -> ` +
          `${drained.left} in ${drained.seconds}s from its ready (${drained.rowsPerSecond} rows/s)`
      )
    }
    const inboxAtEnd = await inbox()
    const ledgerAtEnd = await web.call<Record<string, number>>('ledger')
    const workerRuns = runs.filter((r) => r.arm === 'worker')
    const baselineRuns = runs.filter((r) => r.arm === 'baseline')
    const workerArm = arm(workerRuns)
    const baselineArm = arm(baselineRuns)
    const rates = backlogDrains.flatMap((d) => (d.rowsPerSecond === null ? [] : [d.rowsPerSecond]))
    return {
      label: store.label,
      settings: WORKER,
      runs: runs.map((r) => ({ ...r, load: strip(r.load as LoadRun) })),
      worker: workerArm,
      baseline: baselineArm,
      p99Ratio: round(workerArm.load.latency.p99 / baselineArm.load.latency.p99, 3),
      perRunP99Ratio: workerArm.perRunP99.map((p, i) => round(p / baselineArm.perRunP99[i], 3)),
      backlogDrains,
      drainRowsPerSecond: rates.length ? median(rates) : null,
      backlogAfterDrainMax: Math.max(...workerRuns.map((r) => r.drain?.left ?? 0)),
      inboxAtEnd,
      ledgerAtEnd,
      backlogAtEnd: backlogOf(inboxAtEnd),
      workerStartMs,
      logged: {},
      batches: { count: 0, rows: 0, max: 0 },
    }
  } finally {
    await stopWorker().catch(() => {})
    await web.stop()
    removeSqlite(sqliteFile)
  }
}

/**
 * The part: one emulator, then each store in turn (`dbs` filters them, BENCH_DBS); a store
 * whose server is away is skipped. Removes its files.
 */
export async function runWorkerMode(
  dbs: Set<string> | null,
  log: (line: string) => void
): Promise<Record<string, WorkerModeResult | { skipped: string } | { error: string }>> {
  const stores = STORES.filter((s) => !dbs || dbs.has(s.key))
  const results: Record<string, WorkerModeResult | { skipped: string } | { error: string }> = {}
  if (stores.length === 0) return results
  mkdirSync(TMP, { recursive: true })
  const emulator = await startChild<{ baseUrl: string; apiKey: string }>(EMULATOR)
  try {
    for (const store of stores) {
      const config = CONFIGS.find((c) => c.key === store.key)!
      const skipped = await unavailable(config)
      log(
        `[${elapsed()}] worker mode, ${store.key}${skipped ? `: skipped, ${skipped}` : ''}` +
          (skipped
            ? ''
            : `: ${store.label}; ${WORKER.runs} runs per arm of ${WORKER.runS}s @${WORKER.rate}/s,` +
              ' worker running vs stopped, alternating')
      )
      if (skipped) {
        results[store.key] = { skipped }
        continue
      }
      const logDir = new URL(`./worker-${process.pid}-${store.key}-logs`, TMP).pathname
      try {
        const result = await measureStore(store, emulator.ready, log)
        Object.assign(result, readLogs(logDir))
        results[store.key] = result
        log(
          `    ${store.key}: ack p99 ${result.worker.load.latency.p99.toFixed(1)} ms with the worker, ` +
            `${result.baseline.load.latency.p99.toFixed(1)} without (x${result.p99Ratio}); ` +
            `inbox at the end ${JSON.stringify(result.inboxAtEnd)}, ledger ${JSON.stringify(result.ledgerAtEnd)}` +
            `; worker batches ${JSON.stringify(result.batches)}` +
            (Object.keys(result.logged).length ? `; logged ${JSON.stringify(result.logged)}` : '')
        )
      } catch (error) {
        log(`  failed: ${(error as Error).message}`)
        results[store.key] = { error: (error as Error).message }
      } finally {
        rmSync(logDir, { recursive: true, force: true })
      }
    }
  } finally {
    await emulator.stop()
  }
  return results
}

/** The rows of the results table for store `key`. */
export function workerChecks(
  key: string,
  r: WorkerModeResult | { skipped: string } | { error: string }
): Check[] {
  if (!('runs' in r)) {
    return [
      {
        id: `${key}.worker.skipped`,
        measure: 'worker mode, web and worker processes on one store',
        db: key,
        value: null,
        unit: '',
        target: 'skipped' in r ? `skipped: ${r.skipped}` : `failed: ${r.error}`,
        pass: 'skipped' in r ? null : false,
      },
    ]
  }
  const judged = STORES.find((s) => s.key === key)?.judged ?? false
  const w = r.worker.load
  const b = r.baseline.load
  const failures = (x: LoadResult) =>
    x.non2xx + x.errors ? `, ${x.non2xx} non-2xx, ${x.errors} errors` : ''
  const perRun = (values: number[]) => values.map((v) => v.toFixed(1)).join(' / ')
  return [
    {
      id: `${key}.worker.ack.p50`,
      measure: `worker mode: ack p50 @${WORKER.rate}/s, worker running (${w.okPerSecond.toFixed(0)}/s achieved${failures(w)})`,
      db: key,
      value: round(w.latency.p50, 2),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: `${key}.worker.ack.p99`,
      measure: `worker mode: ack p99 @${WORKER.rate}/s, worker running, runs ${perRun(r.worker.perRunP99)}`,
      db: key,
      value: round(w.latency.p99, 2),
      unit: 'ms',
      target: judged ? '< 20' : '',
      pass: judged ? w.latency.p99 < 20 && w.non2xx === 0 && w.errors === 0 : null,
    },
    {
      id: `${key}.worker.ack.baseline_p99`,
      measure:
        `worker mode: ack p99 @${WORKER.rate}/s, worker stopped (baseline; p50 ` +
        `${b.latency.p50.toFixed(2)}${failures(b)}), runs ${perRun(r.baseline.perRunP99)}`,
      db: key,
      value: round(b.latency.p99, 2),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: `${key}.worker.ack.p99_ratio`,
      measure: `worker mode: ack p99 worker running / stopped, runs ${r.perRunP99Ratio.map((x) => x.toFixed(2)).join(' ')}`,
      db: key,
      value: round(r.p99Ratio, 2),
      unit: 'x',
      target: '',
      pass: null,
    },
    {
      id: `${key}.worker.loop_delay_max`,
      measure: `worker mode: web process event-loop delay max, worker running (stopped: ${r.baseline.loopDelayMaxMs.toFixed(1)})`,
      db: key,
      value: round(r.worker.loopDelayMaxMs, 1),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: `${key}.worker.backlog_end`,
      measure:
        `worker mode: backlog at the end of a run, worst of the worker runs ` +
        `(worker ${r.runs
          .filter((x) => x.arm === 'worker')
          .map((x) => x.processedPerSecond)
          .join(' / ')} rows/s under load)`,
      db: key,
      value: r.worker.backlogEndMax,
      unit: 'rows',
      target: '',
      pass: null,
    },
    {
      id: `${key}.worker.backlog_after_drain`,
      measure:
        `worker mode: backlog ${WORKER.drainWaitMs / 1000}s after a worker run's load stopped, ` +
        `worst of the runs (after the last restart: ${r.backlogAtEnd})`,
      db: key,
      value: r.backlogAfterDrainMax,
      unit: 'rows',
      target: judged ? '0' : '',
      pass: judged ? r.backlogAfterDrainMax === 0 : null,
    },
    {
      id: `${key}.worker.drain_rps`,
      measure: `worker mode: worker drain from a backlog, no load (${r.backlogDrains.map((d) => `${d.from} rows ${d.rowsPerSecond}/s`).join(', ')}; from its ready)`,
      db: key,
      value: r.drainRowsPerSecond,
      unit: 'rows/s',
      target: '',
      pass: null,
    },
  ]
}
