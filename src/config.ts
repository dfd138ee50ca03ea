import { configProvider } from '@adonisjs/core'
import type { ConfigProvider } from '@adonisjs/core/types'
import type { PayoutsConfig, PayoutsConfigInput } from './define_config.ts'

/**
 * Defines the plugin's config for `config/payouts.ts`: a config provider, as `@adonisjs/lock`
 * and `@adonisjs/mail` return, validated (`validateConfig`) when the service is first
 * resolved. `node ace` commands that do not use the service load no validator.
 */
export function defineConfig(config: PayoutsConfigInput): ConfigProvider<PayoutsConfig> {
  return configProvider.create(async () => {
    const { validateConfig } = await import('./define_config.ts')
    return validateConfig(config)
  })
}
