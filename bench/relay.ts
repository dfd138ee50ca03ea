import { ROUTES } from './app.ts'
import { loadRoute, pool, type LoadResult, type LoadRun } from './load.ts'
import { QUICK, withApp, type Check, type DbConfig } from './setup.ts'
import { round, sleep } from './stats.ts'

/**
 * The relay's cost (`transmit.relay`): its statements per second idle and under ingest load,
 * and the ingest figures with the relay on in the web process versus off, side by side. The
 * arms alternate (off, on, on, off), each a fresh app; the load is the plugin route with the
 * inbox processed in-process, so each delivery commits a change the relay reads and sends.
 */

/** The relay settings of this run. */
export const RELAY = {
  idleS: QUICK ? 2 : 5,
  connections: 16,
  maxS: QUICK ? 1 : 3,
  fixedRate: 500,
  fixedConnections: 20,
  fixedS: QUICK ? 2 : 4,
}

/** The stores it runs on: SQLite WAL polls, PostgreSQL LISTENs. */
export const RELAY_DBS = ['sqlite-wal', 'pg']

interface Counters {
  statements: number
  notices: number
  /** PostgreSQL: backends LISTENing on the app's channel. */
  listening: number | null
}

interface Arm {
  relay: boolean
  /** The relay's statements per second: idle, at max throughput, at the fixed rate. */
  idleQps: number
  maxQps: number
  fixedQps: number
  /** NOTIFYs per second at the fixed rate (PostgreSQL). */
  fixedNoticesPerSecond: number
  listening: number | null
  max: LoadRun
  fixed: LoadRun
}

export interface RelayResult {
  settings: typeof RELAY
  arms: Array<Omit<Arm, 'max' | 'fixed'> & { max: LoadResult; fixed: LoadResult }>
  off: { max: LoadResult; fixed: LoadResult }
  on: { max: LoadResult; fixed: LoadResult }
  /** On / off: ack p99 at the fixed rate, and deliveries per second at max throughput. */
  ackP99Ratio: number
  throughputRatio: number
  /** Means over the relay's arms. */
  idleQps: number
  maxQps: number
  fixedQps: number
  fixedNoticesPerSecond: number
  listening: number | null
}

/** One arm: a fresh app with the relay on or off, idle, then at max and at a fixed rate. */
function measureArm(config: DbConfig, relay: boolean): Promise<Arm> {
  const run = (relay ? ['--relay'] : []).concat('--processing')
  return withApp(
    config,
    async (child) => {
      const url = child.ready.url
      const counters = () => child.call<Counters>('relayStats')
      /** The relay's statements and NOTIFYs per second over `work`. */
      const rates = async <T>(work: () => Promise<T>) => {
        const before = await counters()
        const started = performance.now()
        const result = await work()
        const seconds = (performance.now() - started) / 1000
        const after = await counters()
        return {
          result,
          qps: (after.statements - before.statements) / seconds,
          notices: (after.notices - before.notices) / seconds,
          listening: after.listening,
        }
      }
      const plugin = { url, path: ROUTES.plugin, tag: `relay_${relay ? 'on' : 'off'}` }
      const fresh = async () => {
        await child.call('truncate', undefined, 120_000)
        await child.call('processing', { on: true })
      }
      await fresh()
      await loadRoute({ ...plugin, durationS: 1, connections: RELAY.connections })
      await fresh()
      const idle = await rates(() => sleep(RELAY.idleS * 1000))
      const max = await rates(() =>
        loadRoute({ ...plugin, durationS: RELAY.maxS, connections: RELAY.connections })
      )
      await fresh()
      const fixed = await rates(() =>
        loadRoute({
          ...plugin,
          durationS: RELAY.fixedS,
          connections: RELAY.fixedConnections,
          overallRate: RELAY.fixedRate,
        })
      )
      await child.call('truncate', undefined, 120_000)
      return {
        relay,
        idleQps: idle.qps,
        maxQps: max.qps,
        fixedQps: fixed.qps,
        fixedNoticesPerSecond: fixed.notices,
        listening: fixed.listening,
        max: max.result,
        fixed: fixed.result,
      }
    },
    [],
    `${config.key}-relay`,
    run
  )
}

/** The relay comparison on `config`'s store: arms off, on, on, off. */
export async function measureRelay(
  config: DbConfig,
  log: (line: string) => void
): Promise<RelayResult> {
  const arms: Arm[] = []
  for (const relay of [false, true, true, false]) {
    const arm = await measureArm(config, relay)
    arms.push(arm)
    log(
      `    relay ${relay ? 'on ' : 'off'}: max ${arm.max.okPerSecond.toFixed(0)}/s, ` +
        `ack p99 @${RELAY.fixedRate}/s ${arm.fixed.latency.p99.toFixed(1)} ms; relay ` +
        `${arm.idleQps.toFixed(1)} q/s idle, ${arm.maxQps.toFixed(1)} at max, ` +
        `${arm.fixedQps.toFixed(1)} at ${RELAY.fixedRate}/s`
    )
  }
  const side = (relay: boolean) => {
    const of = arms.filter((arm) => arm.relay === relay)
    return { max: pool(of.map((arm) => arm.max)), fixed: pool(of.map((arm) => arm.fixed)) }
  }
  const [off, on] = [side(false), side(true)]
  const relayed = arms.filter((arm) => arm.relay)
  const mean = (pick: (arm: Arm) => number) =>
    relayed.reduce((sum, arm) => sum + pick(arm), 0) / relayed.length
  return {
    settings: RELAY,
    arms: arms.map(({ max, fixed, ...arm }) => ({
      ...arm,
      max: pool([max]),
      fixed: pool([fixed]),
    })),
    off,
    on,
    ackP99Ratio: on.fixed.latency.p99 / off.fixed.latency.p99,
    throughputRatio: on.max.okPerSecond / off.max.okPerSecond,
    idleQps: mean((arm) => arm.idleQps),
    maxQps: mean((arm) => arm.maxQps),
    fixedQps: mean((arm) => arm.fixedQps),
    fixedNoticesPerSecond: mean((arm) => arm.fixedNoticesPerSecond),
    listening: relayed[0].listening,
  }
}

/** The relay rows of the results table for store `key`. */
export function relayChecks(key: string, r: RelayResult): Check[] {
  const row = (id: string, measure: string, value: number, unit: string, digits = 1): Check => ({
    id: `${key}.relay.${id}`,
    measure,
    db: key,
    value: round(value, digits),
    unit,
    target: '',
    pass: null,
  })
  const listening = r.listening === null ? '' : `, ${r.listening} LISTEN connection`
  return [
    row('idle_qps', `relay statements/s, idle${listening}`, r.idleQps, 'q/s'),
    row(
      'fixed_qps',
      `relay statements/s @${RELAY.fixedRate}/s processed in-process` +
        (r.listening === null ? '' : ` (+ ${r.fixedNoticesPerSecond.toFixed(1)} NOTIFY/s)`),
      r.fixedQps,
      'q/s'
    ),
    row('max_qps', 'relay statements/s at max throughput', r.maxQps, 'q/s'),
    row(
      'ack_p99_ratio',
      `ack p99 @${RELAY.fixedRate}/s processed in-process, relay on / off ` +
        `(${r.on.fixed.latency.p99.toFixed(1)} / ${r.off.fixed.latency.p99.toFixed(1)} ms)`,
      r.ackP99Ratio,
      'x',
      3
    ),
    row(
      'throughput_ratio',
      `ingest max processed in-process, relay on / off ` +
        `(${r.on.max.okPerSecond.toFixed(0)} / ${r.off.max.okPerSecond.toFixed(0)}/s)`,
      r.throughputRatio,
      'x',
      3
    ),
  ]
}
