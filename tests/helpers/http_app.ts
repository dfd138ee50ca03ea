import type { ApplicationService } from '@adonisjs/core/types'
import type { PayoutsConfigInput } from '../../src/define_config.ts'
import type { PayoutsManager } from '../../src/service/payouts_manager.ts'
import { startEmulator } from '../emulator/helpers.ts'
import { BASE_URL, TEST_API_KEY } from './app.ts'
import { connectionConfig } from './database.ts'
import { serveHostApp } from './host_app.ts'

export interface HttpApp {
  app: ApplicationService
  payouts: PayoutsManager
  url: string
  prefix: string
  events: Array<{ name: string; data: any }>
}

/**
 * A real AdonisJS app over real HTTP: core providers, Lucid on the suite's database (tables
 * under a fresh prefix), Transmit, the payouts provider, the stock bodyparser as router
 * middleware and the webhook route. Every event the app emits is kept in `events`.
 */
export async function startHttpApp(
  cleanup: (fn: () => Promise<void>) => void,
  payouts: Partial<PayoutsConfigInput> = {},
  setup?: (app: ApplicationService) => Promise<void>,
  /** Lucid connection settings, when not the suite's database as is (a proxy in front). */
  connection: Record<string, unknown> = connectionConfig('http')
): Promise<HttpApp> {
  const prefix = `w${Math.random().toString(36).slice(2, 8)}_`
  const events: HttpApp['events'] = []
  const host = await serveHostApp({
    root: BASE_URL,
    connection,
    transmit: true,
    tablePrefix: prefix,
    payouts: {
      apiKey: TEST_API_KEY,
      baseUrl: 'http://127.0.0.1:9',
      ...payouts,
      webhook: { secret: 'whsec_current_secret', ...payouts.webhook },
      // Tests run jobs by hand; the scheduler has its own test.
      jobs: { enabled: false, ...payouts.jobs },
      ledger: { ...payouts.ledger, tablePrefix: prefix },
    },
    async setup({ app, router }) {
      // A plain route proves the bodyparser still parses everywhere else.
      router.post('/echo', ({ request }) => request.body())
      await setup?.(app)
      const emitter = await app.container.make('emitter')
      emitter.onAny((name, data) => void events.push({ name: String(name), data }))
    },
  })
  cleanup(() => host.close())
  return { app: host.app, payouts: host.payouts, url: host.url, prefix, events }
}

/**
 * An emulator without rate limits as the service, and an app over real HTTP whose plugin
 * talks to it with the client-side rate limiter off.
 */
export async function startAppOnEmulator(
  cleanup: (fn: () => Promise<void>) => void,
  payouts: Partial<PayoutsConfigInput> = {}
) {
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const app = await startHttpApp(cleanup, {
    apiKey: emu.apiKey,
    baseUrl: emu.baseUrl,
    clientRateLimiter: false,
    ...payouts,
  })
  return { emu, app }
}
