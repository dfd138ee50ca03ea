import { ROUTES } from './app.ts'
import { busyCore } from './busy_core.ts'
import type { Child } from './ipc.ts'
import { loadRoute, pool, strip, type LoadResult, type LoadRun } from './load.ts'
import { QUICK, type Check } from './setup.ts'
import { median, round as rounded, summarize, type Summary } from './stats.ts'

export type RouteName = keyof typeof ROUTES

export interface IngestSettings {
  connections: number
  warmupS: number
  rounds: number
  roundS: number
  fixedRate: number
  fixedConnections: number
  fixedS: number
  /** The start of each fixed-rate run left out of its latencies (see loadRoute's rampMs). */
  rampMs: number
  drainMs: number
}

/** The ingest settings of this run. */
export const INGEST: IngestSettings = {
  connections: 16,
  warmupS: 1,
  rounds: 5,
  roundS: QUICK ? 1 : 2,
  fixedRate: 500,
  fixedConnections: 20,
  fixedS: QUICK ? 2 : 4,
  rampMs: 250,
  drainMs: QUICK ? 1000 : 3000,
}

/** What the app process saw during fixed-rate runs (its own time, apart from the machine's). */
export interface ServerSide {
  /** Request received -> response finished, inside the app, ms. */
  handling: Summary
  /** Worst event-loop delay over the runs, ms (timer lateness: blocking or descheduling). */
  loopDelayMaxMs: number
  gcCount: number
  gcMaxMs: number
  /** Inline batches: how many, and their p50 / p99 / max time, ms. */
  batches?: { count: number; p50: number; p99: number; max: number }
}

/** A fixed-rate figure: the load generator's view pooled over runs, plus the app's view. */
export type FixedResult = LoadResult & { perRunP99: number[]; server: ServerSide }

interface ChildStats {
  loopDelayMaxMs: number
  gc: { count: number; totalMs: number; maxMs: number }
  serverSamples: number[]
  /** Each inline batch's time in the app (from its rows claimed to its end), ms. */
  batchMs?: number[]
}

interface FixedRun {
  load: LoadRun
  stats: ChildStats
}

export interface IngestResult {
  settings: IngestSettings
  /** Max throughput, one entry per round, routes in rotated order, inbox emptied before each. */
  rounds: Array<Record<RouteName, LoadResult>>
  /** Median over the rounds of 2xx per second. */
  okPerSecond: Record<RouteName, number>
  /** Median over the rounds of the per-round ratios (both routes measured back to back). */
  pluginVsInsert: number
  pluginVsBare: number
  insertVsBare: number
  perRoundPluginVsInsert: number[]
  /**
   * Fixed rate, inbox processing deferred: the acknowledgement path alone. Two runs per
   * route in ABBA order (plugin, insert, insert, plugin), percentiles over both.
   */
  fixedPlugin: FixedResult
  fixedInsert: FixedResult
  /**
   * Fixed rate with the inbox processed after each ack in the same process: the default
   * (`processing: 'inline'`), a new user's. The backlog left at the end says whether the
   * processing kept up.
   */
  fixedPluginProcessing: FixedResult & { backlogAfter: number }
  /**
   * The same two, while another process keeps one core busy, as a host app's own work would
   * on a 2-core machine: processing deferred, then inline.
   */
  busyCore: {
    fixedPlugin: FixedResult
    fixedPluginProcessing: FixedResult & { backlogAfter: number }
  }
  /** Inbox rows processed per second from a backlog (claim, ledger apply, mark; info). */
  drain: {
    rows: number
    seconds: number
    rowsPerSecond: number
    /** CPU time per row processed: the app's, and the database server's (null: unknown). */
    appCpuMsPerRow?: number
    serverCpuMsPerRow?: number | null
  }
}

function batchSummary(ms: number[]) {
  if (ms.length === 0) return undefined
  const s = summarize(ms)
  return { count: ms.length, p50: s.p50, p99: s.p99, max: s.max }
}

function describeBatches(b: ServerSide['batches']) {
  return b
    ? `${b.count}, p50 / p99 / max ${b.p50.toFixed(1)} / ${b.p99.toFixed(1)} / ${b.max.toFixed(1)} ms`
    : 'none'
}

function combine(runs: FixedRun[]): FixedResult {
  return {
    ...pool(runs.map((run) => run.load)),
    perRunP99: runs.map((run) => run.load.latency.p99),
    server: {
      handling: summarize(runs.flatMap((run) => run.stats.serverSamples)),
      loopDelayMaxMs: Math.max(...runs.map((run) => run.stats.loopDelayMaxMs)),
      gcCount: runs.reduce((n, run) => n + run.stats.gc.count, 0),
      gcMaxMs: Math.max(...runs.map((run) => run.stats.gc.maxMs)),
      batches: batchSummary(runs.flatMap((run) => run.stats.batchMs ?? [])),
    },
  }
}

/**
 * The webhook-ingest comparison on one app: max throughput of the three routes in
 * alternating rounds, then fixed-rate acknowledgement latency, then the drain rate.
 */
export async function measureIngest(
  child: Child<{ url: string }>,
  settings: IngestSettings,
  log: (line: string) => void
): Promise<IngestResult> {
  const url = child.ready.url
  const names = Object.keys(ROUTES) as RouteName[]
  const maxRun = async (route: RouteName, durationS: number) => {
    await child.call('truncate')
    return loadRoute({
      url,
      path: ROUTES[route],
      tag: route,
      durationS,
      connections: settings.connections,
    })
  }
  /** One fixed-rate run, with the app's own timing of each request. */
  const fixedRun = async (route: RouteName, tag: string = route): Promise<FixedRun> => {
    await child.call('resetStats')
    const load = await loadRoute({
      url,
      path: ROUTES[route],
      tag,
      durationS: settings.fixedS,
      connections: settings.fixedConnections,
      overallRate: settings.fixedRate,
      rampMs: settings.rampMs,
    })
    return { load, stats: await child.call<ChildStats>('stats', { path: ROUTES[route] }) }
  }

  await child.call('processing', { on: false })
  for (const route of names) await maxRun(route, settings.warmupS)

  const rounds: IngestResult['rounds'] = []
  for (let round = 0; round < settings.rounds; round++) {
    const order = names.map((_, i) => names[(i + round) % names.length])
    const entry = {} as Record<RouteName, LoadResult>
    for (const route of order) entry[route] = strip(await maxRun(route, settings.roundS))
    rounds.push(entry)
    log(
      `    round ${round + 1}: ` +
        names.map((r) => `${r} ${entry[r].okPerSecond.toFixed(0)}/s`).join(', ')
    )
  }
  const ratio = (a: RouteName, b: RouteName) =>
    rounds.map((r) => r[a].okPerSecond / r[b].okPerSecond)

  // ABBA: plugin, insert, insert, plugin, the inbox emptied before each.
  await child.call('truncate')
  const pluginRuns = [await fixedRun('plugin')]
  // The backlog that run left (processing was deferred) measures the drain rate.
  const drain = await child.call<{
    rows: number
    seconds: number
    appCpuMs: number
    serverCpuMs: number | null
  }>('drainRate', { ms: settings.drainMs }, settings.drainMs + 60_000)
  log(
    `    drain: ${drain.rows} rows in ${drain.seconds.toFixed(2)} s; CPU per row: app ` +
      `${(drain.appCpuMs / Math.max(1, drain.rows)).toFixed(3)} ms, database server ` +
      `${drain.serverCpuMs === null ? '-' : (drain.serverCpuMs / Math.max(1, drain.rows)).toFixed(3)} ms`
  )
  const insertRuns: FixedRun[] = []
  for (let i = 0; i < 2; i++) {
    await child.call('truncate')
    insertRuns.push(await fixedRun('insert'))
  }
  await child.call('truncate')
  pluginRuns.push(await fixedRun('plugin'))
  const fixedPlugin = combine(pluginRuns)
  const fixedInsert = combine(insertRuns)
  log(
    `    fixed ${settings.fixedRate}/s p99 per run: plugin ` +
      fixedPlugin.perRunP99.map((p) => p.toFixed(1)).join(' / ') +
      ' ms, insert-only ' +
      fixedInsert.perRunP99.map((p) => p.toFixed(1)).join(' / ') +
      ` ms; in-app p99 plugin ${fixedPlugin.server.handling.p99.toFixed(1)}` +
      ` / insert-only ${fixedInsert.server.handling.p99.toFixed(1)} ms`
  )

  /** One fixed run with the inbox processed inline; the backlog it left. */
  const inlineRun = async (tag: string) => {
    await child.call('truncate')
    await child.call('processing', { on: true })
    const run = combine([await fixedRun('plugin', tag)])
    await child.call('processing', { on: false })
    const counts = await child.call<Record<string, number>>('count')
    const backlogAfter = (counts.pending ?? 0) + (counts.processing ?? 0) + (counts.failed ?? 0)
    await child.call('truncate', undefined, 120_000)
    return { ...run, backlogAfter }
  }
  const withProcessing = await inlineRun('plugin_processing')
  log(
    `    inline processing: p99 ${withProcessing.latency.p99.toFixed(1)} ms ` +
      `(in-app p99 ${withProcessing.server.handling.p99.toFixed(1)}, ` +
      `event-loop delay max ${withProcessing.server.loopDelayMaxMs.toFixed(1)}; ` +
      `batches ${describeBatches(withProcessing.server.batches)}; ` +
      `gc ${withProcessing.server.gcCount}, max ${withProcessing.server.gcMaxMs.toFixed(1)} ms; ` +
      `load generator's p99 / max ${withProcessing.generatorLoopDelay.p99.toFixed(1)} / ` +
      `${withProcessing.generatorLoopDelay.max.toFixed(1)}), ` +
      `backlog ${withProcessing.backlogAfter}`
  )

  const busy = busyCore(settings.fixedS * 2 + 30)
  let busyCoreResult: IngestResult['busyCore']
  try {
    await child.call('truncate')
    const heldBack = combine([await fixedRun('plugin', 'plugin_busy_core')])
    busyCoreResult = {
      fixedPlugin: heldBack,
      fixedPluginProcessing: await inlineRun('plugin_processing_busy_core'),
    }
  } finally {
    busy.stop()
  }
  log(
    `    one core busy: p99 deferred ${busyCoreResult.fixedPlugin.latency.p99.toFixed(1)} ms, ` +
      `inline ${busyCoreResult.fixedPluginProcessing.latency.p99.toFixed(1)} ms ` +
      `(in-app p99 ${busyCoreResult.fixedPluginProcessing.server.handling.p99.toFixed(1)}, ` +
      `event-loop delay max ${busyCoreResult.fixedPluginProcessing.server.loopDelayMaxMs.toFixed(1)}; ` +
      `batches ${describeBatches(busyCoreResult.fixedPluginProcessing.server.batches)}; ` +
      `load generator's p99 / max ${busyCoreResult.fixedPluginProcessing.generatorLoopDelay.p99.toFixed(1)} / ` +
      `${busyCoreResult.fixedPluginProcessing.generatorLoopDelay.max.toFixed(1)}), ` +
      `backlog ${busyCoreResult.fixedPluginProcessing.backlogAfter}`
  )

  return {
    settings,
    rounds,
    okPerSecond: Object.fromEntries(
      names.map((r) => [r, median(rounds.map((x) => x[r].okPerSecond))])
    ) as Record<RouteName, number>,
    pluginVsInsert: median(ratio('plugin', 'insert')),
    pluginVsBare: median(ratio('plugin', 'bare')),
    insertVsBare: median(ratio('insert', 'bare')),
    perRoundPluginVsInsert: ratio('plugin', 'insert'),
    fixedPlugin,
    fixedInsert,
    fixedPluginProcessing: withProcessing,
    busyCore: busyCoreResult,
    drain: {
      rows: drain.rows,
      seconds: drain.seconds,
      rowsPerSecond: drain.rows / drain.seconds,
      appCpuMsPerRow: drain.appCpuMs / Math.max(1, drain.rows),
      serverCpuMsPerRow:
        drain.serverCpuMs === null ? null : drain.serverCpuMs / Math.max(1, drain.rows),
    },
  }
}

/** The ingest rows of the results table for store `key`. */
export function ingestChecks(key: string, i: IngestResult): Check[] {
  const failures = (route: 'plugin' | 'insert' | 'bare') => {
    const n = i.rounds.reduce((sum, x) => sum + x[route].non2xx + x[route].errors, 0)
    return n ? ` (${n} non-2xx or errors!)` : ''
  }
  const fixedPasses = (x: FixedResult) => x.latency.p99 < 20 && x.non2xx === 0 && x.errors === 0
  const fixedNote = (x: { okPerSecond: number; non2xx: number; errors: number }) =>
    `${x.okPerSecond.toFixed(0)}/s achieved` +
    (x.non2xx + x.errors ? `, ${x.non2xx} non-2xx, ${x.errors} errors` : '')
  return [
    {
      id: `${key}.ingest.plugin_rps`,
      measure: `ingest max: plugin route (verify+insert+ack)${failures('plugin')}`,
      db: key,
      value: rounded(i.okPerSecond.plugin, 0),
      unit: '/s',
      target: '',
      pass: null,
    },
    {
      id: `${key}.ingest.insert_rps`,
      measure: `ingest max: insert-only route${failures('insert')}`,
      db: key,
      value: rounded(i.okPerSecond.insert, 0),
      unit: '/s',
      target: '',
      pass: null,
    },
    {
      id: `${key}.ingest.bare_rps`,
      measure: `ingest max: bare route (reads body, 200)${failures('bare')}`,
      db: key,
      value: rounded(i.okPerSecond.bare, 0),
      unit: '/s',
      target: '',
      pass: null,
    },
    {
      id: `${key}.ingest.plugin_vs_insert`,
      measure: `ratio plugin / insert-only, median of rounds ${i.perRoundPluginVsInsert.map((x) => x.toFixed(2)).join(' ')}`,
      db: key,
      value: rounded(i.pluginVsInsert, 4),
      unit: 'x',
      target: '>= 0.8',
      pass: i.pluginVsInsert >= 0.8,
    },
    {
      id: `${key}.ingest.plugin_vs_bare`,
      measure: 'ratio plugin / bare (median of rounds)',
      db: key,
      value: rounded(i.pluginVsBare, 4),
      unit: 'x',
      target: '',
      pass: null,
    },
    {
      id: `${key}.ack.p50`,
      measure: `ack latency p50 @${INGEST.fixedRate}/s, plugin (${fixedNote(i.fixedPlugin)})`,
      db: key,
      value: rounded(i.fixedPlugin.latency.p50, 2),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: `${key}.ack.p99`,
      measure: `ack latency p99 @${INGEST.fixedRate}/s, plugin`,
      db: key,
      value: rounded(i.fixedPlugin.latency.p99, 2),
      unit: 'ms',
      target: '< 20',
      pass:
        i.fixedPlugin.latency.p99 < 20 && i.fixedPlugin.non2xx === 0 && i.fixedPlugin.errors === 0,
    },
    {
      id: `${key}.ack.insert_p99`,
      measure: `p99 @${INGEST.fixedRate}/s, insert-only route (baseline; p50 ${i.fixedInsert.latency.p50.toFixed(2)})`,
      db: key,
      value: rounded(i.fixedInsert.latency.p99, 2),
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
      value: rounded(i.fixedPlugin.server.handling.p99, 2),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: `${key}.ack.processing_p99`,
      measure:
        `ack p99 @${INGEST.fixedRate}/s, plugin, inbox processed inline (the default) ` +
        `(${fixedNote(i.fixedPluginProcessing)}, backlog ${i.fixedPluginProcessing.backlogAfter})`,
      db: key,
      value: rounded(i.fixedPluginProcessing.latency.p99, 2),
      unit: 'ms',
      target: '< 20',
      pass: fixedPasses(i.fixedPluginProcessing),
    },
    ...(i.busyCore
      ? [
          {
            id: `${key}.ack.busy_core_p99`,
            measure:
              `ack p99 @${INGEST.fixedRate}/s, plugin, processing deferred, one core busy ` +
              `(${fixedNote(i.busyCore.fixedPlugin)})`,
            db: key,
            value: rounded(i.busyCore.fixedPlugin.latency.p99, 2),
            unit: 'ms',
            target: '< 20',
            pass: fixedPasses(i.busyCore.fixedPlugin),
          },
          {
            id: `${key}.ack.processing_busy_core_p99`,
            measure:
              `ack p99 @${INGEST.fixedRate}/s, plugin, inbox processed inline, one core busy ` +
              `(${fixedNote(i.busyCore.fixedPluginProcessing)}, backlog ` +
              `${i.busyCore.fixedPluginProcessing.backlogAfter})`,
            db: key,
            value: rounded(i.busyCore.fixedPluginProcessing.latency.p99, 2),
            unit: 'ms',
            target: '< 20',
            pass: fixedPasses(i.busyCore.fixedPluginProcessing),
          },
        ]
      : []),
    {
      id: `${key}.inbox.drain_rps`,
      measure: 'inbox drain from a backlog (claim, ledger apply, mark)',
      db: key,
      value: rounded(i.drain.rowsPerSecond, 0),
      unit: 'rows/s',
      target: '',
      pass: null,
    },
  ]
}
