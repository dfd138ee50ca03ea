import { inspect } from 'node:util'
import { test } from '@japa/runner'
import { Secret } from '@adonisjs/core/helpers'
import { defineConfig } from '../../src/config.ts'
import { validateManagerConfig, type PayoutsManagerConfigInput } from '../../src/accounts_config.ts'
import { validateConfig } from '../../src/define_config.ts'
import { createApp, TEST_API_KEY } from '../helpers/app.ts'

const EU_API_KEY = `sk_test_${'B'.repeat(43)}`
const BASE = 'http://127.0.0.1:9'

/** The message of the E_PAYOUTS_INVALID_CONFIG `validate` throws, or a failure. */
function refusal(validate: () => unknown): string {
  try {
    validate()
  } catch (error) {
    const { code, message } = error as { code?: string; message: string }
    if (code !== 'E_PAYOUTS_INVALID_CONFIG') throw error
    return message
  }
  throw new Error('the config was accepted')
}

test.group('Config | Secret values (Env.schema.secret())', () => {
  test('defineConfig with the key and webhook secrets as Secrets boots the app, and the client has the key', async ({
    assert,
    cleanup,
  }) => {
    const app = await createApp(
      defineConfig({
        apiKey: new Secret(TEST_API_KEY),
        baseUrl: BASE,
        webhook: {
          secret: new Secret('whsec_current'),
          previousSecret: new Secret('whsec_previous'),
          previousSecretValidUntil: new Date(Date.now() + 60_000).toISOString(),
        },
      }) as never,
      cleanup
    )
    const payouts = await app.container.make('payouts.manager')
    assert.equal(payouts.config.apiKey, TEST_API_KEY)
    assert.equal(payouts.client.environment, 'sandbox')
    assert.equal(payouts.config.webhook.secret, 'whsec_current')
    assert.equal(payouts.config.webhook.previousSecret, 'whsec_previous')
    // Shown, the config hides what the Secrets held.
    for (const shown of [inspect(payouts.config, { depth: 5 }), JSON.stringify(payouts.config)]) {
      assert.notInclude(shown, TEST_API_KEY)
      assert.notInclude(shown, 'whsec_current')
      assert.notInclude(shown, 'whsec_previous')
    }
  })

  test('a Secret holding a malformed key or secret is refused naming its key, never its value', ({
    assert,
  }) => {
    const badKey = refusal(() =>
      validateConfig({ apiKey: new Secret('sk_test_not-quite-a-key'), baseUrl: BASE })
    )
    assert.match(badKey, /apiKey must be sk_live_ or sk_test_/)
    assert.notInclude(badKey, 'not-quite-a-key')

    const badSecret = refusal(() =>
      validateConfig({ baseUrl: BASE, webhook: { secret: new Secret('nope_secret_value') } })
    )
    assert.match(badSecret, /webhook\.secret /)
    assert.notInclude(badSecret, 'nope_secret_value')

    const notSecret = refusal(() => validateConfig({ baseUrl: BASE, apiKey: 42 as never }))
    assert.match(notSecret, /apiKey must be a string or a Secret/)
  })

  test("each account's key and secrets may be Secrets, over shared ones that are Secrets too", ({
    assert,
  }) => {
    const config = validateManagerConfig({
      baseUrl: BASE,
      apiKey: new Secret(TEST_API_KEY),
      webhook: { secret: new Secret('whsec_shared') },
      default: 'main',
      accounts: {
        main: {},
        eu: {
          apiKey: new Secret(EU_API_KEY),
          webhook: {
            secret: new Secret('whsec_eu'),
            previousSecret: new Secret('whsec_eu_before'),
            previousSecretValidUntil: new Date(Date.now() + 60_000).toISOString(),
          },
        },
      },
    })
    assert.equal(config.accounts.main.apiKey, TEST_API_KEY)
    assert.equal(config.accounts.main.webhook.secret, 'whsec_shared')
    assert.equal(config.accounts.eu.apiKey, EU_API_KEY)
    assert.equal(config.accounts.eu.webhook.secret, 'whsec_eu')
    assert.equal(config.accounts.eu.webhook.previousSecret, 'whsec_eu_before')
  })

  test('two accounts given one key or one secret, as Secrets, are refused without the value', ({
    assert,
  }) => {
    const twoAccounts = (eu: Record<string, unknown>) =>
      ({
        baseUrl: BASE,
        apiKey: new Secret(TEST_API_KEY),
        webhook: { secret: new Secret('whsec_main') },
        accounts: { main: {}, eu },
        default: 'main',
      }) as PayoutsManagerConfigInput
    const sameKey = refusal(() =>
      validateManagerConfig(
        twoAccounts({
          apiKey: new Secret(TEST_API_KEY),
          webhook: { secret: new Secret('whsec_eu') },
        })
      )
    )
    assert.match(sameKey, /accounts\.eu\.apiKey is the API key of accounts\.main/)
    assert.notInclude(sameKey, TEST_API_KEY)
    const sameSecret = refusal(() =>
      validateManagerConfig(
        twoAccounts({
          apiKey: new Secret(EU_API_KEY),
          webhook: { secret: new Secret('whsec_main') },
        })
      )
    )
    assert.match(
      sameSecret,
      /accounts\.eu\.webhook\.secret is the webhook secret of accounts\.main/
    )
    assert.notInclude(sameSecret, 'whsec_main')
  })

  test('a Secret of another copy of @poppinss/utils is read too', ({ assert }) => {
    // What a Secret is to the config: an object whose release() gives the string.
    const foreign = { release: () => TEST_API_KEY, toString: () => '[redacted]' }
    assert.equal(validateConfig({ apiKey: foreign as never, baseUrl: BASE }).apiKey, TEST_API_KEY)
  })
})
