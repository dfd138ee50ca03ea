import { randomUUID } from 'node:crypto'
import { Transmit } from '@adonisjs/transmit-client'
import { EventSource, Pool } from 'undici'
import { ROUTES } from './app.ts'
import { deliveryId, signedHeaders, statusEvent } from './deliveries.ts'
import type { Child } from './ipc.ts'
import { QUICK, type Check } from './setup.ts'
import { round, sleep, summarize, type Summary } from './stats.ts'

/** The fan-out settings of this run. */
export const FANOUT = { deliveries: QUICK ? 60 : 300, warmup: 20, perMessageTimeoutMs: 2000 }

export interface FanoutResult {
  deliveries: number
  received: number
  missed: number
  /** POST sent -> Transmit subscriber message received, ms. */
  latency: Summary
  /** POST sent -> 200 acknowledgement, ms (same deliveries). */
  ack: Summary
  timedOut: boolean
}

/**
 * Sequential deliveries for payouts owned by one owner; a Transmit subscriber on
 * `payouts/owners/<owner>` (undici's EventSource) records when each change arrives. The
 * app processes the inbox after each acknowledgement, as in production.
 */
export async function measureFanout(options: {
  child: Child<{ url: string }>
  deliveries: number
  warmup: number
  perMessageTimeoutMs: number
  budgetMs: number
}): Promise<FanoutResult> {
  const { child } = options
  const url = child.ready.url
  const ownerId = `tenant-bench-${process.pid}`
  const total = options.warmup + options.deliveries
  const ids = Array.from({ length: total }, () => randomUUID())
  await child.call('truncate')
  await child.call('seedPayouts', { ids, ownerId }, 120_000)
  await child.call('processing', { on: true })

  const transmit = new Transmit({
    baseUrl: url,
    eventSourceFactory: (source, init) =>
      new EventSource(source, init) as unknown as globalThis.EventSource,
    beforeSubscribe: (request: Request) => request.headers.set('x-owner', ownerId),
    maxReconnectAttempts: 0,
  })
  const arrivals = new Map<string, (at: number) => void>()
  const subscription = transmit.subscription(`payouts/owners/${ownerId}`)
  subscription.onMessage((message: { payoutId?: string }) => {
    const at = performance.now()
    if (message.payoutId) arrivals.get(message.payoutId)?.(at)
  })
  const pool = new Pool(url, { connections: 1 })
  const latencies: number[] = []
  const acks: number[] = []
  let missed = 0
  let timedOut = false
  const started = Date.now()
  try {
    await subscription.create()
    for (const [index, payoutId] of ids.entries()) {
      if (Date.now() - started > options.budgetMs) {
        timedOut = true
        break
      }
      const raw = statusEvent(payoutId)
      const headers = signedHeaders(raw, deliveryId('fanout'))
      let timer: NodeJS.Timeout | undefined
      const arrived = new Promise<number | null>((resolve) => {
        arrivals.set(payoutId, resolve)
        timer = setTimeout(() => resolve(null), options.perMessageTimeoutMs)
      })
      const sentAt = performance.now()
      const response = await pool.request({
        path: ROUTES.plugin,
        method: 'POST',
        body: raw,
        headers,
      })
      const ackAt = performance.now()
      await response.body.dump()
      const at = await arrived
      clearTimeout(timer)
      arrivals.delete(payoutId)
      if (index < options.warmup) continue
      if (response.statusCode !== 200 || at === null) {
        missed++
        continue
      }
      latencies.push(at - sentAt)
      acks.push(ackAt - sentAt)
      // A modest pace: one delivery every few ms at most, never a burst.
      await sleep(2)
    }
  } finally {
    transmit.close()
    await pool.close()
    await child.call('processing', { on: false })
  }
  return {
    deliveries: options.deliveries,
    received: latencies.length,
    missed,
    latency: summarize(latencies),
    ack: summarize(acks),
    timedOut,
  }
}

/** The fan-out rows of the results table for store `key` (a failure is a missed target). */
export function fanoutChecks(key: string, f: FanoutResult | undefined, error?: string): Check[] {
  if (!f) {
    return [
      {
        id: `${key}.fanout.p99`,
        measure: `fan-out: failed, ${error}`,
        db: key,
        value: null,
        unit: '',
        target: '< 25',
        pass: false,
      },
    ]
  }
  return [
    {
      id: `${key}.fanout.p50`,
      measure: `fan-out POST -> Transmit subscriber p50 (${f.received}/${f.deliveries} received)`,
      db: key,
      value: round(f.latency.p50, 2),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: `${key}.fanout.p99`,
      measure:
        'fan-out POST -> Transmit subscriber p99' +
        (f.missed ? `, ${f.missed} missed` : '') +
        (f.timedOut ? ', time cap hit' : ''),
      db: key,
      value: round(f.latency.p99, 2),
      unit: 'ms',
      target: '< 25',
      pass: f.latency.p99 < 25 && f.missed === 0 && !f.timedOut,
    },
  ]
}
