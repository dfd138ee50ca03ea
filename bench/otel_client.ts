import { PayoutsClient } from '../src/client/main.ts'
import { failToParent, serveParent } from './ipc.ts'
import type { OtelStats } from './otel_sdk.ts'

/** The client settings of the observability-cost part. */
export interface OtelClientSettings {
  /** Calls per arm in a round. */
  calls: number
  /** The arms alternate in blocks of this many calls (ABBA: off, on, on, off, ...). */
  block: number
  warmup: number
  rounds: number
}

/**
 * Child process of the observability-cost part (argv: the emulator's base URL, API key,
 * payment method id, and `--otel`): a `PayoutsClient` that calls `getPayout` on request, in
 * blocks, and returns each call's wall time. With `--otel`, OpenTelemetry's providers, context
 * manager and `new PayoutsInstrumentation()` are installed first (bench/otel_sdk.ts), and stay
 * for the process's life, as in an app; without, nothing of OpenTelemetry is even loaded.
 * bench/otel.ts runs one of each and alternates the blocks between them.
 */
async function main() {
  const [baseUrl, apiKey, paymentMethodId] = process.argv.slice(2)
  // Loaded only with --otel: the other arm has nothing of OpenTelemetry's SDK in memory.
  const sdk = process.argv.includes('--otel') ? await import('./otel_sdk.ts') : null
  const otel = sdk?.installOtel() ?? null
  const client = new PayoutsClient({ apiKey, baseUrl: `${baseUrl}/api`, rateLimiter: false })
  const recipient = await client.recipients.create({ name: 'Bench Recipient', currency: 'MXN' })
  const { payoutId } = await client.execute({
    fromCurrency: 'USD',
    toCurrency: 'MXN',
    amount: 100,
    recipientId: recipient.id,
    userPaymentMethodId: paymentMethodId,
  })

  serveParent(
    { pid: process.pid, otel: otel !== null },
    {
      /** `calls` sequential getPayout calls; each one's wall time, ms. */
      block: async (args: { calls: number }) => {
        const samples: number[] = []
        for (let i = 0; i < args.calls; i++) {
          const started = performance.now()
          const payout = await client.getPayout(payoutId)
          samples.push(performance.now() - started)
          if (payout.payoutId !== payoutId) throw new Error('getPayout: bad answer')
        }
        return samples
      },
      resetStats: () => otel?.resetStats(),
      otelStats: async (): Promise<OtelStats | null> => (await otel?.stats()) ?? null,
    },
    async () => {
      await client.close()
      await otel?.shutdown()
    }
  )
}

main().catch(failToParent)
