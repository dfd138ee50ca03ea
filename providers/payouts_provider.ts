import { configProvider } from '@adonisjs/core'
import type { ApplicationService } from '@adonisjs/core/types'
import { modelTablesFrom, pointModels } from '../src/database/model_tables.ts'
import type { PayoutsConfig } from '../src/define_config.ts'
import { hostLockServices } from '../src/service/host_services.ts'
import { PayoutsService } from '../src/service/payouts_service.ts'
import '../src/types/extended.ts'

/**
 * Binds the payouts service as a lazy singleton. Heavy modules (the client and undici, the
 * config's validator and zod, the Lucid models) are loaded on first use, so `node ace`
 * commands that do not need them stay fast (tests/integration/lazy_loading.spec.ts).
 */
export default class PayoutsProvider {
  #service?: PayoutsService
  #config?: PayoutsConfig

  constructor(protected app: ApplicationService) {}

  register() {
    this.registerService()
    this.registerModelTables()
  }

  async boot() {
    await this.pointModelsAtConfiguredTables()
    await this.skipBodyParserOnWebhookRoute()
  }

  async ready() {
    // The relay's cursor first: what the inbox worker applies from its start goes out.
    await this.relayBroadcasts()
    await this.startBackgroundWork()
  }

  /** A web process with Lucid: it serves Transmit's subscribers, and relays to them. */
  #servesSubscribers() {
    return this.app.getEnvironment() === 'web' && this.app.container.hasBinding('lucid.db')
  }

  /** Closes the client's keep-alive sockets and the service's timers. */
  async shutdown() {
    await this.#service?.close()
  }

  /**
   * `config/payouts.ts` validated, once: `defineConfig`'s provider resolved, or a plain
   * object (a config edited by hand) validated here, so either is reported with its key.
   */
  async #validatedConfig(): Promise<PayoutsConfig> {
    if (!this.#config) {
      const config = this.app.config.get<unknown>('payouts')
      const resolved = await configProvider.resolve<PayoutsConfig>(this.app, config)
      if (resolved) {
        this.#config = resolved
      } else {
        const { validateConfig } = await import('../src/define_config.ts')
        this.#config = validateConfig(config as Parameters<typeof validateConfig>[0])
      }
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

  /**
   * The service as a lazy singleton, by class and as `payouts.manager`. The class is small;
   * the client and the wiring load in the factory.
   */
  protected registerService() {
    this.app.container.singleton(PayoutsService, async (resolver) => {
      const config = await this.#validatedConfig()
      const logger = await resolver.make('logger')
      const emitter = await resolver.make('emitter')
      const { createClient } = await import('../src/service/client_factory.ts')
      const hasLucid = this.app.container.hasBinding('lucid.db')
      this.#service = new PayoutsService(config, {
        logger,
        emitter,
        createClient: () => createClient(config, logger),
        database: hasLucid ? () => this.app.container.make('lucid.db') : undefined,
        encryption: () => this.app.container.make('encryption'),
        httpServer: () => this.app.container.make('server'),
        transmitTransport: () => Boolean(this.app.config.get('transmit.transport', null)),
        servesSubscribers: () => this.#servesSubscribers(),
        ...hostLockServices(this.app),
      })
      return this.#service
    })
    this.app.container.alias('payouts.manager', PayoutsService)
  }

  /**
   * Where the models find their tables: this app's validated config, read when the models
   * load (host code, the service), not at boot.
   */
  protected registerModelTables() {
    modelTablesFrom(async () => {
      if (!this.app.container.hasBinding('lucid.db')) return null
      const config = await this.#configIfValid()
      return config?.ledger.enabled ? config.ledger : null
    })
  }

  /**
   * Points the models at the configured tables before any host code queries them, when they
   * are loaded already (another app in this process); otherwise they are as they load.
   */
  protected async pointModelsAtConfiguredTables() {
    await pointModels()
  }

  /**
   * Swaps the stock bodyparser for one that skips the webhook route, so its handler reads
   * the untouched request stream (the host app's kernel stays as it is). The config is read
   * when the bodyparser is first resolved; when it is invalid, the stock one serves.
   */
  protected async skipBodyParserOnWebhookRoute() {
    const { default: BodyParserMiddleware } = await import('@adonisjs/core/bodyparser_middleware')
    this.app.container.singleton(BodyParserMiddleware, async () => {
      const bodyparser = this.app.config.get<any>('bodyparser')
      const config = await this.#configIfValid()
      if (!config) return new BodyParserMiddleware(bodyparser, this.app.experimentalFlags)
      const { createSkippingBodyParser } = await import('../src/webhooks/skipping_bodyparser.ts')
      const Skipping = createSkippingBodyParser(() => config.webhook.path)
      return new Skipping(bodyparser, this.app.experimentalFlags)
    })
  }

  /**
   * In a web process, the broadcast relay (`transmit.relay`): once the app registers the
   * payout channels, every change applied by any process goes out to this process's
   * subscribers. Console commands (`payouts:work`) serve no subscriber.
   */
  protected async relayBroadcasts() {
    if (!this.#servesSubscribers()) return
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
