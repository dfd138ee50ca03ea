import { test } from '@japa/runner'
import PayoutsCoverage from '../../commands/payouts_coverage.ts'
import { validateConfig } from '../../src/define_config.ts'
import { createApp } from '../helpers/app.ts'
import { startHttpApp } from '../helpers/http_app.ts'

test.group('No API key yet', () => {
  test('the app boots without a key; the first use of the client names PAYOUTS_API_KEY', async ({
    assert,
    cleanup,
  }) => {
    const app = await createApp({ apiKey: undefined }, cleanup)
    const payouts = await app.container.make('payouts.manager')
    assert.throws(() => payouts.client, /No Payout Service API key: set PAYOUTS_API_KEY/)

    const ace = await app.container.make('ace')
    ace.ui.switchMode('raw')
    const command = await ace.create(PayoutsCoverage, [])
    await command.exec()
    command.assertFailed()
    command.assertLogMatches(/set PAYOUTS_API_KEY/)
  })

  test('the web app starts without a key, and says that processing and jobs wait for one', async ({
    assert,
    cleanup,
  }) => {
    const warnings: string[] = []
    const { url } = await startHttpApp(
      cleanup,
      { apiKey: undefined, jobs: { enabled: true } },
      async (app) => {
        const logger = await app.container.make('logger')
        const warn = logger.warn.bind(logger)
        logger.warn = ((...args: [any, ...any[]]) => {
          warnings.push(args.map(String).join(' '))
          return (warn as (...a: any[]) => void)(...args)
        }) as typeof logger.warn
      }
    )
    const echoed = await fetch(`${url}/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ served: true }),
    })
    assert.deepEqual(await echoed.json(), { served: true })
    assert.isTrue(warnings.some((line) => line.includes('PAYOUTS_API_KEY is not set')))
  })

  test('a malformed key fails validation, naming the variable and never the value', ({
    assert,
  }) => {
    const apiKey = 'sk_test_not-quite-a-key'
    const boot = () => validateConfig({ apiKey, baseUrl: 'http://127.0.0.1:4010' })
    assert.throws(boot, /apiKey must be .*PAYOUTS_API_KEY/)
    assert.throws(boot, /^(?![\s\S]*not-quite-a-key)/)
    assert.doesNotThrow(() => validateConfig({ baseUrl: 'http://127.0.0.1:4010' }))
  })
})
