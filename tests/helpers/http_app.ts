import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { IgnitorFactory } from '@adonisjs/core/factories'
import type { ApplicationService } from '@adonisjs/core/types'
import { defineConfig as defineDbConfig } from '@adonisjs/lucid'
import { createPayoutsTables, dropPayoutsTables } from '../../src/database/schema.ts'
import type { PayoutsConfigInput } from '../../src/define_config.ts'
import type { PayoutsService } from '../../src/service/payouts_service.ts'
import { BASE_URL, TEST_API_KEY } from './app.ts'
import { connectionConfig } from './database.ts'

export interface HttpApp {
  app: ApplicationService
  payouts: PayoutsService
  url: string
  prefix: string
  events: Array<{ name: string; data: any }>
}

/**
 * A real AdonisJS app over real HTTP: core providers, Lucid on the suite's database, the
 * payouts provider, the stock bodyparser as router middleware and the webhook route.
 */
export async function startHttpApp(
  cleanup: (fn: () => Promise<void>) => void,
  payouts: Partial<PayoutsConfigInput> = {},
  setup?: (app: ApplicationService) => Promise<void>,
  /** Lucid connection settings, when not the suite's database as is (a proxy in front). */
  connection: Record<string, unknown> = connectionConfig('http')
): Promise<HttpApp> {
  const prefix = `w${Math.random().toString(36).slice(2, 8)}_`
  const ignitor = new IgnitorFactory()
    .withCoreProviders()
    .withCoreConfig()
    .merge({
      config: {
        transmit: { pingInterval: false, transport: null },
        database: defineDbConfig({
          connection: 'primary',
          connections: { primary: connection as any },
        }),
        payouts: {
          apiKey: TEST_API_KEY,
          baseUrl: 'http://127.0.0.1:9',
          ...payouts,
          webhook: { secret: 'whsec_current_secret', ...payouts.webhook },
          // Tests run jobs by hand; the scheduler has its own test.
          jobs: { enabled: false, ...payouts.jobs },
          ledger: { ...payouts.ledger, tablePrefix: prefix },
        },
      },
      rcFileContents: {
        providers: [
          () => import('@adonisjs/lucid/database_provider'),
          () => import('@adonisjs/transmit/transmit_provider'),
          () => import('../../providers/payouts_provider.ts'),
        ],
      },
    })
    .create(BASE_URL, {
      importer: (filePath) =>
        filePath.startsWith('.') ? import(new URL(filePath, BASE_URL).href) : import(filePath),
    })
  const app = ignitor.createApp('web')
  await app.init()
  await app.boot()
  const db = await app.container.make('lucid.db')
  await createPayoutsTables(db.connection().schema, prefix)
  const service = await app.container.make('payouts.manager')
  const router = await app.container.make('router')
  router.use([() => import('@adonisjs/core/bodyparser_middleware')])
  await service.registerRoutes(router)
  // A plain route proves the bodyparser still parses everywhere else.
  router.post('/echo', ({ request }) => request.body())
  await setup?.(app)
  const events: HttpApp['events'] = []
  const emitter = await app.container.make('emitter')
  emitter.onAny((name, data) => void events.push({ name: String(name), data }))
  await app.start(async () => {})
  const server = await app.container.make('server')
  await server.boot()
  const http: Server = createServer((req, res) => server.handle(req, res))
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve))
  cleanup(async () => {
    http.closeAllConnections()
    await new Promise((resolve) => http.close(resolve))
    await service.close()
    await dropPayoutsTables(db.connection().schema, prefix)
    await app.terminate()
  })
  return {
    app,
    payouts: service,
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}`,
    prefix,
    events,
  }
}
