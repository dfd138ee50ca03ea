import { Agent, request } from 'undici'
import { PayoutsClient } from '../src/client/main.ts'
import { payoutSchema } from '../src/schemas/resources.ts'
import type { Child } from './ipc.ts'
import { median, summarize, type Summary } from './stats.ts'

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
