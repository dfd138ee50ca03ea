import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks'
import v8 from 'node:v8'
import { tracingChannel } from 'node:diagnostics_channel'
import { CHANNEL_NAMES } from '../src/tracing/channels.ts'
import { changesChannel, CommitNotices } from '../src/database/change_notices.ts'
import { PayoutLedger } from '../src/ledger/payout_ledger.ts'
import { BroadcastRelay } from '../src/service/broadcast_relay.ts'
import { emptyInbox, startBenchApp, type BenchDb } from './app.ts'
import { growthCommands, processFor } from './growth_child.ts'
import { failToParent, serveParent } from './ipc.ts'
import { serverCpuMs } from './server_cpu.ts'

/**
 * Child process: one bench app (argv: db kind, SQLite file), driven by bench/run.ts over
 * IPC so the load generator and the server do not share an event loop.
 */
async function main() {
  const db = (process.argv[2] ?? 'sqlite') as BenchDb
  const sqliteFile = process.argv[3] ?? ''
  const journal: 'wal' | 'default' = process.argv.includes('--wal') ? 'wal' : 'default'
  const relay = process.argv.includes('--relay')
  const bench = await startBenchApp({ db, sqliteFile, journal, relay })
  const lucid = await bench.app.container.make('lucid.db')
  const client = () => lucid.connection()
  bench.setProcessing(process.argv.includes('--processing'))

  // Event-loop delay and GC pauses, reset per run, to explain latency tails.
  const loop = monitorEventLoopDelay({ resolution: 1 })
  loop.enable()
  let pauses = { count: 0, totalMs: 0, maxMs: 0 }
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      pauses.count++
      pauses.totalMs += entry.duration
      pauses.maxMs = Math.max(pauses.maxMs, entry.duration)
    }
  }).observe({ entryTypes: ['gc'] })
  // How long each inline batch took (its transaction and its parsing), reset per run.
  let batchMs: number[] = []
  const batchStarts = new WeakMap<object, number>()
  tracingChannel(CHANNEL_NAMES.inboxBatch).subscribe({
    start: (context: object) => void batchStarts.set(context, performance.now()),
    asyncEnd: (context: object) => {
      const started = batchStarts.get(context)
      if (started !== undefined && batchMs.length < 100_000)
        batchMs.push(performance.now() - started)
    },
    end: () => {},
    asyncStart: () => {},
    error: () => {},
  })
  // Set once the inbox processor may have been started, until the next truncate.
  let mayBeDraining = false

  serveParent(
    { url: bench.url, prefix: bench.prefix, pid: process.pid },
    {
      ...growthCommands(bench, lucid, db),
      processing: (args: { on: boolean }) => {
        mayBeDraining ||= args.on
        bench.setProcessing(args.on)
      },
      resetStats: () => {
        loop.reset()
        pauses = { count: 0, totalMs: 0, maxMs: 0 }
        batchMs = []
        bench.serverTimes.clear()
      },
      stats: (args: { path: string }) => ({
        loopDelayMaxMs: loop.max / 1e6,
        gc: { ...pauses },
        serverSamples: bench.serverTimes.get(args.path) ?? [],
        batchMs,
      }),
      truncate: async () => {
        await emptyInbox(bench, journal, mayBeDraining)
        mayBeDraining = false
      },
      count: async () => {
        const rows: Array<{ state: string; total: number | string }> = await client()
          .from(bench.inboxTable)
          .select('state')
          .count('* as total')
          .groupBy('state')
        return Object.fromEntries(rows.map((row) => [row.state, Number(row.total)]))
      },
      /** Payouts owned by `ownerId` (as execute would store them), so broadcasts reach it. */
      seedPayouts: async (args: { ids: string[]; ownerId: string }) => {
        const ledger = new PayoutLedger(lucid)
        for (const payoutId of args.ids) {
          await ledger.apply({
            payoutId,
            status: 'pending',
            step: 'initiated',
            source: 'execute',
            fields: { ownerId: args.ownerId },
          })
        }
        return args.ids.length
      },
      /** Processes the backlog for `ms`, then stops kicking; rows processed per second. */
      drainRate: async (args: { ms: number }) => {
        const processed = async () => {
          const row = await client()
            .from(bench.inboxTable)
            .where('state', 'processed')
            .count('* as total')
            .first()
          return Number(row?.total ?? 0)
        }
        const before = await processed()
        mayBeDraining = true
        const cpu = process.cpuUsage()
        const serverBefore = serverCpuMs(db)
        const seconds = await processFor(bench, args.ms)
        const used = process.cpuUsage(cpu)
        const serverAfter = serverCpuMs(db)
        const rows = (await processed()) - before
        return {
          rows,
          seconds,
          appCpuMs: (used.user + used.system) / 1000,
          serverCpuMs:
            serverBefore === null || serverAfter === null ? null : serverAfter - serverBefore,
        }
      },
      memory: () => {
        const gc = (globalThis as { gc?: () => void }).gc
        if (gc) {
          gc()
          gc()
        }
        const spaces = Object.fromEntries(
          v8.getHeapSpaceStatistics().map((space) => [space.space_name, space.space_size])
        )
        return { gc: Boolean(gc), ...process.memoryUsage(), spaces }
      },
      /** The relay's statements and NOTIFYs so far; on PostgreSQL, its LISTEN connections. */
      relayStats: async () => {
        const listening =
          db !== 'pg'
            ? null
            : await client()
                .from('pg_stat_activity')
                .where('query', `LISTEN "${changesChannel(bench.prefix)}"`)
                .count('* as total')
                .first()
        return {
          statements: BroadcastRelay.statements,
          notices: CommitNotices.sent,
          listening: listening ? Number(listening.total) : null,
        }
      },
      /** How SQLite is opened here (null on PostgreSQL): journal, syncs, page cache. */
      sqlitePragmas: async () => {
        if (db !== 'sqlite') return null
        const pragma = async (name: string) => {
          const rows = await client().rawQuery(`PRAGMA ${name}`)
          return rows?.[0]?.[name]
        }
        return {
          journalMode: await pragma('journal_mode'),
          synchronous: await pragma('synchronous'),
          cacheSize: Number(await pragma('cache_size')),
          pageSize: Number(await pragma('page_size')),
        }
      },
    },
    () => bench.close()
  )
}

main().catch(failToParent)
