import { rmSync } from 'node:fs'
import { ROUTES } from './app.ts'
import type { ClientOverheadResult } from './client_overhead.ts'
import type { IngestResult } from './ingest.ts'
import { startChild, type Child } from './ipc.ts'
import { loadRoute, pool, strip, type LoadResult, type LoadRun } from './load.ts'
import type { OtelClientSettings } from './otel_client.ts'
import { OTEL_SDK, type OtelStats } from './otel_sdk.ts'
import { QUICK, TMP, type Check, type DbConfig } from './setup.ts'
import { median, round as rounded, summarize, type Summary } from './stats.ts'

/**
 * The cost of the plugin's OpenTelemetry instrumentation (`BENCH_ONLY=otel`): the plugin's
 * webhook route and `getPayout` through `PayoutsClient`, with `new PayoutsInstrumentation()`,
 * a tracer provider (BatchSpanProcessor into an in-memory exporter, emptied every second) and
 * a meter provider (periodic reader, every second) installed, against the same with nothing
 * installed. Side by side in one run, the arms alternating in rounds:
 *
 * - ingest, per store: two apps alive together (bench/otel_app_server.ts, one with `--otel`,
 *   each on its own SQLite file or table prefix), max throughput of the plugin route in
 *   rounds (each arm once per round, the leading arm alternating), then the acknowledgement
 *   at a fixed rate in rounds the same way, judged round by round (the median of the rounds'
 *   ratios), then once each with the inbox processed in-process (info: the batch and notify
 *   spans);
 * - client: two bench/otel_client.ts processes, one with `--otel`, calling `getPayout` on one
 *   emulator in blocks of calls, the arms alternating block by block.
 *
 * With nothing installed the arms are the plugin as the other parts measure it: the off arms
 * are compared with the ingest and client parts' figures when those ran in the same run.
 */

/** The settings of the observability-cost part. */
export const OTEL = {
  connections: 16,
  warmupS: 1,
  rounds: QUICK ? 2 : 6,
  roundS: QUICK ? 1 : 2,
  fixedRate: 500,
  fixedConnections: 20,
  fixedRounds: QUICK ? 2 : 6,
  fixedS: QUICK ? 2 : 3,
  /** Answers in a fixed-rate run's first 250 ms are counted, not in its latencies (load.ts). */
  rampMs: 250,
  processingS: QUICK ? 2 : 3,
  client: {
    calls: 1000,
    block: 100,
    warmup: 200,
    rounds: QUICK ? 3 : 11,
  } satisfies OtelClientSettings,
  sdk: OTEL_SDK,
}

/** The stores the ingest comparison runs on (BENCH_DBS narrows them). */
export const OTEL_DBS = ['sqlite-wal', 'pg']

const OTEL_APP_SERVER = new URL('./otel_app_server.ts', import.meta.url)
const OTEL_CLIENT = new URL('./otel_client.ts', import.meta.url)
const EMULATOR_SERVER = new URL('./emulator_server.ts', import.meta.url)

type Arm = 'off' | 'on'
const ARMS: Arm[] = ['off', 'on']
/** Round `r`'s order: nothing installed first in even rounds, instrumented first in odd. */
const order = (r: number): Arm[] => (r % 2 === 0 ? ['off', 'on'] : ['on', 'off'])

interface ChildStats {
  loopDelayMaxMs: number
  serverSamples: number[]
  otel: OtelStats | null
  rssMB: number
}

interface Run {
  load: LoadRun
  stats: ChildStats
}

type Ready = { url: string; otel: boolean }

export interface OtelIngestResult {
  settings: Omit<typeof OTEL, 'client'>
  /** Max throughput: deliveries acknowledged per second, one entry per round and arm. */
  max: Record<Arm, LoadResult[]>
  /** Median over the rounds. */
  maxOkPerSecond: Record<Arm, number>
  /** on / off of each round; the figure is their median. */
  perRoundThroughputRatio: number[]
  throughputRatio: number
  /** Fixed rate, processing deferred: each run's p99, and all runs pooled. */
  fixedPerRoundP99: Record<Arm, number[]>
  fixed: Record<Arm, LoadResult>
  perRoundP99Ratio: number[]
  /** Median of the rounds' on / off p99 (judged); and the pooled p99s' ratio (info). */
  p99Ratio: number
  pooledP99Ratio: number
  /** Inside the app (request received -> response finished), fixed-rate runs pooled. */
  inApp: Record<Arm, Summary>
  loopDelayMaxMs: Record<Arm, number>
  /** One fixed-rate run each with the inbox processed in-process (info). */
  processing: Record<Arm, LoadResult>
  /** Spans the instrumented app exported, per delivery acknowledged (max and fixed runs). */
  spansPerDelivery: number
  spans: Record<string, number>
  /** Spans of the processed-in-process run, by name. */
  processingSpans: Record<string, number>
  metricExports: number
  /** non-2xx answers and errors over every run, per arm. */
  failures: Record<Arm, number>
  rssMB: Record<Arm, number>
}

function sqliteFile(name: string) {
  return new URL(`./${name}-${process.pid}.sqlite`, TMP).pathname
}

function removeSqlite(file: string) {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(file + suffix, { force: true })
}

/** Both apps of a store, alive together, stopped and their files removed afterwards. */
async function withArms<T>(
  config: DbConfig,
  fn: (apps: Record<Arm, Child<Ready>>) => Promise<T>
): Promise<T> {
  const files = {
    off: sqliteFile(`${config.key}-otel-off`),
    on: sqliteFile(`${config.key}-otel-on`),
  }
  const apps: Partial<Record<Arm, Child<Ready>>> = {}
  try {
    for (const arm of ARMS) {
      removeSqlite(files[arm])
      apps[arm] = await startChild<Ready>(OTEL_APP_SERVER, {
        args: [
          config.db,
          files[arm],
          ...(config.wal ? ['--wal'] : []),
          ...(arm === 'on' ? ['--otel'] : []),
        ],
      })
      if (apps[arm]!.ready.otel !== (arm === 'on')) throw new Error(`${arm} arm: wrong app`)
    }
    return await fn(apps as Record<Arm, Child<Ready>>)
  } finally {
    for (const arm of ARMS) {
      await apps[arm]?.stop()
      removeSqlite(files[arm])
    }
  }
}

/** The observability-cost comparison of the webhook route on `config`'s store. */
export async function measureOtelIngest(
  config: DbConfig,
  log: (line: string) => void
): Promise<OtelIngestResult> {
  return withArms(config, async (apps) => {
    const run = async (
      arm: Arm,
      options: { durationS: number; connections: number; overallRate?: number; tag: string }
    ): Promise<Run> => {
      const app = apps[arm]
      await app.call('truncate', undefined, 120_000)
      await app.call('resetStats')
      const load = await loadRoute({
        url: app.ready.url,
        path: ROUTES.plugin,
        tag: `otel_${arm}_${options.tag}`,
        durationS: options.durationS,
        connections: options.connections,
        overallRate: options.overallRate,
        rampMs: options.overallRate ? OTEL.rampMs : undefined,
      })
      const stats = await app.call<ChildStats>('stats', { path: ROUTES.plugin })
      return { load, stats }
    }
    const maxRun = (arm: Arm, durationS = OTEL.roundS) =>
      run(arm, { durationS, connections: OTEL.connections, tag: 'max' })
    const fixedRun = (arm: Arm) =>
      run(arm, {
        durationS: OTEL.fixedS,
        connections: OTEL.fixedConnections,
        overallRate: OTEL.fixedRate,
        tag: 'fixed',
      })

    for (const arm of ARMS) await apps[arm].call('processing', { on: false })
    for (const arm of ARMS) await maxRun(arm, OTEL.warmupS)

    let acknowledged = 0
    const spans: Record<string, number> = {}
    let metricExports = 0
    const failures = { off: 0, on: 0 }
    const count = (arm: Arm, r: Run) => {
      failures[arm] += r.load.non2xx + r.load.errors
      if (arm !== 'on' || !r.stats.otel) return
      acknowledged += r.load.ok
      for (const [name, n] of Object.entries(r.stats.otel.byName))
        spans[name] = (spans[name] ?? 0) + n
      metricExports += r.stats.otel.metricExports
    }

    const max: Record<Arm, LoadResult[]> = { off: [], on: [] }
    for (let r = 0; r < OTEL.rounds; r++) {
      for (const arm of order(r)) {
        const result = await maxRun(arm)
        count(arm, result)
        max[arm].push(strip(result.load))
      }
      log(
        `    max round ${r + 1}: nothing installed ${max.off[r].okPerSecond.toFixed(0)}/s, ` +
          `instrumented ${max.on[r].okPerSecond.toFixed(0)}/s ` +
          `(${(max.on[r].okPerSecond / max.off[r].okPerSecond).toFixed(3)}x)`
      )
    }

    const fixedRuns: Record<Arm, Run[]> = { off: [], on: [] }
    for (let r = 0; r < OTEL.fixedRounds; r++) {
      for (const arm of order(r)) {
        const result = await fixedRun(arm)
        count(arm, result)
        fixedRuns[arm].push(result)
      }
      const [off, on] = [fixedRuns.off[r].load.latency.p99, fixedRuns.on[r].load.latency.p99]
      log(
        `    fixed ${OTEL.fixedRate}/s round ${r + 1}: ack p99 nothing installed ` +
          `${off.toFixed(1)} ms, instrumented ${on.toFixed(1)} ms (${(on / off).toFixed(3)}x)`
      )
    }

    // The inbox processed in-process: the batch and notify spans too (info, one run each).
    const processing = {} as Record<Arm, LoadResult>
    let processingSpans: Record<string, number> = {}
    for (const arm of ARMS) {
      const app = apps[arm]
      await app.call('truncate', undefined, 120_000)
      await app.call('processing', { on: true })
      await app.call('resetStats')
      const load = await loadRoute({
        url: app.ready.url,
        path: ROUTES.plugin,
        tag: `otel_${arm}_processing`,
        durationS: OTEL.processingS,
        connections: OTEL.fixedConnections,
        overallRate: OTEL.fixedRate,
        rampMs: OTEL.rampMs,
      })
      const stats = await app.call<ChildStats>('stats', { path: ROUTES.plugin })
      failures[arm] += load.non2xx + load.errors
      if (stats.otel) processingSpans = stats.otel.byName
      processing[arm] = strip(load)
      await app.call('truncate', undefined, 120_000)
    }
    log(
      `    processed in-process @${OTEL.fixedRate}/s: ack p99 nothing installed ` +
        `${processing.off.latency.p99.toFixed(1)} ms, instrumented ` +
        `${processing.on.latency.p99.toFixed(1)} ms`
    )
    const rss = async (arm: Arm) => {
      const stats = await apps[arm].call<ChildStats>('stats', { path: ROUTES.plugin })
      return stats.rssMB
    }

    const perRoundThroughputRatio = max.on.map((on, r) => on.okPerSecond / max.off[r].okPerSecond)
    const fixedPerRoundP99 = {
      off: fixedRuns.off.map((r) => r.load.latency.p99),
      on: fixedRuns.on.map((r) => r.load.latency.p99),
    }
    const perRoundP99Ratio = fixedPerRoundP99.on.map((on, r) => on / fixedPerRoundP99.off[r])
    const fixed = {
      off: pool(fixedRuns.off.map((r) => r.load)),
      on: pool(fixedRuns.on.map((r) => r.load)),
    }
    const inApp = {
      off: summarize(fixedRuns.off.flatMap((r) => r.stats.serverSamples)),
      on: summarize(fixedRuns.on.flatMap((r) => r.stats.serverSamples)),
    }
    const { client: clientSettings, ...settings } = OTEL
    void clientSettings
    return {
      settings,
      max,
      maxOkPerSecond: {
        off: median(max.off.map((x) => x.okPerSecond)),
        on: median(max.on.map((x) => x.okPerSecond)),
      },
      perRoundThroughputRatio,
      throughputRatio: median(perRoundThroughputRatio),
      fixedPerRoundP99,
      fixed,
      perRoundP99Ratio,
      p99Ratio: median(perRoundP99Ratio),
      pooledP99Ratio: fixed.on.latency.p99 / fixed.off.latency.p99,
      inApp,
      loopDelayMaxMs: {
        off: Math.max(...fixedRuns.off.map((r) => r.stats.loopDelayMaxMs)),
        on: Math.max(...fixedRuns.on.map((r) => r.stats.loopDelayMaxMs)),
      },
      processing,
      spansPerDelivery: (spans['payouts webhook receive'] ?? 0) / acknowledged,
      spans,
      processingSpans,
      metricExports,
      failures,
      rssMB: { off: await rss('off'), on: await rss('on') },
    }
  })
}

export interface OtelClientResult {
  settings: OtelClientSettings
  /** Per call, ms, over every round: nothing installed. */
  off: Summary
  /** The instrumentation enabled, the providers and context manager global. */
  on: Summary
  /** on mean / off mean of each round; the figure is their median. */
  perRoundRatio: number[]
  perRoundMedianRatio: number[]
  ratio: number
  medianRatio: number
  /** What the instrumented process's exporters received over the rounds (one span a call). */
  otel: OtelStats
  onCalls: number
}

/**
 * `getPayout` through `PayoutsClient` in two processes against one emulator, one with
 * OpenTelemetry and the instrumentation installed for its whole life, one with nothing: the
 * arms alternate in blocks (ABBA, the leading arm alternating from round to round), `rounds`
 * rounds of `calls` calls per arm, and the figure is the median over the rounds of on mean /
 * off mean, as bench/client_overhead.ts. Not one process switching the instrumentation on and
 * off between blocks: each switch changes the prototype of the plugin's diagnostics channels
 * (subscribed or not), which no app does. A failure is a result.
 */
export async function runOtelClient(): Promise<OtelClientResult | { error: string }> {
  const settings = OTEL.client
  const emulator = await startChild<{ baseUrl: string; apiKey: string; paymentMethodId: string }>(
    EMULATOR_SERVER
  )
  const children: Partial<Record<Arm, Child<{ otel: boolean }>>> = {}
  try {
    const { baseUrl, apiKey, paymentMethodId } = emulator.ready
    for (const arm of ARMS) {
      children[arm] = await startChild<{ otel: boolean }>(OTEL_CLIENT, {
        args: [baseUrl, apiKey, paymentMethodId, ...(arm === 'on' ? ['--otel'] : [])],
      })
      if (children[arm]!.ready.otel !== (arm === 'on')) throw new Error(`${arm} arm: wrong client`)
    }
    const block = (arm: Arm) =>
      children[arm]!.call<number[]>('block', { calls: settings.block }, 120_000)
    const blocks = Math.ceil(settings.calls / settings.block)
    for (let k = 0; k < Math.ceil(settings.warmup / settings.block); k++) {
      for (const arm of order(k)) await block(arm)
    }
    await children.on!.call('resetStats')
    const all = { off: [] as number[], on: [] as number[] }
    const perRoundRatio: number[] = []
    const perRoundMedianRatio: number[] = []
    for (let r = 0; r < settings.rounds; r++) {
      const round = { off: [] as number[], on: [] as number[] }
      for (let k = 0; k < blocks; k++) {
        for (const arm of order(r + k)) round[arm].push(...(await block(arm)))
      }
      const [off, on] = [summarize(round.off), summarize(round.on)]
      perRoundRatio.push(on.mean / off.mean)
      perRoundMedianRatio.push(on.p50 / off.p50)
      all.off.push(...round.off)
      all.on.push(...round.on)
    }
    const otel = await children.on!.call<OtelStats>('otelStats')
    return {
      settings,
      off: summarize(all.off),
      on: summarize(all.on),
      perRoundRatio,
      perRoundMedianRatio,
      ratio: median(perRoundRatio),
      medianRatio: median(perRoundMedianRatio),
      otel,
      onCalls: all.on.length,
    }
  } catch (error) {
    return { error: (error as Error).message }
  } finally {
    for (const arm of ARMS) await children[arm]?.stop()
    await emulator.stop()
  }
}

const row = (
  id: string,
  db: string,
  measure: string,
  value: number,
  unit: string,
  digits: number,
  target = '',
  pass: boolean | null = null
): Check => ({ id, measure, db, value: rounded(value, digits), unit, target, pass })

const list = (values: number[], digits = 2) => values.map((x) => x.toFixed(digits)).join(' ')

/**
 * The ingest rows of store `key`; with the ingest part's figures of the same run, how the
 * arm with nothing installed compares with them (info).
 */
export function otelIngestChecks(key: string, o: OtelIngestResult, ingest?: IngestResult): Check[] {
  const id = (name: string) => `${key}.otel.${name}`
  const failures =
    o.failures.off + o.failures.on
      ? ` (non-2xx or errors: ${o.failures.off} nothing installed, ${o.failures.on} instrumented!)`
      : ''
  const checks = [
    row(
      id('max_off'),
      key,
      `ingest max, plugin route, nothing installed, median of ${o.max.off.length} rounds${failures}`,
      o.maxOkPerSecond.off,
      '/s',
      0
    ),
    row(
      id('max_on'),
      key,
      'ingest max, plugin route, PayoutsInstrumentation + providers, median of rounds',
      o.maxOkPerSecond.on,
      '/s',
      0
    ),
    row(
      id('throughput_ratio'),
      key,
      `ingest max, instrumented / nothing installed, median of rounds ${list(o.perRoundThroughputRatio)}`,
      o.throughputRatio,
      'x',
      4,
      '>= 0.90',
      o.throughputRatio >= 0.9 && o.failures.off + o.failures.on === 0
    ),
    row(
      id('ack_p99_off'),
      key,
      `ack p99 @${OTEL.fixedRate}/s, nothing installed, ${o.fixedPerRoundP99.off.length} runs pooled ` +
        `(p50 ${o.fixed.off.latency.p50.toFixed(2)}; per run ${list(o.fixedPerRoundP99.off, 1)})`,
      o.fixed.off.latency.p99,
      'ms',
      2
    ),
    row(
      id('ack_p99_on'),
      key,
      `ack p99 @${OTEL.fixedRate}/s, instrumented, runs pooled ` +
        `(p50 ${o.fixed.on.latency.p50.toFixed(2)}; per run ${list(o.fixedPerRoundP99.on, 1)})`,
      o.fixed.on.latency.p99,
      'ms',
      2
    ),
    row(
      id('ack_p99_ratio'),
      key,
      `ack p99 @${OTEL.fixedRate}/s, instrumented / nothing installed, median of rounds ` +
        `${list(o.perRoundP99Ratio)} (pooled ${o.pooledP99Ratio.toFixed(2)})`,
      o.p99Ratio,
      'x',
      4,
      '<= 1.10',
      o.p99Ratio <= 1.1
    ),
    row(
      id('in_app_p99_ratio'),
      key,
      `in-app handling p99 @${OTEL.fixedRate}/s, instrumented / nothing installed ` +
        `(${o.inApp.on.p99.toFixed(2)} / ${o.inApp.off.p99.toFixed(2)} ms; ` +
        `p50 ${o.inApp.on.p50.toFixed(3)} / ${o.inApp.off.p50.toFixed(3)})`,
      o.inApp.on.p99 / o.inApp.off.p99,
      'x',
      3
    ),
    row(
      id('processing_p99_ratio'),
      key,
      `ack p99 @${OTEL.fixedRate}/s, inbox processed in-process, instrumented / nothing ` +
        `installed, one run each (${o.processing.on.latency.p99.toFixed(1)} / ` +
        `${o.processing.off.latency.p99.toFixed(1)} ms)`,
      o.processing.on.latency.p99 / o.processing.off.latency.p99,
      'x',
      3
    ),
    row(
      id('spans_per_delivery'),
      key,
      `webhook receive spans exported per delivery acknowledged, instrumented app ` +
        `(${o.metricExports} metric exports; processed in-process: ` +
        `${Object.entries(o.processingSpans)
          .map(([name, n]) => `${n} ${name}`)
          .join(', ')})`,
      o.spansPerDelivery,
      '',
      3,
      '>= 0.99',
      o.spansPerDelivery >= 0.99
    ),
  ]
  if (ingest) {
    checks.push(
      row(
        id('off_vs_ingest_max'),
        key,
        `ingest max nothing installed / the ingest part's plugin route, same run ` +
          `(${o.maxOkPerSecond.off.toFixed(0)} / ${ingest.okPerSecond.plugin.toFixed(0)}/s)`,
        o.maxOkPerSecond.off / ingest.okPerSecond.plugin,
        'x',
        3
      ),
      row(
        id('off_vs_ingest_p99'),
        key,
        `ack p99 nothing installed / the ingest part's plugin p99, same run ` +
          `(${o.fixed.off.latency.p99.toFixed(1)} / ${ingest.fixedPlugin.latency.p99.toFixed(1)} ms)`,
        o.fixed.off.latency.p99 / ingest.fixedPlugin.latency.p99,
        'x',
        3
      )
    )
  }
  return checks
}

/** The client rows; with the client part's figures of the same run, the off arm against them. */
export function otelClientChecks(
  c: OtelClientResult | { error: string },
  client?: ClientOverheadResult | { error: string }
): Check[] {
  if ('error' in c) {
    return [
      {
        id: 'client.otel.ratio',
        measure: 'client, instrumented / nothing installed',
        db: 'emulator',
        value: null,
        unit: '',
        target: `failed: ${c.error}`,
        pass: false,
      },
    ]
  }
  const spanName = 'payouts client GET /payouts/{id}'
  const spansPerCall = (c.otel.byName[spanName] ?? 0) / c.onCalls
  const checks = [
    row(
      'client.otel.off_mean',
      'emulator',
      `getPayout via PayoutsClient, nothing installed, mean per call (p50 ${c.off.p50.toFixed(3)})`,
      c.off.mean,
      'ms',
      3
    ),
    row(
      'client.otel.on_mean',
      'emulator',
      `same, PayoutsInstrumentation + providers, mean per call (p50 ${c.on.p50.toFixed(3)})`,
      c.on.mean,
      'ms',
      3
    ),
    row(
      'client.otel.ratio',
      'emulator',
      `client, instrumented / nothing installed, ratio of the means, median of rounds of ` +
        `${c.settings.calls} calls per arm: ${list(c.perRoundRatio, 3)}`,
      c.ratio,
      'x',
      4,
      '<= 1.10',
      c.ratio <= 1.1
    ),
    row(
      'client.otel.median_ratio',
      'emulator',
      `same, ratio of the medians, median of rounds: ${list(c.perRoundMedianRatio, 3)}`,
      c.medianRatio,
      'x',
      4
    ),
    row(
      'client.otel.spans_per_call',
      'emulator',
      `client spans exported per instrumented call (${c.otel.metricExports} metric exports)`,
      spansPerCall,
      '',
      3,
      '>= 0.99',
      spansPerCall >= 0.99
    ),
  ]
  if (client && !('error' in client)) {
    checks.push(
      row(
        'client.otel.off_vs_client',
        'emulator',
        `getPayout mean nothing installed / the client part's, same run ` +
          `(${c.off.mean.toFixed(3)} / ${client.client.mean.toFixed(3)} ms)`,
        c.off.mean / client.client.mean,
        'x',
        3
      )
    )
  }
  return checks
}
