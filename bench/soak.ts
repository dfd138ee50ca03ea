import { randomUUID } from 'node:crypto'
import { appendFileSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import knex from 'knex'
import { format, resolveConfig } from 'prettier'
import { Pool } from 'undici'
import { signPayload } from '../src/signature/main.ts'
import { MYSQL_CONNECTION, PG_CONNECTION } from './app.ts'
import { BENCH_SECRET } from './deliveries.ts'
import { startChild, type Child } from './ipc.ts'
import type { SoakChildOptions } from './soak_child.ts'
import { round } from './stats.ts'

/**
 * `npm run bench:soak`: the worker-mode memory soak (issue #30, "Memory flat over hours").
 * Per store, a web process (the plugin's webhook route, `webhook.processing: 'worker'`: it
 * verifies, stores and acknowledges) and a worker (`node ace payouts:work`, as an operator
 * runs it), both with --expose-gc, on one database, and the emulator as the service. A steady
 * SOAK_RATE (50) signed deliveries per second go to the web route over loopback for
 * SOAK_MINUTES (30), one in 20 a delivery sent again (same id and body, fresh signature):
 * each payout is created (`payout.created`) and driven through its steps to `completed`
 * (`payout.status.updated`), 40 payouts in flight at a time, so the ledger grows as in
 * production. Every SOAK_SAMPLE_S (30) s each process runs gc() twice and reports its memory;
 * the series goes to a JSON-lines file, and at the end each process's first and last figures
 * and the least-squares slope over the second half, in MB per 10 min (target < 5), and the
 * backlog (inbox rows not processed) when the load stops and once the worker had up to 60 s
 * more.
 *
 * SOAK_DBS=sqlite-wal,pg,mysql picks the stores (all three by default), one after another, or
 * all at once with SOAK_PARALLEL=1. PostgreSQL and MySQL/MariaDB: database SOAK_PG_DATABASE /
 * SOAK_MYSQL_DATABASE (`soak`, created if missing), each run under a fresh table prefix,
 * dropped at the end. SQLite: a fresh WAL file shared by the two processes, opened as
 * docs/production.md advises (journal_mode = WAL, busy_timeout = 10000); SOAK_SQLITE_CACHE_MB
 * and SOAK_SQLITE_MMAP_MB set cache_size and mmap_size, to compare. The children inherit the
 * environment (MALLOC_ARENA_MAX, ...); SOAK_NODE_FLAGS adds Node flags to both
 * (`--max-semi-space-size=16`, ...). Only 127.0.0.1; bounded: a watchdog ends the run 15 min
 * past SOAK_MINUTES x the stores run one after another.
 *
 * Runs of 30 minutes or more write bench/soak-results.json (SOAK_WRITE=1 for shorter ones,
 * SOAK_RESULTS=<file> elsewhere); SOAK_ARM=<name> writes a comparison under `arms.<name>` of
 * that file and keeps the rest. The series and the processes' logs go to SOAK_OUT
 * (/tmp/svc-payouts-soak/<date>/).
 */

const MINUTES = Number(process.env.SOAK_MINUTES ?? 30)
const RATE = Number(process.env.SOAK_RATE ?? 50)
const SAMPLE_S = Number(process.env.SOAK_SAMPLE_S ?? 30)
const PARALLEL = process.env.SOAK_PARALLEL === '1'
const DB_KEYS = (process.env.SOAK_DBS ?? 'sqlite-wal,pg,mysql').split(',').filter(Boolean)
/** One delivery in DUPLICATE_EVERY is sent again (5 %). */
const DUPLICATE_EVERY = 20
/** Payouts moving through their lifecycle at a time. */
const IN_FLIGHT_PAYOUTS = 40
/** Target: slope over the second half, MB per 10 min, for each process. */
const TARGET_MB_PER_10_MIN = 5
/** How long the worker is given, after the load stops, to process the backlog. */
const DRAIN_WAIT_MS = 60_000
const WEBHOOK_PATH = '/webhooks/payouts'
const WRITE = MINUTES >= 30 || process.env.SOAK_WRITE === '1'
const STAMP = new Date().toISOString().replace(/[:.]/g, '-')
const OUT = process.env.SOAK_OUT ?? `/tmp/svc-payouts-soak/${STAMP}`
const RESULTS =
  process.env.SOAK_RESULTS ??
  (WRITE ? new URL('./soak-results.json', import.meta.url).pathname : `${OUT}/results.json`)
const TMP = new URL('./tmp/', import.meta.url)
const CHILD = new URL('./soak_child.ts', import.meta.url)
const EMULATOR = new URL('./emulator_server.ts', import.meta.url)
/** A comparison arm's name: its results go under `arms.<name>` of the results file. */
const ARM = process.env.SOAK_ARM
const PG_DATABASE = process.env.SOAK_PG_DATABASE ?? 'soak'
const MYSQL_DATABASE = process.env.SOAK_MYSQL_DATABASE ?? 'soak'
/** Further Node flags of the two processes (e.g. `--max-semi-space-size=16`), to compare. */
const NODE_FLAGS = (process.env.SOAK_NODE_FLAGS ?? '').split(' ').filter(Boolean)
const SQLITE_PRAGMAS = [
  'journal_mode = WAL',
  'busy_timeout = 10000',
  ...(process.env.SOAK_SQLITE_CACHE_MB
    ? [`cache_size = -${Number(process.env.SOAK_SQLITE_CACHE_MB) * 1024}`]
    : []),
  ...(process.env.SOAK_SQLITE_MMAP_MB
    ? [`mmap_size = ${Number(process.env.SOAK_SQLITE_MMAP_MB) * 1024 * 1024}`]
    : []),
]

const startedAt = Date.now()
const log = (line: string) =>
  console.log(`[${((Date.now() - startedAt) / 1000).toFixed(0).padStart(5)}s] ${line}`)

interface Store {
  key: string
  db: 'sqlite' | 'pg' | 'mysql'
  label: string
}

const STORES: Store[] = [
  {
    key: 'sqlite-wal',
    db: 'sqlite',
    label: `SQLite WAL, one file for both processes (${SQLITE_PRAGMAS.join(', ')})`,
  },
  { key: 'pg', db: 'pg', label: `PostgreSQL 127.0.0.1:5432, database ${PG_DATABASE}` },
  {
    key: 'mysql',
    db: 'mysql',
    label: `MySQL/MariaDB 127.0.0.1:3306, database ${MYSQL_DATABASE}`,
  },
]

/** What a child reports of its memory (bench/soak_child.ts), MB. */
interface Memory {
  rss: number
  heapUsed: number
  heapTotal: number
  external: number
  arrayBuffers: number
  mallocedMemory: number
  newSpace: number
  oldSpace: number
  rssAnon: number
  rssFile: number
  rssShmem: number
  /** RSS minus V8's heap as committed (heapTotal): native memory, code, the binary. */
  nonHeap: number
  threads: number
  detachedContexts: number
}

const FIELDS = [
  'rss',
  'heapUsed',
  'heapTotal',
  'newSpace',
  'nonHeap',
  'external',
  'arrayBuffers',
  'mallocedMemory',
  'rssAnon',
  'rssFile',
] as const
type Field = (typeof FIELDS)[number]
/** The fields of each sample kept in the results file. */
const SAMPLE_FIELDS = ['rss', 'heapUsed', 'heapTotal', 'external', 'nonHeap', 'rssAnon'] as const

interface Sample extends Memory {
  t: number
  process: 'web' | 'worker'
}

/** Least-squares slope of y over x. */
function slope(points: Array<[number, number]>): number | null {
  if (points.length < 2) return null
  const n = points.length
  const mx = points.reduce((s, [x]) => s + x, 0) / n
  const my = points.reduce((s, [, y]) => s + y, 0) / n
  let num = 0
  let den = 0
  for (const [x, y] of points) {
    num += (x - mx) * (y - my)
    den += (x - mx) ** 2
  }
  return den === 0 ? null : num / den
}

/** Per process: each field's first and last value and its second-half slope, MB per 10 min. */
function summarize(samples: Sample[], durationS: number) {
  const half = samples.filter((s) => s.t >= durationS / 2)
  const first = samples[0]
  const last = samples[samples.length - 1]
  const fields = Object.fromEntries(
    FIELDS.map((field: Field) => {
      const perSecond = slope(half.map((s) => [s.t, s[field]]))
      return [
        field,
        {
          first: round(first[field], 1),
          last: round(last[field], 1),
          secondHalfSlopeMBPer10Min: perSecond === null ? null : round(perSecond * 600, 2),
        },
      ]
    })
  )
  const rssSlope = fields.rss.secondHalfSlopeMBPer10Min as number | null
  return {
    samples: samples.length,
    secondHalfSamples: half.length,
    threads: { first: first.threads, last: last.threads },
    ...fields,
    pass: rssSlope !== null && rssSlope < TARGET_MB_PER_10_MIN,
  }
}

/**
 * The deliveries of the soak: payouts created and moved step by step to completed,
 * `IN_FLIGHT_PAYOUTS` at a time in turn, one in `DUPLICATE_EVERY` deliveries a recent one
 * sent again.
 */
class Traffic {
  static STEPS = [
    'compliance_cleared',
    'instructions_sent',
    'collected',
    'converting',
    'settling',
  ] as const
  #inFlight: Array<{ id: string; next: number; createdAt: string }> = []
  #recent: Array<{ id: string; type: string; body: string }> = []
  #count = 0
  payoutsStarted = 0
  payoutsCompleted = 0
  duplicates = 0

  #newPayout() {
    this.payoutsStarted++
    return { id: randomUUID(), next: 0, createdAt: new Date().toISOString() }
  }

  next(): { id: string; type: string; body: string } {
    this.#count++
    if (this.#count % DUPLICATE_EVERY === 0 && this.#recent.length > 0) {
      this.duplicates++
      return this.#recent[Math.floor(Math.random() * this.#recent.length)]
    }
    while (this.#inFlight.length < IN_FLIGHT_PAYOUTS) this.#inFlight.push(this.#newPayout())
    const payout = this.#inFlight.shift()!
    const now = new Date().toISOString()
    let type = 'payout.status.updated'
    let data: Record<string, unknown>
    if (payout.next === 0) {
      type = 'payout.created'
      data = {
        payoutId: payout.id,
        transactionType: 'fiat_to_fiat',
        payoutAmount: 125.5,
        payoutCurrency: 'EUR',
        sourceCurrency: 'USD',
        status: 'pending',
        createdAt: payout.createdAt,
      }
    } else if (payout.next <= Traffic.STEPS.length) {
      const step = Traffic.STEPS[payout.next - 1]
      data = {
        payoutId: payout.id,
        status: 'processing',
        provider: 'soak-rail',
        step,
        stepChangedAt: now,
      }
    } else {
      data = {
        payoutId: payout.id,
        status: 'completed',
        provider: 'soak-rail',
        step: 'delivered',
        stepChangedAt: now,
      }
    }
    payout.next++
    if (payout.next <= Traffic.STEPS.length + 1) this.#inFlight.push(payout)
    else this.payoutsCompleted++
    const delivery = {
      id: `dlv_soak_${randomUUID()}`,
      type,
      body: JSON.stringify({ type, createdAt: now, data }),
    }
    this.#recent.push(delivery)
    if (this.#recent.length > 500) this.#recent.shift()
    return delivery
  }
}

/** Sends `RATE` deliveries per second to `url` until stop(); counts the answers. */
function startLoad(url: string) {
  const pool = new Pool(url, { connections: 8, pipelining: 1 })
  const traffic = new Traffic()
  const stats = { sent: 0, ok: 0, failed: 0, errors: 0, skipped: 0, maxMs: 0, inFlightMax: 0 }
  let inFlight = 0
  let stopped: Promise<void> | undefined
  const started = performance.now()
  const send = async () => {
    const delivery = traffic.next()
    const sentAt = performance.now()
    stats.sent++
    inFlight++
    stats.inFlightMax = Math.max(stats.inFlightMax, inFlight)
    try {
      const response = await pool.request({
        path: WEBHOOK_PATH,
        method: 'POST',
        body: delivery.body,
        headers: {
          'content-type': 'application/json',
          'svc-signature': signPayload(BENCH_SECRET, Math.floor(Date.now() / 1000), delivery.body),
          'svc-delivery-id': delivery.id,
          'svc-event-type': delivery.type,
        },
        headersTimeout: 15_000,
        bodyTimeout: 15_000,
      })
      await response.body.dump()
      if (response.statusCode === 200) stats.ok++
      else stats.failed++
    } catch {
      stats.errors++
    } finally {
      inFlight--
      stats.maxMs = Math.max(stats.maxMs, performance.now() - sentAt)
    }
  }
  const timer = setInterval(() => {
    const due = Math.floor(((performance.now() - started) / 1000) * RATE)
    // More than a second behind (a stalled app): the deficit is dropped, not burst.
    if (due - stats.sent - stats.skipped > RATE) stats.skipped = due - stats.sent - RATE
    while (stats.sent + stats.skipped < due) {
      if (inFlight >= 200) {
        stats.skipped++
        continue
      }
      void send()
    }
  }, 20)
  return {
    stats,
    traffic,
    /** Stops sending, waits (20 s at most) for the answers in flight; once. */
    stop() {
      stopped ??= (async () => {
        clearInterval(timer)
        const deadline = Date.now() + 20_000
        while (inFlight > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50))
        await pool.close()
      })()
      return stopped
    },
  }
}

/** Connection settings of a store, as both processes get them. */
function connectionFor(store: Store, sqliteFile: string): Record<string, any> {
  if (store.db === 'pg') {
    return {
      client: 'pg',
      connection: { ...PG_CONNECTION, database: PG_DATABASE },
      pool: { min: 2, max: 10 },
    }
  }
  if (store.db === 'mysql') {
    return {
      client: 'mysql2',
      connection: { ...MYSQL_CONNECTION, database: MYSQL_DATABASE },
      pool: { min: 2, max: 10 },
    }
  }
  return { client: 'better-sqlite3', connection: { filename: sqliteFile }, useNullAsDefault: true }
}

/** Creates the soak's database on PostgreSQL or MySQL when missing; why not, when it fails. */
async function prepareDatabase(store: Store): Promise<string | null> {
  if (store.db === 'sqlite') return null
  const client = knex({
    client: store.db === 'pg' ? 'pg' : 'mysql2',
    connection: (store.db === 'pg'
      ? { ...PG_CONNECTION, connectionTimeoutMillis: 3000 }
      : { ...MYSQL_CONNECTION, database: undefined, connectTimeout: 3000 }) as any,
    pool: { min: 0, max: 1 },
    acquireConnectionTimeout: 3000,
  })
  try {
    if (store.db === 'pg') {
      const found = await client.raw('select 1 from pg_database where datname = ?', [PG_DATABASE])
      if (found.rows.length === 0) await client.raw(`create database "${PG_DATABASE}"`)
    } else {
      await client.raw(`create database if not exists \`${MYSQL_DATABASE}\``)
    }
    return null
  } catch (error) {
    return (error as Error).message
  } finally {
    await client.destroy().catch(() => {})
  }
}

function removeSqlite(file: string) {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(file + suffix, { force: true })
}

function fileMB(file: string) {
  try {
    return statSync(file).size / 1024 / 1024
  } catch {
    return 0
  }
}

const UNPROCESSED = ['pending', 'processing', 'failed']
const backlogOf = (states: Record<string, number>) =>
  UNPROCESSED.reduce((n, state) => n + (states[state] ?? 0), 0)

interface EmulatorReady {
  baseUrl: string
  apiKey: string
}

/** One store's soak: its two processes, the load, the samples, the summary. */
async function soakStore(store: Store, emulator: EmulatorReady) {
  const skipped = await prepareDatabase(store)
  if (skipped) {
    log(`${store.key}: skipped, ${skipped}`)
    return { label: store.label, skipped }
  }
  const prefix = `soak${Math.random().toString(36).slice(2, 7)}_`
  const sqliteFile = new URL(`./soak-${process.pid}-${store.key}.sqlite`, TMP).pathname
  removeSqlite(sqliteFile)
  const series = `${OUT}/${store.key}.jsonl`
  const base: Omit<SoakChildOptions, 'role' | 'logFile'> = {
    db: store.db,
    connection: connectionFor(store, sqliteFile),
    sqlitePragmas: store.db === 'sqlite' ? SQLITE_PRAGMAS : undefined,
    prefix,
    secret: BENCH_SECRET,
    apiKey: emulator.apiKey,
    baseUrl: emulator.baseUrl,
    webhookPath: WEBHOOK_PATH,
  }
  const start = (role: 'web' | 'worker') =>
    startChild<{ url?: string; pid: number }>(CHILD, {
      args: [JSON.stringify({ ...base, role, logFile: `${OUT}/${store.key}-${role}.log` })],
      execArgv: ['--expose-gc', ...NODE_FLAGS],
    })
  log(`${store.key}: ${store.label}, table prefix ${prefix}`)
  const web = await start('web')
  let worker: Child<{ pid: number }> | undefined
  const samples: Sample[] = []
  const stores: Array<{ t: number; inbox: Record<string, number>; backlog: number }> = []
  let load: ReturnType<typeof startLoad> | undefined
  try {
    worker = await start('worker')
    log(`${store.key}: web pid ${web.pid} at ${web.ready.url}, worker pid ${worker.pid}`)
    const durationS = MINUTES * 60
    const sample = async (t: number) => {
      for (const [name, child] of [
        ['web', web],
        ['worker', worker!],
      ] as const) {
        const memory = await child.call<Memory & { gc: boolean }>('memory')
        if (!memory.gc) throw new Error(`the ${name} process has no gc(): not --expose-gc`)
        const row: Sample = { t, process: name, ...memory }
        delete (row as Partial<typeof memory>).gc
        samples.push(row)
        appendFileSync(series, JSON.stringify({ store: store.key, ...row }) + '\n')
      }
      const inbox = await web.call<Record<string, number>>('inbox')
      const extra = {
        t,
        inbox,
        backlog: backlogOf(inbox),
        load: { ...load?.stats },
        ...(store.db === 'sqlite'
          ? { sqliteMB: round(fileMB(sqliteFile), 1), walMB: round(fileMB(`${sqliteFile}-wal`), 1) }
          : {}),
      }
      stores.push(extra)
      appendFileSync(
        series,
        JSON.stringify({ store: store.key, process: 'store', ...extra }) + '\n'
      )
      const w = samples[samples.length - 2]
      const k = samples[samples.length - 1]
      log(
        `${store.key} t=${t}s web rss ${w.rss.toFixed(1)} heap ${w.heapUsed.toFixed(1)}/${w.heapTotal.toFixed(1)} ext ${w.external.toFixed(1)}` +
          ` | worker rss ${k.rss.toFixed(1)} heap ${k.heapUsed.toFixed(1)}/${k.heapTotal.toFixed(1)} ext ${k.external.toFixed(1)}` +
          ` anon ${k.rssAnon.toFixed(1)} file ${k.rssFile.toFixed(1)}` +
          ` | sent ${load?.stats.sent ?? 0} ok ${load?.stats.ok ?? 0} backlog ${extra.backlog}`
      )
    }
    // t = 0: both processes started, before any delivery.
    await sample(0)
    const t0 = Date.now()
    load = startLoad(web.ready.url!)
    for (let next = SAMPLE_S; next <= durationS; next += SAMPLE_S) {
      const wait = t0 + next * 1000 - Date.now()
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
      await sample(next)
    }
    await load.stop()
    const stats = load.stats
    const traffic = load.traffic
    const inboxAtEnd = await web.call<Record<string, number>>('inbox')
    const backlogAtEnd = backlogOf(inboxAtEnd)
    // The worker's own pace: how long it takes to empty what the load left.
    const drainStarted = Date.now()
    let inboxAfter = inboxAtEnd
    while (backlogOf(inboxAfter) > 0 && Date.now() - drainStarted < DRAIN_WAIT_MS) {
      await new Promise((resolve) => setTimeout(resolve, 1000))
      inboxAfter = await web.call<Record<string, number>>('inbox')
    }
    const ledger = await web.call<Record<string, number>>('ledger')
    const result = {
      label: store.label,
      prefix,
      durationS,
      web: summarize(
        samples.filter((s) => s.process === 'web'),
        durationS
      ),
      worker: summarize(
        samples.filter((s) => s.process === 'worker'),
        durationS
      ),
      backlogAtEnd,
      inboxAtEnd,
      backlogAfterDrain: backlogOf(inboxAfter),
      drainSeconds: round((Date.now() - drainStarted) / 1000, 1),
      ledger,
      load: {
        ...stats,
        maxMs: round(stats.maxMs, 1),
        duplicates: traffic.duplicates,
        payoutsStarted: traffic.payoutsStarted,
        payoutsCompleted: traffic.payoutsCompleted,
      },
      ...(store.db === 'sqlite'
        ? {
            sqliteFileMB: round(fileMB(sqliteFile), 1),
            walMB: round(fileMB(`${sqliteFile}-wal`), 1),
          }
        : {}),
      series,
      // The main figures of each sample (every field is in the JSON-lines series).
      samples: samples.map((s) => [
        s.t,
        s.process,
        ...SAMPLE_FIELDS.map((field) => round(s[field], 1)),
      ]),
      sampleFields: ['t', 'process', ...SAMPLE_FIELDS],
      backlog: stores.map((s) => [s.t, s.backlog]),
    }
    log(
      `${store.key}: done; backlog ${backlogAtEnd} at the end, ${result.backlogAfterDrain} after ${result.drainSeconds}s;` +
        ` ledger ${JSON.stringify(ledger)}`
    )
    return result
  } catch (error) {
    log(`${store.key}: failed: ${(error as Error).stack}`)
    return { label: store.label, error: (error as Error).message, samples }
  } finally {
    // Stopped already after a full run; after a failure, no delivery goes on.
    await load?.stop().catch(() => {})
    await worker?.stop()
    await web.stop()
    removeSqlite(sqliteFile)
  }
}

/** The results' rows: per store and process, the RSS slope over the second half. */
function checks(stores: Record<string, any>) {
  return Object.entries(stores).flatMap(([key, r]) =>
    r.web && r.worker
      ? (['web', 'worker'] as const).map((name) => ({
          id: `${key}.soak.${name}.rss_slope${ARM ? `.${ARM}` : ''}`,
          measure: `${name} RSS slope over the second half (MB per 10 min)`,
          db: key,
          value: r[name].rss.secondHalfSlopeMBPer10Min,
          unit: 'MB/10 min',
          target: `< ${TARGET_MB_PER_10_MIN}`,
          pass: r[name].pass,
        }))
      : [
          {
            id: `${key}.soak.skipped${ARM ? `.${ARM}` : ''}`,
            measure: 'memory soak',
            db: key,
            value: null,
            unit: '',
            target: r.skipped ? `skipped: ${r.skipped}` : `failed: ${r.error}`,
            pass: r.skipped ? null : false,
          },
        ]
  )
}

function printSummary(stores: Record<string, any>) {
  const header = [
    'store',
    'process',
    'RSS first->last',
    'heap',
    'external',
    'arrayBuf',
    'slope/10min rss heap ext',
    'result',
  ]
  const rows: string[][] = []
  for (const [key, r] of Object.entries(stores)) {
    if (!r.web) {
      rows.push([key, '-', r.skipped ?? r.error, '', '', '', '', r.skipped ? 'skip' : 'FAIL'])
      continue
    }
    for (const name of ['web', 'worker']) {
      const p = r[name]
      const fl = (f: string) => `${p[f].first}->${p[f].last}`
      const s = (f: string) => String(p[f].secondHalfSlopeMBPer10Min)
      rows.push([
        key,
        name,
        fl('rss'),
        fl('heapUsed'),
        fl('external'),
        fl('arrayBuffers'),
        `${s('rss')} ${s('heapUsed')} ${s('external')}`,
        p.pass ? 'PASS' : 'MISS',
      ])
    }
  }
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i].length)))
  const line = (cells: string[]) =>
    '| ' + cells.map((c, i) => c.padEnd(widths[i])).join(' | ') + ' |'
  console.log(line(header))
  for (const row of rows) console.log(line(row))
  for (const [key, r] of Object.entries(stores)) {
    if (r.web) {
      console.log(
        `${key}: backlog ${r.backlogAtEnd} when the load stopped, ${r.backlogAfterDrain} after ${r.drainSeconds}s;` +
          ` sent ${r.load.sent} (ok ${r.load.ok}, failed ${r.load.failed}, errors ${r.load.errors}, skipped ${r.load.skipped})`
      )
    }
  }
}

async function main() {
  const stores = STORES.filter((s) => DB_KEYS.includes(s.key))
  if (stores.length === 0) throw new Error(`SOAK_DBS=${DB_KEYS.join(',')}: no known store`)
  const capMs = (PARALLEL ? MINUTES : MINUTES * stores.length) * 60_000 + 15 * 60_000
  const watchdog = setTimeout(() => {
    console.error(`soak: hard cap of ${Math.round(capMs / 60_000)} min reached, aborting`)
    process.exit(2)
  }, capMs)
  watchdog.unref()
  mkdirSync(OUT, { recursive: true })
  mkdirSync(TMP, { recursive: true })
  log(
    `soak: ${stores.map((s) => s.key).join(', ')}${PARALLEL ? ' at once' : ' one after another'},` +
      ` ${MINUTES} min each at ${RATE} deliveries/s (1 in ${DUPLICATE_EVERY} sent again), samples every ${SAMPLE_S}s;` +
      ` node ${process.version}, ${os.cpus().length} cpus, load ${os
        .loadavg()
        .map((x) => x.toFixed(2))
        .join(' ')}`
  )
  log(`series and logs in ${OUT}; results to ${RESULTS}`)
  const emulator = await startChild<EmulatorReady>(EMULATOR)
  const results: Record<string, any> = {}
  try {
    if (PARALLEL) {
      const done = await Promise.all(stores.map((store) => soakStore(store, emulator.ready)))
      stores.forEach((store, i) => (results[store.key] = done[i]))
    } else {
      for (const store of stores) results[store.key] = await soakStore(store, emulator.ready)
    }
  } finally {
    await emulator.stop()
  }
  const output = {
    date: new Date().toISOString(),
    node: process.version,
    machine: {
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model ?? 'unknown',
      totalmemMB: Math.round(os.totalmem() / 1024 / 1024),
      loadavgAtEnd: os.loadavg().map((x) => round(x, 2)),
    },
    settings: {
      arm: ARM ?? null,
      minutes: MINUTES,
      rate: RATE,
      duplicateEvery: DUPLICATE_EVERY,
      inFlightPayouts: IN_FLIGHT_PAYOUTS,
      sampleS: SAMPLE_S,
      parallel: PARALLEL,
      sqlitePragmas: SQLITE_PRAGMAS,
      mallocArenaMax: process.env.MALLOC_ARENA_MAX ?? null,
      nodeFlags: NODE_FLAGS,
      targetMBPer10Min: TARGET_MB_PER_10_MIN,
    },
    notes: [
      'Per store: a web process (webhook.processing: worker; verify, store, acknowledge) and `node ace payouts:work` (defaults: poll 5 s when idle, batches of 100, the jobs on), both with Transmit and --expose-gc, the emulator as the service.',
      'Each payout: payout.created, five payout.status.updated steps (processing), then completed; 40 payouts in flight in turn; one delivery in 20 is a recent one sent again (same id and body, fresh signature).',
      'Memory read in each process after gc() twice (MB); rssAnon/rssFile from /proc/self/status; slopes are least squares over the samples of the second half, in MB per 10 min.',
      'Backlog = inbox rows pending, processing or failed.',
    ],
    checks: checks(results),
    stores: results,
  }
  // SOAK_ARM=<name>: a comparison (other flags, ...) kept beside the main run, under
  // `arms.<name>`; a main run keeps the arms of the file it replaces.
  let previous: Record<string, any> = {}
  try {
    previous = JSON.parse(readFileSync(RESULTS, 'utf8'))
  } catch {}
  const written = ARM
    ? { ...previous, arms: { ...previous.arms, [ARM]: output } }
    : { ...output, ...(previous.arms ? { arms: previous.arms } : {}) }
  const prettierConfig = await resolveConfig(RESULTS)
  writeFileSync(
    RESULTS,
    await format(JSON.stringify(written), { ...prettierConfig, parser: 'json' })
  )
  console.log('')
  printSummary(results)
  log(`results written to ${RESULTS}`)
}

main()
  .then(() => process.exit(0))
  .catch((error) => {
    console.error(error)
    process.exit(1)
  })
