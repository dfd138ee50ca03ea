import type { Logger } from '@adonisjs/core/logger'
import { PayoutsClient } from '../client/main.ts'
import type { PayoutsConfig } from '../define_config.ts'

/**
 * The plugin's entry point inside an AdonisJS app: a configured client today, and the
 * ledger, webhook pipeline and jobs built on it. Resolved from the container as
 * `payouts.manager` or injected by class with `@inject()`.
 */
export class PayoutsService {
  readonly config: PayoutsConfig
  #logger?: Logger
  #client?: PayoutsClient

  constructor(config: PayoutsConfig, logger?: Logger) {
    this.config = config
    this.#logger = logger
  }

  /** The framework-free API client, created on first use. */
  get client(): PayoutsClient {
    if (!this.#client) {
      const logger = this.#logger
      this.#client = new PayoutsClient({
        apiKey: this.config.apiKey,
        baseUrl: this.config.baseUrl,
        environment: this.config.environment,
        timeoutMs: this.config.timeoutMs,
        retry: this.config.retry,
        rateLimiter: this.config.clientRateLimiter,
        paths: this.config.paths,
        logger: logger
          ? {
              debug: (obj, msg) => logger.debug(obj, msg),
              warn: (obj, msg) => logger.warn(obj, msg),
            }
          : undefined,
      })
    }
    return this.#client
  }

  /** Closes sockets and timers; called by the provider on shutdown. */
  async close() {
    await this.#client?.close()
    this.#client = undefined
  }
}
