import type { Logger } from '@adonisjs/core/logger'
import { PayoutsClient } from '../client/main.ts'
import type { PayoutsConfig } from '../define_config.ts'
import { missingKey } from '../errors.ts'
import { clientRetries } from './client_retries.ts'

/**
 * The framework-free API client, configured from the plugin's config and logging to the app.
 * Without a key (none issued yet) it throws E_PAYOUTS_API_KEY_MISSING.
 */
export function createClient(config: PayoutsConfig, logger: Logger): PayoutsClient {
  if (!config.apiKey) throw missingKey(config.account)
  return new PayoutsClient({
    apiKey: config.apiKey,
    baseUrl: config.baseUrl,
    environment: config.environment,
    timeoutMs: config.timeoutMs,
    retry: config.retry,
    rateLimiter: config.clientRateLimiter,
    paths: config.paths,
    allowInsecureLoopbackWebhooks: config.allowInsecureLoopbackWebhooks,
    logger: {
      debug: (obj, msg) => {
        logger.debug(obj, msg)
        if (msg === 'payouts request retry' && clientRetries.hasSubscribers) {
          clientRetries.publish(obj)
        }
      },
      warn: (obj, msg) => logger.warn(obj, msg),
    },
  })
}
