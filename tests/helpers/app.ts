import type { ApplicationService } from '@adonisjs/core/types'
import type { PayoutsConfigInput } from '../../src/define_config.ts'
import { bootHostApp } from './host_app.ts'
import { SCRATCH_URL } from './scratch.ts'

export const BASE_URL = SCRATCH_URL

/** A syntactically valid sandbox key for apps that never reach a server. */
export const TEST_API_KEY = `sk_test_${'A'.repeat(43)}`

/**
 * Boots an AdonisJS app with the payouts provider (no Lucid) and terminates it in the
 * test's cleanup.
 */
export async function createApp(
  payouts: Partial<PayoutsConfigInput>,
  cleanup: (fn: () => Promise<void>) => void,
  extraConfig: Record<string, unknown> = {}
): Promise<ApplicationService> {
  const app = await bootHostApp({
    root: BASE_URL,
    payouts: { apiKey: TEST_API_KEY, baseUrl: 'http://127.0.0.1:9', ...payouts },
    config: extraConfig,
  })
  cleanup(() => app.terminate())
  return app
}
