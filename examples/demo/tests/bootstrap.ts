import { mkdir } from 'node:fs/promises'
import { assert } from '@japa/assert'
import { apiClient } from '@japa/api-client'
import app from '@adonisjs/core/services/app'
import type { Config } from '@japa/runner/types'
import { pluginAdonisJS } from '@japa/plugin-adonisjs'
import testUtils from '@adonisjs/core/services/test_utils'
import { payoutsTesting } from '@svc/adonis-payouts/testing'

/**
 * Imported by bin/test.ts. Japa plugins, what runs before and after all the tests, and
 * what each suite needs. `payoutsTesting(app)` gives every test its own `payouts` fake
 * (an in-process Payout Service bound to this app) and empties the plugin's tables after it.
 */
export const plugins: Config['plugins'] = [
  assert(),
  apiClient(),
  pluginAdonisJS(app),
  payoutsTesting(app),
]

/**
 * Before all the tests: the app's migrations (the plugin's tables, in the SQLite file of
 * DB_FILE under tmp/), rolled back after.
 */
export const runnerHooks: Required<Pick<Config, 'setup' | 'teardown'>> = {
  setup: [
    async () => {
      await mkdir(app.tmpPath(), { recursive: true })
      return testUtils.db().migrate()
    },
  ],
  teardown: [],
}

/** The functional suite talks to the app over HTTP: its server listens on HOST:PORT. */
export const configureSuite: Config['configureSuite'] = (suite) => {
  if (['browser', 'functional', 'e2e'].includes(suite.name)) {
    return suite.setup(() => testUtils.httpServer().start())
  }
}
