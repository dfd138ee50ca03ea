import { API_KEY_PATTERN } from '../schemas/common.ts'
import { PayoutsConfigError } from './errors.ts'

export type PayoutsEnvironment = 'sandbox' | 'production'

/**
 * Checks the key's format and that its environment matches the configured one. The key
 * itself never appears in the message.
 */
export function environmentOfKey(
  apiKey: unknown,
  expected?: PayoutsEnvironment
): PayoutsEnvironment {
  if (typeof apiKey !== 'string' || !API_KEY_PATTERN.test(apiKey)) {
    throw new PayoutsConfigError(
      'apiKey must be sk_live_ or sk_test_ followed by 43 url-safe base64 characters'
    )
  }
  const environment: PayoutsEnvironment = apiKey.startsWith('sk_live_') ? 'production' : 'sandbox'
  if (expected && expected !== environment) {
    throw new PayoutsConfigError(
      `apiKey is a ${environment} key (${environment === 'production' ? 'sk_live_' : 'sk_test_'}) but environment is "${expected}"`
    )
  }
  return environment
}
