import type { ApplicationService } from '@adonisjs/core/types'
import type { PluginFn } from '@japa/runner/types'
import type { Test } from '@japa/runner/core'
import type { PayoutsFake, PayoutsFakeOptions } from './payouts_fake.ts'

/** What `payoutsTesting()` accepts. */
export interface PayoutsTestingOptions {
  /** Options of every test's `payouts.fake()`. */
  fake?: PayoutsFakeOptions
  /**
   * Deletes the rows of the plugin's tables after each test (true). Turn it off when the
   * app cleans its database itself (`testUtils.db().truncate()` covers them too).
   */
  clearTables?: boolean
  /** Only the tests of these suites get the fake (all suites when not given). */
  suites?: string[]
}

declare module '@japa/runner/core' {
  interface TestContext {
    /** This test's `payouts.fake()`: lifecycle control, faults and assertions. */
    payouts: PayoutsFake
  }
}

/**
 * The Japa plugin of `@svc/adonis-payouts/testing`: every test runs against its own
 * `payouts.fake()` (available as `ctx.payouts`), restored after the test, and the plugin's
 * tables are emptied after it. Add it after `pluginAdonisJS(app)` in tests/bootstrap.ts.
 */
export function payoutsTesting(
  app: ApplicationService,
  options: PayoutsTestingOptions = {}
): PluginFn {
  return ({ runner }) => {
    const prepare = (test: Test<any>, suite: string) => {
      if (options.suites && !options.suites.includes(suite)) return
      test.setup(async () => {
        const service = await app.container.make('payouts.manager')
        test.context!.payouts = await service.fake(options.fake)
        return async () => {
          await service.restore()
          if (options.clearTables === false || !app.container.hasBinding('lucid.db')) return
          const { clearPayoutsTables } = await import('./tables.ts')
          await clearPayoutsTables(await app.container.make('lucid.db'), service.config)
        }
      })
    }
    runner.onSuite((suite) => {
      suite.onTest((test) => prepare(test, suite.name))
      suite.onGroup((group) => group.tap((test) => prepare(test, suite.name)))
    })
  }
}
