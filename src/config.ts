import { configProvider } from '@adonisjs/core'
import type { ConfigProvider } from '@adonisjs/core/types'
import type { PayoutsManagerConfig, PayoutsManagerConfigInput } from './accounts_config.ts'

/**
 * Defines the plugin's config for `config/payouts.ts`: a config provider, as `@adonisjs/lock`
 * and `@adonisjs/mail` return, validated (`validateConfig`) when the service is first
 * resolved. `node ace` commands that do not use the service load no validator.
 */
export function defineConfig(
  config: PayoutsManagerConfigInput
): ConfigProvider<PayoutsManagerConfig> {
  return configProvider.create(async () => {
    const { validateManagerConfig } = await import('./accounts_config.ts')
    return validateManagerConfig(config)
  })
}
