import type { ApplicationService } from '@adonisjs/core/types'
import { PayoutsService } from '../src/service/payouts_service.ts'
import '../src/types/extended.ts'

/**
 * Binds the payouts service as a lazy singleton. Heavy modules (the client, Lucid
 * models) are loaded on first use, so `node ace` commands that do not need them stay fast.
 */
export default class PayoutsProvider {
  #service?: PayoutsService

  constructor(protected app: ApplicationService) {}

  register() {
    this.app.container.singleton(PayoutsService, async (resolver) => {
      const { defineConfig } = await import('../src/define_config.ts')
      // Validated again here so a plain object (or a config edited by hand) is reported
      // with its key at boot, not at the first API call.
      const config = defineConfig(this.app.config.get('payouts'))
      const logger = await resolver.make('logger')
      const emitter = await resolver.make('emitter')
      const hasLucid = this.app.container.hasBinding('lucid.db')
      this.#service = new PayoutsService(config, {
        logger,
        emitter,
        database: hasLucid ? () => this.app.container.make('lucid.db') : undefined,
        encryption: () => this.app.container.make('encryption'),
      })
      return this.#service
    })
    this.app.container.alias('payouts.manager', PayoutsService)
  }

  /**
   * Points the models at the configured tables, and swaps the stock bodyparser for one that skips the webhook route, so its handler reads
   * the untouched request stream (the host app's kernel stays as it is).
   */
  async boot() {
    // Models point at the configured prefix before any host code queries them.
    const ledger = this.app.config.get('payouts.ledger', {}) as {
      enabled?: boolean
      tablePrefix?: string
      connection?: string
    }
    if (ledger.enabled !== false && this.app.container.hasBinding('lucid.db')) {
      const { configureModels } = await import('../src/models/main.ts')
      configureModels(ledger.tablePrefix ?? 'svc_', ledger.connection)
    }

    const { default: BodyParserMiddleware } = await import('@adonisjs/core/bodyparser_middleware')
    const { createSkippingBodyParser } = await import('../src/webhooks/skipping_bodyparser.ts')
    const path = () => this.app.config.get('payouts.webhook.path', '/webhooks/payouts') as string
    const Skipping = createSkippingBodyParser(path)
    this.app.container.singleton(BodyParserMiddleware, () => {
      return new Skipping(this.app.config.get('bodyparser'), this.app.experimentalFlags)
    })
  }

  /** In the web process, retry due inbox rows on an interval (config webhook.retryIntervalMs). */
  async ready() {
    if (this.app.getEnvironment() !== 'web' || !this.app.container.hasBinding('lucid.db')) return
    const service = await this.app.container.make(PayoutsService)
    if (!service.config.ledger.enabled) return
    service.startInboxWorker()
    if (service.config.events.sources !== 'webhooks') await service.startStream()
    if (service.config.jobs.enabled) await service.startJobs()
  }

  /** Closes the client's keep-alive sockets and the service's timers. */
  async shutdown() {
    await this.#service?.close()
  }
}
