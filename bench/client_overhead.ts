import { Agent, request } from 'undici'
import { PayoutsClient } from '../src/client/main.ts'
import { payoutSchema } from '../src/schemas/resources.ts'
import { busyCore } from './busy_core.ts'
import { startChild, type Child } from './ipc.ts'
import { QUICK, type Check } from './setup.ts'
import { median, round as rounded, summarize, type Summary } from './stats.ts'

/** The client-overhead settings of this run. */
export const CLIENT = { calls: 1000, warmup: 200, rounds: QUICK ? 3 : 11 }
const EMULATOR_SERVER = new URL('./emulator_server.ts', import.meta.url)

export interface ClientOverheadResult {
  calls: number
  warmup: number
  rounds: number
  /** client mean / raw mean of each round of `calls` calls per arm. */
  perRoundRatio: number[]
  perRoundMedianRatio: number[]
  /** Per-call wall time, ms: through PayoutsClient.getPayout. */
  client: Summary
  /** Raw undici GET of the same URL, same auth header, body parsed as JSON. */
  raw: Summary
  /** Raw undici GET plus the client's own zod payout schema on the body (info). */
  rawValidated: Summary
  /** Median over the rounds of client mean / raw mean (the target), and of the medians. */
  ratio: number
  medianRatio: number
  /** rawValidated mean / raw mean: what response validation alone costs (info). */
  validatedRatio: number
}

/**
 * `getPayout` through PayoutsClient (client rate limiter off, as the emulator's are)
 * against raw undici GETs of the same URL with the same auth header and an Agent
 * configured like the client's. Sequential calls, interleaved one by one with the order
 * rotated, so machine noise lands on every arm alike; `rounds` rounds of `calls` calls
 * per arm, and the ratio is the median of the rounds' (a GC pause or a neighbour's burst
 * moves one round, not the figure).
 */
export async function measureClientOverhead(options: {
  emulator: Child<{ baseUrl: string; apiKey: string; paymentMethodId: string }>
  calls: number
  warmup: number
  rounds: number
}): Promise<ClientOverheadResult> {
  const { baseUrl, apiKey, paymentMethodId } = options.emulator.ready
  const client = new PayoutsClient({ apiKey, baseUrl: `${baseUrl}/api`, rateLimiter: false })
  const agent = new Agent({
    keepAliveTimeout: 10_000,
    keepAliveMaxTimeout: 60_000,
    connections: 64,
  })
  try {
    const recipient = await client.recipients.create({ name: 'Bench Recipient', currency: 'MXN' })
    const executed = await client.execute({
      fromCurrency: 'USD',
      toCurrency: 'MXN',
      amount: 100,
      recipientId: recipient.id,
      userPaymentMethodId: paymentMethodId,
    })
    const payoutId = executed.payoutId
    const url = `${baseUrl}/api/payouts/${encodeURIComponent(payoutId)}`
    const headers = { accept: 'application/json', authorization: `Bearer ${apiKey}` }
    const rawGet = async () => {
      const response = await request(url, { method: 'GET', headers, dispatcher: agent })
      const body = (await response.body.json()) as { payoutId?: string }
      if (response.statusCode !== 200 || !body.payoutId) throw new Error('raw: bad answer')
      return body
    }
    const arms: Array<[keyof typeof samples, () => Promise<unknown>]> = [
      ['client', () => client.getPayout(payoutId)],
      ['raw', rawGet],
      ['rawValidated', async () => payoutSchema.parse(await rawGet())],
    ]
    const samples = { client: [] as number[], raw: [] as number[], rawValidated: [] as number[] }
    const perRoundRatio: number[] = []
    const perRoundMedianRatio: number[] = []
    for (let i = 0; i < options.warmup; i++) for (const [, call] of arms) await call()
    for (let round = 0; round < options.rounds; round++) {
      const roundSamples = { client: [] as number[], raw: [] as number[] }
      for (let i = 0; i < options.calls; i++) {
        for (let k = 0; k < arms.length; k++) {
          const [name, call] = arms[(i + k) % arms.length]
          const started = performance.now()
          await call()
          const took = performance.now() - started
          samples[name].push(took)
          if (name !== 'rawValidated') roundSamples[name].push(took)
        }
      }
      const ours = summarize(roundSamples.client)
      const raw = summarize(roundSamples.raw)
      perRoundRatio.push(ours.mean / raw.mean)
      perRoundMedianRatio.push(ours.p50 / raw.p50)
    }
    const result = {
      client: summarize(samples.client),
      raw: summarize(samples.raw),
      rawValidated: summarize(samples.rawValidated),
    }
    return {
      calls: options.calls,
      warmup: options.warmup,
      rounds: options.rounds,
      perRoundRatio,
      perRoundMedianRatio,
      ...result,
      ratio: median(perRoundRatio),
      medianRatio: median(perRoundMedianRatio),
      validatedRatio: result.rawValidated.mean / result.raw.mean,
    }
  } finally {
    await client.close()
    await agent.close()
  }
}

/** The client-overhead measure against an emulator child process; a failure is a result. */
export async function runClientOverhead(
  options: { busyCore?: boolean } = {}
): Promise<ClientOverheadResult | { error: string }> {
  const emulator = await startChild<{
    baseUrl: string
    apiKey: string
    paymentMethodId: string
  }>(EMULATOR_SERVER)
  // Another process keeps one core busy for the whole measure (bounded: it stops by itself).
  const busy = options.busyCore ? busyCore(600) : null
  try {
    return await measureClientOverhead({ emulator, ...CLIENT })
  } catch (error) {
    return { error: (error as Error).message }
  } finally {
    busy?.stop()
    await emulator.stop()
  }
}

/** The client-overhead rows of the results table; `busy`: measured with one core kept busy. */
export function clientChecks(
  c: ClientOverheadResult | { error: string },
  busy?: ClientOverheadResult | { error: string }
): Check[] {
  const busyRows: Check[] = !busy
    ? []
    : 'error' in busy
      ? [
          {
            id: 'client.busy_core_ratio',
            measure: 'client overhead, one core busy',
            db: 'emulator',
            value: null,
            unit: '',
            target: `failed: ${busy.error}`,
            pass: false,
          },
        ]
      : [
          {
            id: 'client.busy_core_ratio',
            measure:
              `client / raw with one core kept busy by another process, ratio of the means, ` +
              `median of rounds (means ${busy.client.mean.toFixed(3)} / ${busy.raw.mean.toFixed(3)} ms): ` +
              busy.perRoundRatio.map((x) => x.toFixed(3)).join(' '),
            db: 'emulator',
            value: rounded(busy.ratio, 4),
            unit: 'x',
            target: '<= 1.10',
            pass: busy.ratio <= 1.1,
          },
        ]
  return [...clientRows(c), ...busyRows]
}

function clientRows(c: ClientOverheadResult | { error: string }): Check[] {
  if ('error' in c) {
    return [
      {
        id: 'client.ratio',
        measure: 'client overhead',
        db: 'emulator',
        value: null,
        unit: '',
        target: `failed: ${c.error}`,
        pass: false,
      },
    ]
  }
  return [
    {
      id: 'client.mean',
      measure: `getPayout via PayoutsClient, mean per call (p50 ${c.client.p50.toFixed(3)})`,
      db: 'emulator',
      value: rounded(c.client.mean, 3),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: 'client.raw_mean',
      measure: `raw undici GET, mean per call (p50 ${c.raw.p50.toFixed(3)})`,
      db: 'emulator',
      value: rounded(c.raw.mean, 3),
      unit: 'ms',
      target: '',
      pass: null,
    },
    {
      id: 'client.ratio',
      measure: `client / raw, ratio of the means, median of rounds of ${c.calls} calls per arm: ${c.perRoundRatio.map((x) => x.toFixed(3)).join(' ')}`,
      db: 'emulator',
      value: rounded(c.ratio, 4),
      unit: 'x',
      target: '<= 1.10',
      pass: c.ratio <= 1.1,
    },
    {
      id: 'client.median_ratio',
      measure: `client / raw, ratio of the medians, median of rounds: ${c.perRoundMedianRatio.map((x) => x.toFixed(3)).join(' ')}`,
      db: 'emulator',
      value: rounded(c.medianRatio, 4),
      unit: 'x',
      target: '<= 1.10',
      pass: c.medianRatio <= 1.1,
    },
    {
      id: 'client.validated_ratio',
      measure: 'raw + zod payout schema / raw (cost of response validation)',
      db: 'emulator',
      value: rounded(c.validatedRatio, 4),
      unit: 'x',
      target: '',
      pass: null,
    },
  ]
}
