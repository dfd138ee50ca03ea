/**
 * A process of the memory soak (bench/soak.ts), run as an operator runs worker mode: `web`,
 * the host app serving the plugin's webhook route with `webhook.processing: 'worker'` (it only
 * verifies, stores and acknowledges), or `worker`, `node ace payouts:work` through AdonisJS's
 * own ace kernel (console environment, app started by the kernel, the command's defaults). Both
 * with Transmit and the payout channels registered, as an app's start file would; both log
 * at `info` (pino, synchronously, into the file the parent names). The parent drives it over
 * IPC (bench/ipc.ts): `memory` runs gc() twice and reports the process's memory; `inbox` and
 * `ledger` (web) count rows by state; `loopDelay` (web, for bench/worker_mode.ts) reports the
 * event loop's delay since its last reset (the monitor starts on the first call: the soak,
 * which never calls it, runs without it).
 */
import 'reflect-metadata'
import { readFileSync } from 'node:fs'
import { monitorEventLoopDelay, type ELDHistogram } from 'node:perf_hooks'
import v8 from 'node:v8'
import { ListLoader } from '@adonisjs/core/ace'
import { defineConfig as defineLoggerConfig, destination } from '@adonisjs/core/logger'
import type { ApplicationService } from '@adonisjs/core/types'
import PayoutsWork from '../commands/payouts_work.ts'
import { tableNames } from '../src/database/schema.ts'
import { hostAppIgnitor, serveHostApp } from '../tests/helpers/host_app.ts'
import { failToParent, serveParent } from './ipc.ts'

/** What the parent hands a child (JSON in argv[2]). */
export interface SoakChildOptions {
  role: 'web' | 'worker'
  db: 'sqlite' | 'pg' | 'mysql'
  /** Lucid's connection (the parent builds it; SQLite's pragmas are applied here). */
  connection: Record<string, any>
  /** SQLite: pragmas run on each new connection (`journal_mode = WAL`, ...). */
  sqlitePragmas?: string[]
  prefix: string
  secret: string
  apiKey: string
  baseUrl: string
  webhookPath: string
  logFile: string
}

const APP_ROOT = new URL('./tmp/', import.meta.url)
const MB = 1024 * 1024

/** The Lucid connection, with SQLite's pragmas in its pool hook (as docs/production.md). */
function connectionOf(options: SoakChildOptions) {
  if (options.db !== 'sqlite') return options.connection
  const pragmas = options.sqlitePragmas ?? []
  return {
    ...options.connection,
    pool: {
      afterCreate: (
        conn: { pragma(sql: string): unknown },
        done: (e: unknown, c: unknown) => void
      ) => {
        for (const pragma of pragmas) conn.pragma(pragma)
        done(null, conn)
      },
    },
  }
}

/** The app's `payouts` config: worker mode, everything else at its default. */
function payoutsConfig(options: SoakChildOptions) {
  return {
    apiKey: options.apiKey,
    baseUrl: options.baseUrl,
    webhook: { secret: options.secret, path: options.webhookPath, processing: 'worker' },
    ledger: { tablePrefix: options.prefix },
  }
}

function hostOptions(options: SoakChildOptions) {
  return {
    root: APP_ROOT,
    connection: connectionOf(options),
    transmit: true,
    config: {
      logger: defineLoggerConfig({
        default: 'app',
        loggers: {
          app: {
            enabled: true,
            level: 'info',
            destination: destination({ dest: options.logFile, sync: true, mkdir: true }),
          },
        },
      }),
    },
    payouts: payoutsConfig(options),
  }
}

/** Fields of /proc/self/status, in kB: what makes up the RSS (anonymous, file, shared). */
function procStatus() {
  const out: Record<string, number> = {}
  try {
    for (const line of readFileSync('/proc/self/status', 'utf8').split('\n')) {
      const match = /^(VmRSS|RssAnon|RssFile|RssShmem|VmSwap|Threads|VmHWM):\s+(\d+)/.exec(line)
      if (match) out[match[1]] = Number(match[2])
    }
  } catch {}
  return out
}

/** The process's memory after gc() twice, in MB (Threads as a count). */
function memory() {
  const gc = (globalThis as { gc?: () => void }).gc
  if (gc) {
    gc()
    gc()
  }
  const usage = process.memoryUsage()
  const heap = v8.getHeapStatistics()
  const spaces = Object.fromEntries(
    v8.getHeapSpaceStatistics().map((space) => [space.space_name, space.space_size / MB])
  )
  const status = procStatus()
  return {
    gc: Boolean(gc),
    rss: usage.rss / MB,
    heapUsed: usage.heapUsed / MB,
    heapTotal: usage.heapTotal / MB,
    external: usage.external / MB,
    arrayBuffers: usage.arrayBuffers / MB,
    /** Memory V8 itself took from malloc (not the heap). */
    mallocedMemory: heap.malloced_memory / MB,
    newSpace: spaces.new_space ?? 0,
    oldSpace: spaces.old_space ?? 0,
    rssAnon: (status.RssAnon ?? 0) / 1024,
    rssFile: (status.RssFile ?? 0) / 1024,
    rssShmem: (status.RssShmem ?? 0) / 1024,
    nonHeap: usage.rss / MB - usage.heapTotal / MB,
    threads: status.Threads ?? 0,
    detachedContexts: heap.number_of_detached_contexts,
  }
}

/** Rows of the inbox and of the ledger by state, on the app's connection. */
function counts(app: ApplicationService, prefix: string) {
  const tables = tableNames(prefix)
  const byState = async (table: string, column: string) => {
    const lucid = await app.container.make('lucid.db')
    const rows: Array<Record<string, string | number>> = await lucid
      .connection()
      .from(table)
      .select(column)
      .count('* as total')
      .groupBy(column)
    return Object.fromEntries(rows.map((row) => [String(row[column]), Number(row.total)]))
  }
  return {
    inbox: () => byState(tables.webhookDeliveries, 'state'),
    ledger: () => byState(tables.payouts, 'status'),
  }
}

async function web(options: SoakChildOptions) {
  const host = await serveHostApp({
    ...hostOptions(options),
    tablePrefix: options.prefix,
    async setup({ app, payouts }) {
      const transmit = await app.container.make('transmit')
      transmit.registerRoutes()
      payouts.registerChannels(transmit, { owner: () => true })
    },
  })
  const { inbox, ledger } = counts(host.app, options.prefix)
  let loop: ELDHistogram | undefined
  /** The event loop's delay since the last reset, ms; `reset` starts a new period. */
  const loopDelay = (args?: { reset?: boolean }) => {
    if (!loop) {
      loop = monitorEventLoopDelay({ resolution: 1 })
      loop.enable()
    }
    const delay = {
      count: loop.count,
      maxMs: loop.count ? loop.max / 1e6 : 0,
      p99Ms: loop.count ? loop.percentile(99) / 1e6 : 0,
    }
    if (args?.reset) loop.reset()
    return delay
  }
  serveParent({ url: host.url, pid: process.pid }, { memory, inbox, ledger, loopDelay }, () =>
    host.close()
  )
}

async function worker(options: SoakChildOptions) {
  // The IPC channel alone does not keep the process alive: it ends with the command.
  process.channel?.unref()
  let application: ApplicationService | undefined
  const stop = async () => {
    // As an operator stops it: SIGTERM, the batch in hand committed, the app terminated.
    process.kill(process.pid, 'SIGTERM')
    const deadline = Date.now() + 30_000
    while (Date.now() < deadline && !application?.isTerminated) {
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }
  await hostAppIgnitor(hostOptions(options))
    .ace()
    .configure(async (app) => {
      application = app
      const ace = await app.container.make('ace')
      ace.addLoader(new ListLoader([PayoutsWork]))
      await app.ready(async () => {
        const payouts = await app.container.make('payouts.manager')
        // As an app's start file does in every process (no routes: nobody subscribes here).
        payouts.registerChannels(await app.container.make('transmit'))
        serveParent({ pid: process.pid }, { memory }, stop)
      })
    })
    .handle(['payouts:work'])
}

const options: SoakChildOptions = JSON.parse(process.argv[2] ?? '{}')
;(options.role === 'worker' ? worker(options) : web(options)).catch(failToParent)
