import { monitorEventLoopDelay } from 'node:perf_hooks'
import { emptyInbox, startBenchApp, type BenchDb } from './app.ts'
import { failToParent, serveParent } from './ipc.ts'

/**
 * Child process of the observability-cost part (bench/otel.ts): the bench app of
 * bench/app_server.ts (argv: db kind, SQLite file, `--wal`), with `--otel` OpenTelemetry's
 * providers and `new PayoutsInstrumentation()` installed first, before the app boots and its
 * routes take a request, as `@adonisjs/otel` does from the first line of `bin/server.ts`.
 * Without `--otel` it is the same app with nothing installed. Only what the part needs:
 * load statistics, truncate, processing on or off, and what the exporters received.
 */
async function main() {
  const db = (process.argv[2] ?? 'sqlite') as BenchDb
  const sqliteFile = process.argv[3] ?? ''
  const journal: 'wal' | 'default' = process.argv.includes('--wal') ? 'wal' : 'default'
  // Loaded only with --otel: the other arm has nothing of OpenTelemetry's SDK in memory.
  const sdk = process.argv.includes('--otel') ? await import('./otel_sdk.ts') : null
  const otel = sdk?.installOtel() ?? null
  const bench = await startBenchApp({ db, sqliteFile, journal })
  bench.setProcessing(false)

  const loop = monitorEventLoopDelay({ resolution: 1 })
  loop.enable()
  let mayBeDraining = false

  serveParent(
    { url: bench.url, prefix: bench.prefix, pid: process.pid, otel: otel !== null },
    {
      processing: (args: { on: boolean }) => {
        mayBeDraining ||= args.on
        bench.setProcessing(args.on)
      },
      resetStats: async () => {
        loop.reset()
        bench.serverTimes.clear()
        await otel?.resetStats()
      },
      stats: async (args: { path: string }) => ({
        loopDelayMaxMs: loop.max / 1e6,
        serverSamples: bench.serverTimes.get(args.path) ?? [],
        otel: (await otel?.stats()) ?? null,
        rssMB: process.memoryUsage().rss / 1024 / 1024,
      }),
      truncate: async () => {
        await emptyInbox(bench, journal, mayBeDraining)
        mayBeDraining = false
      },
    },
    async () => {
      await bench.close()
      await otel?.shutdown()
    }
  )
}

main().catch(failToParent)
