import { IgnitorFactory } from '@adonisjs/core/factories'
import type { ApplicationService } from '@adonisjs/core/types'
import type { PayoutsConfigInput } from '../../src/define_config.ts'

export const BASE_URL = new URL('../tmp/', import.meta.url)

/** A syntactically valid sandbox key for apps that never reach a server. */
export const TEST_API_KEY = `sk_test_${'A'.repeat(43)}`

/**
 * Boots an AdonisJS app with the payouts provider, the AdonisJS way (IgnitorFactory),
 * and terminates it in the test's cleanup.
 */
export async function createApp(
  payouts: Partial<PayoutsConfigInput>,
  cleanup: (fn: () => Promise<void>) => void,
  extraConfig: Record<string, unknown> = {}
): Promise<ApplicationService> {
  const ignitor = new IgnitorFactory()
    .withCoreProviders()
    .withCoreConfig()
    .merge({
      config: {
        payouts: { apiKey: TEST_API_KEY, baseUrl: 'http://127.0.0.1:9', ...payouts },
        ...extraConfig,
      },
      rcFileContents: {
        providers: [() => import('../../providers/payouts_provider.ts')],
      },
    })
    .create(BASE_URL, {
      importer: (filePath) => {
        if (filePath.startsWith('./') || filePath.startsWith('../')) {
          return import(new URL(filePath, BASE_URL).href)
        }
        return import(filePath)
      },
    })

  const app = ignitor.createApp('web')
  await app.init()
  await app.boot()
  cleanup(() => app.terminate())
  return app
}
