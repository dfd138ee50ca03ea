import { test } from '@japa/runner'
import { configProvider, inject } from '@adonisjs/core'
import { PayoutsService } from '../../src/service/payouts_service.ts'
import { PayoutsClient } from '../../src/client/main.ts'
import { validateConfig } from '../../src/define_config.ts'
import { defineConfig } from '../../src/config.ts'
import { ExceptionHandler } from '@adonisjs/core/http'
import { request as httpRequest } from 'undici'
import PayoutsStatus from '../../commands/payouts_status.ts'
import { fiatBody, startEmulator } from '../emulator/helpers.ts'
import { createApp, TEST_API_KEY } from '../helpers/app.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'

test.group('Provider | container bindings', () => {
  test('resolves the service from the container, by alias and by class', async ({
    assert,
    cleanup,
  }) => {
    const app = await createApp({}, cleanup)
    const byAlias = await app.container.make('payouts.manager')
    const byClass = await app.container.make(PayoutsService)
    assert.instanceOf(byAlias, PayoutsService)
    assert.strictEqual(byAlias, byClass)
    assert.instanceOf(byAlias.client, PayoutsClient)
    assert.equal(byAlias.client.environment, 'sandbox')
  })

  test('services/main exports the same singleton once the app is booted', async ({
    assert,
    cleanup,
  }) => {
    const app = await createApp({}, cleanup)
    const { default: payouts } = await import('../../services/main.ts')
    assert.strictEqual(payouts, await app.container.make('payouts.manager'))
  })

  test('injects the service into a host class with @inject()', async ({ assert, cleanup }) => {
    const app = await createApp({}, cleanup)

    @inject()
    class PayoutsController {
      constructor(public payouts: PayoutsService) {}
    }

    const controller = await app.container.make(PayoutsController)
    assert.strictEqual(controller.payouts, await app.container.make('payouts.manager'))
  })

  test('a wrong config value fails at resolution with the key named and the value hidden', async ({
    assert,
    cleanup,
  }) => {
    const app = await createApp({ timeoutMs: -5 }, cleanup)
    await assert.rejects(() => app.container.make('payouts.manager'), /timeoutMs/)
    const bad = { apiKey: 'sk_test_short', baseUrl: 'http://127.0.0.1' }
    assert.throws(() => validateConfig(bad), /apiKey must be sk_live_ or sk_test_/)
    assert.throws(() => validateConfig(bad), /^(?![\s\S]*sk_test_short)/)
  })

  test('defineConfig gives a config provider, validated when the service is first resolved', async ({
    assert,
    cleanup,
  }) => {
    const defined = defineConfig({ apiKey: TEST_API_KEY, baseUrl: 'http://x.test', timeoutMs: 5 })
    assert.equal(defined.type, 'provider')
    const app = await createApp({}, cleanup, { payouts: defined })
    const payouts = await app.container.make('payouts.manager')
    assert.equal(payouts.config.timeoutMs, 5)
    assert.equal(payouts.config.retry.maxRetryAfterMs, 120_000)

    const wrong = defineConfig({ apiKey: 'sk_test_short', baseUrl: 'http://x.test' })
    const wrongApp = await createApp({}, cleanup, { payouts: wrong })
    await assert.rejects(() => wrongApp.container.make('payouts.manager'), /apiKey must be sk_/)
    await assert.rejects(() => configProvider.resolve(wrongApp, wrong), /^(?!.*sk_test_short)/)
  })

  test('retry.maxRetryAfterMs defaults to 120 s and must be a positive integer', ({ assert }) => {
    const base = { apiKey: TEST_API_KEY, baseUrl: 'http://x.test' }
    assert.equal(validateConfig(base).retry.maxRetryAfterMs, 120_000)
    assert.equal(validateConfig({ ...base, retry: {} }).retry.maxRetryAfterMs, 120_000)
    assert.equal(
      validateConfig({ ...base, retry: { maxRetryAfterMs: 300_000 } }).retry.maxRetryAfterMs,
      300_000
    )
    for (const bad of [0, -1, 1.5]) {
      assert.throws(
        () => validateConfig({ ...base, retry: { maxRetryAfterMs: bad } }),
        /retry\.maxRetryAfterMs/
      )
    }
  })

  test('a configured previous secret needs an explicit end; there is no default grace', async ({
    assert,
  }) => {
    const base = { apiKey: TEST_API_KEY, baseUrl: 'http://127.0.0.1' }
    const open = { ...base, webhook: { secret: 'whsec_new', previousSecret: 'whsec_old' } }
    assert.throws(() => validateConfig(open), /webhook\.previousSecretValidUntil is required/)
    assert.throws(() => validateConfig(open), /^(?![\s\S]*whsec_old)/)
    const ended = validateConfig({
      ...base,
      webhook: { ...open.webhook, previousSecretValidUntil: '2030-01-01T00:00:00Z' },
    })
    assert.equal(ended.webhook.previousSecretValidUntil, '2030-01-01T00:00:00Z')
    assert.notProperty(validateConfig(base).webhook, 'rotationGraceMs')
  })

  test('shutdown closes the client and drops it', async ({ assert, cleanup }) => {
    const app = await createApp({}, cleanup)
    const payouts = await app.container.make('payouts.manager')
    const client = payouts.client
    await app.terminate()
    assert.notStrictEqual(payouts.client, client)
    assert.equal(
      validateConfig({ apiKey: TEST_API_KEY, baseUrl: 'http://x.test' }).timeoutMs,
      30000
    )
  })
})

test.group(`Provider | errors a host app lets through (${TEST_DB})`, () => {
  /** An app whose route executes whatever it is posted, without a try/catch. */
  async function payingApp(cleanup: (fn: () => Promise<void>) => void, appHandler: boolean) {
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const http = await startHttpApp(
      cleanup,
      { apiKey: emu.apiKey, baseUrl: emu.baseUrl, clientRateLimiter: false },
      async (app) => {
        const router = await app.container.make('router')
        router.post('/pay', async ({ request }) => {
          const payouts = await app.container.make('payouts.manager')
          return (await payouts.execute(request.body() as any)).result
        })
        // What `start/kernel.ts` of every AdonisJS app registers.
        if (appHandler) {
          const server = await app.container.make('server')
          server.errorHandler(async () => ({ default: class extends ExceptionHandler {} }))
        }
      }
    )
    const body = fiatBody(emu, { amount: 0 })
    const post = (payload: unknown) =>
      httpRequest(`${http.url}/pay`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'accept': 'application/json' },
        body: JSON.stringify(payload),
      })
    return { emu, http, body, post }
  }

  test('an invalid execute answers 422 with its code through the app exception handler', async ({
    assert,
    cleanup,
  }) => {
    const { emu, http, body, post } = await payingApp(cleanup, true)
    for (const amount of [0, -5]) {
      const response = await post({ ...body, amount })
      assert.equal(response.statusCode, 422)
      assert.deepEqual(await response.body.json(), {
        errors: [
          {
            field: 'amount',
            message: 'Too small: expected number to be >0',
            code: 'E_PAYOUTS_VALIDATION',
          },
        ],
      })
    }
    const unknownFlow = await post({ ...body, amount: 10, flow: 'teleport' })
    assert.equal(unknownFlow.statusCode, 422)
    assert.deepInclude(((await unknownFlow.body.json()) as any).errors[0], {
      field: 'flow',
      code: 'E_PAYOUTS_VALIDATION',
    })
    assert.equal(emu.state.idempotency.size, 0, 'nothing reached the service')

    // Nothing that may have gone out: health, payouts:status and recovery have nothing to say.
    assert.deepInclude(await http.payouts.health().then((h) => h.checks.unknownIntents), {
      value: 0,
    })
    const ace = await http.app.container.make('ace')
    ace.ui.switchMode('raw')
    const status = await ace.create(PayoutsStatus, ['--json'])
    await status.exec()
    status.assertSucceeded()
    assert.deepInclude(await http.payouts.recover({ olderThanMs: 0 }), { resent: 0, flagged: 0 })
    assert.equal(emu.state.idempotency.size, 0)
  })

  test("without an app exception handler, the server's fallback answers 422 too", async ({
    assert,
    cleanup,
  }) => {
    const { body, post } = await payingApp(cleanup, false)
    const response = await post(body)
    assert.equal(response.statusCode, 422)
    assert.match(await response.body.text(), /amount/)
  })
})
