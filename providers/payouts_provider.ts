import type { ApplicationService } from '@adonisjs/core/types'
import type { PayoutsConfig } from '../src/define_config.ts'
import { hostLockServices } from '../src/service/host_services.ts'
import { PayoutsService } from '../src/service/payouts_service.ts'
import '../src/types/extended.ts'

/**
 * Binds the payouts service as a lazy singleton. Heavy modules (the client, Lucid
 * models) are loaded on first use, so `node ace` commands that do not need them stay fast.
 */
export default class PayoutsProvider {
  #service?: PayoutsService
  #config?: PayoutsConfig

  constructor(protected app: ApplicationService) {}

  register() {
    this.registerService()
  }

  async boot() {
    await this.pointModelsAtConfiguredTables()
    await this.skipBodyParserOnWebhookRoute()
  }

  async ready() {
    await this.startBackgroundWork()
    await this.relayBroadcasts()
  }

  /** Closes the client's keep-alive sockets and the service's timers. */
  async shutdown() {
    await this.#service?.close()
  }

  /**
   * `config/payouts.ts` through `defineConfig`, once. Validated here too, so a plain
   * object (or a config edited by hand) is reported with its key.
   */
  async #validatedConfig(): Promise<PayoutsConfig> {
    if (!this.#config) {
      const { defineConfig } = await import('../src/define_config.ts')
      this.#config = defineConfig(this.app.config.get('payouts'))
    }
    return this.#config
  }

  /**
   * The validated config for the boot steps, or null when it is invalid: those steps are
   * then skipped, and resolving the service reports the offending key.
   */
  #configIfValid(): Promise<PayoutsConfig | null> {
    return this.#validatedConfig().catch(() => null)
  }

  /** The service as a lazy singleton, by class and as `payouts.manager`. */
  protected registerService() {
    this.app.container.singleton(PayoutsService, async (resolver) => {
      const config = await this.#validatedConfig()
      const logger = await resolver.make('logger')
      const emitter = await resolver.make('emitter')
      const hasLucid = this.app.container.hasBinding('lucid.db')
      this.#service = new PayoutsService(config, {
        logger,
        emitter,
        database: hasLucid ? () => this.app.container.make('lucid.db') : undefined,
        encryption: () => this.app.container.make('encryption'),
        httpServer: () => this.app.container.make('server'),
        transmitTransport: () => Boolean(this.app.config.get('transmit.transport', null)),
        ...hostLockServices(this.app),
      })
      return this.#service
    })
    this.app.container.alias('payouts.manager', PayoutsService)
  }

  /** Points the models at the configured tables before any host code queries them. */
  protected async pointModelsAtConfiguredTables() {
    if (!this.app.container.hasBinding('lucid.db')) return
    const config = await this.#configIfValid()
    if (!config?.ledger.enabled) return
    const { configureModels } = await import('../src/models/main.ts')
    configureModels(config.ledger.tablePrefix, config.ledger.connection)
  }

  /**
   * Swaps the stock bodyparser for one that skips the webhook route, so its handler reads
   * the untouched request stream (the host app's kernel stays as it is).
   */
  protected async skipBodyParserOnWebhookRoute() {
    const config = await this.#configIfValid()
    if (!config) return
    const { default: BodyParserMiddleware } = await import('@adonisjs/core/bodyparser_middleware')
    const { createSkippingBodyParser } = await import('../src/webhooks/skipping_bodyparser.ts')
    const Skipping = createSkippingBodyParser(() => config.webhook.path)
    this.app.container.singleton(BodyParserMiddleware, () => {
      return new Skipping(this.app.config.get('bodyparser'), this.app.experimentalFlags)
    })
  }

  /**
   * In a web process, the broadcast relay (`transmit.relay`): once the app registers the
   * payout channels, every change applied by any process goes out to this process's
   * subscribers. Console commands (`payouts:work`) serve no subscriber.
   */
  protected async relayBroadcasts() {
    if (this.app.getEnvironment() !== 'web' || !this.app.container.hasBinding('lucid.db')) return
    const service = await this.app.container.make(PayoutsService)
    await service.relayBroadcasts()
  }

  /**
   * In the web process: the inbox worker (config webhook.retryIntervalMs), the WebSocket
   * source when configured, and the jobs when enabled. None of them with
   * `webhook.processing: 'worker'`: `node ace payouts:work` runs them.
   */
  protected async startBackgroundWork() {
    if (this.app.getEnvironment() !== 'web' || !this.app.container.hasBinding('lucid.db')) return
    const service = await this.app.container.make(PayoutsService)
    if (!service.config.ledger.enabled || service.config.webhook.processing === 'worker') return
    // No key issued yet: the app still serves; what needs the service waits for a restart.
    if (!service.config.apiKey) {
      const logger = await this.app.container.make('logger')
      logger.warn('payouts: PAYOUTS_API_KEY is not set; inbox processing and jobs are not started')
      return
    }
    service.startInboxWorker()
    if (service.config.events.sources !== 'webhooks') await service.startStream()
    if (service.config.jobs.enabled) await service.startJobs()
  }
}
