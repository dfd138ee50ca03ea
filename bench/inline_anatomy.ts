import { spawn } from 'node:child_process'
import { rmSync, writeFileSync } from 'node:fs'
import { Session } from 'node:inspector/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import { partsOf } from '../src/service/payouts_service.ts'
import { startBenchApp, type BenchDb } from './app.ts'
import { busyCore } from './busy_core.ts'
import { loadRoute } from './load.ts'
import { percentile } from './stats.ts'

/**
 * Where an inline acknowledgement's time goes (issue #30), in one bench app on SQLite WAL
 * (`ANATOMY_DB=pg` for PostgreSQL), 500 deliveries/s from another process for
 * `ANATOMY_SECONDS` (8) after as long a warm-up: the route's own time against the client's,
 * how often the event loop stopped and for how long (a 1 ms timer's lateness), the GC's
 * pauses, and the app's CPU per acknowledgement. `ANATOMY_PROCESSING=0` holds processing
 * back; `ANATOMY_BUSY=1` keeps a core busy meanwhile. `ANATOMY_CPU_PROFILE=file` and
 * `ANATOMY_HEAP_PROFILE=file` write a CPU profile and an allocation profile of the measured
 * run. One JSON line; nothing is written to `bench/results.json`.
 *
 *   npm run bench:anatomy
 */
const RATE = 500

async function loadChild(url: string, seconds: number) {
  const run = await loadRoute({
    url,
    path: '/webhooks/payouts',
    tag: 'anatomy',
    durationS: seconds,
    connections: 10,
    overallRate: RATE,
    rampMs: 500,
  })
  process.stdout.write(`${JSON.stringify({ ...run, samples: [] })}\n`)
}

/** One load run from another process (so the generator never shares the app's event loop). */
function load(url: string, seconds: number): Promise<Awaited<ReturnType<typeof loadRoute>>> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        '--import=@poppinss/ts-exec',
        fileURLToPath(import.meta.url),
        '--load',
        url,
        String(seconds),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] }
    )
    let out = ''
    child.stdout.on('data', (chunk) => (out += chunk))
    child.on('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`load generator exited ${code}`))
    )
  })
}

const round = (value: number) => Math.round(value * 10) / 10

async function main() {
  const db = (process.env.ANATOMY_DB ?? 'sqlite') as BenchDb
  const seconds = Number(process.env.ANATOMY_SECONDS ?? 8)
  const file = join(tmpdir(), `inline_anatomy_${process.pid}.sqlite`)
  const bench = await startBenchApp({ db, sqliteFile: file, journal: 'wal' })
  bench.setProcessing(process.env.ANATOMY_PROCESSING !== '0')

  const loop = monitorEventLoopDelay({ resolution: 1 })
  const gc = { count: 0, totalMs: 0, maxMs: 0 }
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      gc.count++
      gc.totalMs += entry.duration
      gc.maxMs = Math.max(gc.maxMs, entry.duration)
    }
  }).observe({ entryTypes: ['gc'] })
  // How late a 1 ms timer fires: the stretches the event loop was held.
  const lateness: number[] = []
  let last = performance.now()
  const probe = setInterval(() => {
    const now = performance.now()
    lateness.push(now - last - 1)
    last = now
  }, 1)

  const busy = process.env.ANATOMY_BUSY === '1' ? busyCore(seconds * 2 + 30) : null
  await load(bench.url, seconds)
  loop.reset()
  loop.enable()
  bench.serverTimes.clear()
  lateness.length = 0
  Object.assign(gc, { count: 0, totalMs: 0, maxMs: 0 })

  const session = new Session()
  session.connect()
  const cpuProfile = process.env.ANATOMY_CPU_PROFILE
  const heapProfile = process.env.ANATOMY_HEAP_PROFILE
  if (cpuProfile) {
    await session.post('Profiler.enable')
    await session.post('Profiler.start')
  }
  if (heapProfile) {
    await session.post('HeapProfiler.enable')
    // Every allocation sampled, the ones collected since included: where the young generation fills from.
    await session.post('HeapProfiler.startSampling', {
      samplingInterval: 4096,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: true,
    })
  }
  const cpu = process.cpuUsage()
  const run = await load(bench.url, seconds)
  const used = process.cpuUsage(cpu)
  if (cpuProfile) {
    const { profile } = await session.post('Profiler.stop')
    writeFileSync(cpuProfile, JSON.stringify(profile))
  }
  if (heapProfile) {
    const { profile } = await session.post('HeapProfiler.stopSampling')
    writeFileSync(heapProfile, JSON.stringify(profile))
  }
  session.disconnect()
  loop.disable()
  clearInterval(probe)
  busy?.stop()
  const { processor } = await partsOf(bench.payouts)
  await processor.idle()

  const inApp = [...(bench.serverTimes.get('/webhooks/payouts') ?? [])].sort((a, b) => a - b)
  lateness.sort((a, b) => a - b)
  const longer = (ms: number) => lateness.filter((gap) => gap > ms).length
  const result = {
    db,
    processing: process.env.ANATOMY_PROCESSING !== '0',
    busyCore: busy !== null,
    seconds,
    acknowledged: run.ok,
    clientMs: {
      p50: round(run.latency.p50),
      p99: round(run.latency.p99),
      max: round(run.latency.max),
    },
    inAppMs: { p50: round(percentile(inApp, 50)), p99: round(percentile(inApp, 99)) },
    generatorLoopDelayMs: {
      p99: round(run.generatorLoopDelay.p99),
      max: round(run.generatorLoopDelay.max),
    },
    loopHeld: {
      p99Ms: round(percentile(lateness, 99)),
      maxMs: round(lateness.at(-1) ?? 0),
      perSecondOver5Ms: round(longer(5) / seconds),
      perSecondOver10Ms: round(longer(10) / seconds),
      perSecondOver20Ms: round(longer(20) / seconds),
    },
    gc: { count: gc.count, totalMs: round(gc.totalMs), maxMs: round(gc.maxMs) },
    appCpuPerAcknowledgementMs:
      Math.round(((used.user + used.system) / 1000 / run.ok) * 1000) / 1000,
  }
  process.stdout.write(`${JSON.stringify(result)}\n`)
  await bench.close()
  for (const suffix of ['', '-wal', '-shm']) rmSync(file + suffix, { force: true })
}

if (process.argv[2] === '--load') {
  await loadChild(process.argv[3], Number(process.argv[4]))
} else {
  await main()
  process.exit(0)
}
