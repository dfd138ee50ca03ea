import { monitorEventLoopDelay } from 'node:perf_hooks'
import autocannon from 'autocannon'
import { deliveryId, signedHeaders, statusEvent } from './deliveries.ts'
import { summarize, type Summary } from './stats.ts'

/** One autocannon run against one route, every request a unique signed delivery. */
export interface LoadResult {
  route: string
  durationS: number
  connections: number
  /** Requested rate (fixed-rate runs), null for max throughput. */
  overallRate: number | null
  sent: number
  ok: number
  non2xx: number
  errors: number
  timeouts: number
  /** 2xx answers per second over the run. */
  okPerSecond: number
  /** Acknowledgement latency of 2xx answers, ms (our own float samples, not autocannon's 1 ms buckets). */
  latency: Summary
  /**
   * The load generator's own event-loop delay over the run, ms: how late it could read an
   * answer (this process descheduled or busy), which its latencies include.
   */
  generatorLoopDelay: { p99: number; max: number }
}

/** A run with its raw latency samples, to pool several runs; never written to results. */
export type LoadRun = LoadResult & { samples: number[] }

/** Pools runs of the same route: counts add up, percentiles over all samples. */
export function pool(runs: LoadRun[]): LoadResult {
  const sum = (pick: (run: LoadRun) => number) => runs.reduce((n, run) => n + pick(run), 0)
  const durationS = sum((run) => run.durationS)
  const ok = sum((run) => run.ok)
  return {
    route: runs[0].route,
    durationS,
    connections: runs[0].connections,
    overallRate: runs[0].overallRate,
    sent: sum((run) => run.sent),
    ok,
    non2xx: sum((run) => run.non2xx),
    errors: sum((run) => run.errors),
    timeouts: sum((run) => run.timeouts),
    okPerSecond: ok / durationS,
    latency: summarize(runs.flatMap((run) => run.samples)),
    generatorLoopDelay: {
      p99: Math.max(...runs.map((run) => run.generatorLoopDelay.p99)),
      max: Math.max(...runs.map((run) => run.generatorLoopDelay.max)),
    },
  }
}

/** The run without its samples. */
export function strip({ samples, ...result }: LoadRun): LoadResult {
  void samples
  return result
}

/**
 * Posts unique signed deliveries (fresh Svc-Delivery-Id and timestamp per request) to
 * `url + path` with autocannon, bounded by `durationS`. With `overallRate`, at that fixed
 * rate across all connections.
 */
export async function loadRoute(options: {
  url: string
  path: string
  tag: string
  durationS: number
  connections: number
  overallRate?: number
  /**
   * Latencies of answers that arrive within this many ms of the start are left out of the
   * samples (still counted): the connections open and send their first requests at once,
   * a burst that a steady rate does not have, and in a short run it can be the whole 1% tail.
   */
  rampMs?: number
}): Promise<LoadRun> {
  const latencies: number[] = []
  const rampEnd = performance.now() + (options.rampMs ?? 0)
  const statuses = new Map<number, number>()
  const loop = monitorEventLoopDelay({ resolution: 1 })
  loop.enable()
  let instance!: autocannon.Instance
  const finished = new Promise<autocannon.Result>((resolve, reject) => {
    instance = autocannon(
      {
        url: options.url,
        connections: options.connections,
        duration: options.durationS,
        overallRate: options.overallRate,
        timeout: 10,
        requests: [
          {
            method: 'POST',
            path: options.path,
            setupRequest: (request) => {
              const body = statusEvent()
              return {
                ...request,
                method: 'POST',
                path: options.path,
                body,
                headers: signedHeaders(body, deliveryId(options.tag)),
              }
            },
          },
        ],
      },
      (error, result) => (error ? reject(error) : resolve(result))
    )
  })
  instance.on('response', (_client, statusCode, _bytes, responseTime) => {
    statuses.set(statusCode, (statuses.get(statusCode) ?? 0) + 1)
    if (
      statusCode >= 200 &&
      statusCode < 300 &&
      latencies.length < 2_000_000 &&
      performance.now() >= rampEnd
    ) {
      latencies.push(responseTime)
    }
  })
  const result = await finished.finally(() => loop.disable())
  const ok = [...statuses].reduce((n, [code, count]) => (code < 300 ? n + count : n), 0)
  const non2xx = [...statuses].reduce((n, [code, count]) => (code >= 300 ? n + count : n), 0)
  return {
    route: options.path,
    durationS: result.duration,
    connections: options.connections,
    overallRate: options.overallRate ?? null,
    sent: result.requests.sent,
    ok,
    non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    okPerSecond: ok / result.duration,
    latency: summarize(latencies),
    generatorLoopDelay: { p99: loop.percentile(99) / 1e6, max: loop.max / 1e6 },
    samples: latencies,
  }
}
