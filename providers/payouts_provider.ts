import { configProvider } from '@adonisjs/core'
import type { ApplicationService } from '@adonisjs/core/types'
import { modelTablesFrom, pointModels } from '../src/database/model_tables.ts'
import type { PayoutsManagerConfig } from '../src/accounts_config.ts'
import type { PayoutsConfig } from '../src/define_config.ts'
import { hostLockServices } from '../src/service/host_services.ts'
import { PayoutsManager } from '../src/service/payouts_manager.ts'
import { PayoutsService } from '../src/service/payouts_service.ts'
import { DEFAULT_ACCOUNT } from '../src/constants.ts'
import '../src/types/extended.ts'
import { safeError } from '../src/safe_error.ts'

/**
 * Binds the payouts service as a lazy singleton. Heavy modules (the client and undici, the
 * config's validator and zod, the Lucid models) are loaded on first use, so `node ace`
 * commands that do not need them stay fast (tests/integration/lazy_loading.spec.ts).
 */
export default class PayoutsProvider {
  #service?: PayoutsManager
  #config?: PayoutsManagerConfig

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
  async #validatedConfig(): Promise<PayoutsManagerConfig> {
    if (!this.#config) {
      const config = this.app.config.get<unknown>('payouts')
      const resolved = await configProvider.resolve<PayoutsManagerConfig>(this.app, config)
      if (resolved) {
        this.#config = resolved
      } else {
        const { validateManagerConfig } = await import('../src/accounts_config.ts')
        this.#config = validateManagerConfig(config as Parameters<typeof validateManagerConfig>[0])
      }
    }
    return this.#config
  }

  /**
   * The validated config for the boot steps, or null when it is invalid: those steps are
   * then skipped, and resolving the service reports the offending key.
   */
  #configIfValid(): Promise<PayoutsManagerConfig | null> {
    return this.#validatedConfig().catch(() => null)
  }

  /** The default account's config: what every account shares (the ledger) is read there. */
  async #defaultConfigIfValid(): Promise<PayoutsConfig | null> {
    const config = await this.#configIfValid()
    return config ? config.accounts[config.default] : null
  }

  /**
   * The manager as a lazy singleton, by class and as `payouts.manager`: the default
   * account's service, and every account's through `use(name)`. Injecting `PayoutsService`
   * gives the same object. The classes are small; the client and the wiring load later.
   */
  protected registerService() {
    this.app.container.singleton(PayoutsManager, async (resolver) => {
      const config = await this.#validatedConfig()
      const logger = await resolver.make('logger')
      const emitter = await resolver.make('emitter')
      const { createClient } = await import('../src/service/client_factory.ts')
      const hasLucid = this.app.container.hasBinding('lucid.db')
      const host = hostLockServices(this.app)
      this.#service = new PayoutsManager(config, (account) => {
        // Every line another account logs names it; main's read as a one-account app's.
        const logs =
          account.account === DEFAULT_ACCOUNT ? logger : logger.child({ account: account.account })
        return {
          logger: logs,
          emitter,
          createClient: () => createClient(account, logs),
          database: hasLucid ? () => this.app.container.make('lucid.db') : undefined,
          encryption: () => this.app.container.make('encryption'),
          httpServer: () => this.app.container.make('server'),
          transmitTransport: () => Boolean(this.app.config.get('transmit.transport', null)),
          servesSubscribers: () => this.#servesSubscribers(),
          ...host,
        }
      })
      return this.#service
    })
    this.app.container.singleton(PayoutsService, (resolver) => resolver.make(PayoutsManager))
    this.app.container.alias('payouts.manager', PayoutsManager)
  }

  /**
   * Where the models find their tables: this app's validated config, read when the models
   * load (host code, the service), not at boot.
   */
  protected registerModelTables() {
    modelTablesFrom(async () => {
      if (!this.app.container.hasBinding('lucid.db')) return null
      const config = await this.#defaultConfigIfValid()
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
      const paths = new Set(Object.values(config.accounts).map((each) => each.webhook.path))
      const Skipping = createSkippingBodyParser((path) => paths.has(path))
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
    const payouts = await this.app.container.make(PayoutsManager)
    await payouts.relayBroadcasts()
  }

  /**
   * In the web process: the inbox worker (config webhook.retryIntervalMs), the WebSocket
   * source when configured, and the jobs when enabled. None of them with
   * `webhook.processing: 'worker'`: `node ace payouts:work` runs them.
   */
  protected async startBackgroundWork() {
    if (this.app.getEnvironment() !== 'web' || !this.app.container.hasBinding('lucid.db')) return
    const payouts = await this.app.container.make(PayoutsManager)
    const logger = await this.app.container.make('logger')
    // Each account on its own: one that fails to start leaves the others running.
    for (const service of payouts.all()) {
      await this.#startAccountWork(service).catch((error) =>
        logger.error(
          { err: safeError(error), account: service.config.account },
          'payouts work not started'
        )
      )
    }
  }

  /** One account's inbox worker, stream and jobs (each account in its own processing mode). */
  async #startAccountWork(service: PayoutsService) {
    const { config } = service
    if (!config.ledger.enabled || config.webhook.processing === 'worker') return
    // No key issued yet: the app still serves; what needs the service waits for a restart.
    if (!config.apiKey) {
      const logger = await this.app.container.make('logger')
      const which =
        config.account === DEFAULT_ACCOUNT
          ? 'PAYOUTS_API_KEY'
          : `the key of account "${config.account}"`
      logger.warn(`payouts: ${which} is not set; inbox processing and jobs are not started`)
      return
    }
    service.startInboxWorker()
    if (config.events.sources !== 'webhooks') await service.startStream()
    if (config.jobs.enabled) await service.startJobs()
  }
}
