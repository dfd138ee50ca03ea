import type { Logger } from '@adonisjs/core/logger'
import type { PayoutsClient } from '../client/main.ts'
import type { PayoutsConfig } from '../define_config.ts'
import type { Reachability } from '../health/reachability.ts'

/**
 * What the service talks to: the Payout Service's API through a client, the secrets its
 * deliveries are signed with besides the app's own, and the probe health reads. The live one
 * is built from the config; `payouts.fake()` puts its in-process emulator in its place until
 * `restore()`, as `mail.fake()` replaces the mailer the manager hands out.
 */
export interface PayoutsConnection {
  /** The API client, built on first use. */
  readonly client: PayoutsClient
  /** Secrets the route accepts besides the configured and stored ones (the fake's own). */
  readonly webhookSecrets: readonly string[]
  /** The probe behind health's reachability line, built on first use and kept. */
  reachability(): Promise<Reachability>
  /** Whether this is `payouts.fake()`'s emulator (shown by the service's `toJSON`). */
  readonly faked: boolean
  /** Closes its sockets. */
  close(): Promise<void>
}

/**
 * The configured service: the client `makeClient` makes (the provider's `createClient`, in
 * `client_factory.ts`, loaded with the client, undici and zod on first use), and a probe of
 * its own for health (one attempt, the short timeout, no rate budget of the app's).
 */
export class LiveConnection implements PayoutsConnection {
  readonly webhookSecrets: readonly string[] = []
  readonly faked = false
  #client?: PayoutsClient
  #reachability?: Reachability

  constructor(
    private config: PayoutsConfig,
    private logger: Logger,
    private makeClient: () => PayoutsClient
  ) {}

  get client(): PayoutsClient {
    this.#client ??= this.makeClient()
    return this.#client
  }

  async reachability(): Promise<Reachability> {
    if (!this.#reachability) {
      const [{ Reachability }, { createClient }] = await Promise.all([
        import('../health/reachability.ts'),
        import('./client_factory.ts'),
      ])
      const { config, logger } = this
      const { timeoutMs } = config.health.reachability
      this.#reachability ??= new Reachability(config, () =>
        createClient(
          {
            ...config,
            timeoutMs,
            retry: { ...config.retry, maxRetries: 0 },
            clientRateLimiter: false,
          },
          logger
        )
      )
    }
    return this.#reachability
  }

  async close() {
    await this.#client?.close()
    this.#client = undefined
    await this.#reachability?.close()
    this.#reachability = undefined
  }
}
