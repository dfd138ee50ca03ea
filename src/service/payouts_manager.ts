import type { HttpRouterService } from '@adonisjs/core/types'
import type { PayoutsManagerConfig } from '../accounts_config.ts'
import type { PayoutsConfig } from '../define_config.ts'
import { E_PAYOUTS_UNKNOWN_ACCOUNT } from '../errors.ts'
import type { PayoutsFake, PayoutsFakeOptions } from '../testing/payouts_fake.ts'
import type { ChannelAuthorizers, ChannelBroadcaster } from './notifier.ts'
import { PayoutsService } from './payouts_service.ts'
import type { PayoutsServiceDeps } from './wiring.ts'

/**
 * The app's payouts, one service per account, as AdonisJS managers hold their stores
 * (`lock.use('redis')`, `mail.use('ses')`): `payouts.use('eu')` is that account's service,
 * and the manager is itself the default account's (`payouts.execute(...)`). Each account has
 * its client, rate budget, webhook route and secrets, jobs, stream and health; the ledger's
 * tables are shared, each row carrying its account. Other accounts' services are made on
 * first use. Resolved as `payouts.manager`; docs/accounts.md.
 */
export class PayoutsManager extends PayoutsService {
  /** Every account's validated config, and the default one's name. */
  readonly accountsConfig: PayoutsManagerConfig
  #depsFor: (config: PayoutsConfig) => PayoutsServiceDeps
  #others = new Map<string, PayoutsService>()

  constructor(
    config: PayoutsManagerConfig,
    depsFor: (config: PayoutsConfig) => PayoutsServiceDeps
  ) {
    const main = config.accounts[config.default]
    super(main, depsFor(main))
    this.accountsConfig = config
    this.#depsFor = depsFor
  }

  /** The accounts' names, the default one first. */
  get accounts(): string[] {
    const names = Object.keys(this.accountsConfig.accounts)
    return [this.accountsConfig.default, ...names.filter((n) => n !== this.accountsConfig.default)]
  }

  /**
   * The service of `account` (the default one without a name). An account config/payouts.ts
   * does not have is refused with E_PAYOUTS_UNKNOWN_ACCOUNT, never read as the default.
   */
  use(account?: string): PayoutsService {
    if (account === undefined || account === this.config.account) return this
    const config = Object.hasOwn(this.accountsConfig.accounts, account)
      ? this.accountsConfig.accounts[account]
      : undefined
    if (!config) {
      throw new E_PAYOUTS_UNKNOWN_ACCOUNT([String(account), this.accounts.join(', ')])
    }
    let service = this.#others.get(account)
    if (!service) {
      service = new PayoutsService(config, this.#depsFor(config))
      this.#others.set(account, service)
    }
    return service
  }

  /** Every account's service, the default one first. */
  all(): PayoutsService[] {
    return this.accounts.map((name) => this.use(name))
  }

  /**
   * Adds each account's webhook route (`POST <webhook.path>`): the default account's is named
   * `payouts.webhook` (or `as`), another's `payouts.webhook.<name>`. Returns the default
   * account's.
   */
  async registerRoutes(router: HttpRouterService, options: { as?: string } = {}) {
    const route = await super.registerRoutes(router, options)
    for (const service of this.all().slice(1)) {
      await service.registerRoutes(router, { as: `payouts.webhook.${service.config.account}` })
    }
    return route
  }

  /** Authorizes the payout channels and broadcasts every account's changes on them. */
  registerChannels(transmit: ChannelBroadcaster, authorizers: ChannelAuthorizers = {}) {
    super.registerChannels(transmit, authorizers)
    for (const service of this.all().slice(1)) service.registerChannels(transmit, authorizers)
  }

  async relayBroadcasts() {
    await super.relayBroadcasts()
    for (const service of this.all().slice(1)) await service.relayBroadcasts()
  }

  /**
   * Fakes every account, each with its own in-process emulator. The handle is the default
   * account's; `fake.account('eu')` is another's.
   */
  async fake(options: PayoutsFakeOptions = {}): Promise<PayoutsFake> {
    const fake = await super.fake(options)
    const fakes = new Map<string, PayoutsFake>([[this.config.account, fake]])
    try {
      for (const service of this.all().slice(1)) {
        fakes.set(service.config.account, await service.fake(options))
      }
    } catch (error) {
      // All or none: the accounts faked so far get their real connection back.
      await this.restore()
      throw error
    }
    for (const each of fakes.values()) each.knowAccounts(fakes)
    return fake
  }

  async restore() {
    await super.restore()
    for (const service of this.#others.values()) await service.restore()
  }

  async close() {
    for (const service of this.#others.values()) await service.close()
    await super.close()
  }
}
