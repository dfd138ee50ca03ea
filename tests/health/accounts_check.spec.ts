import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { HealthChecks } from '@adonisjs/core/health'
import PayoutsStatus from '../../commands/payouts_status.ts'
import PayoutsWork from '../../commands/payouts_work.ts'
import { dbDate } from '../../src/database/dates.ts'
import { PayoutsCheck } from '../../src/health/main.ts'
import { startEmulator } from '../emulator/helpers.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startHttpApp, type HttpApp } from '../helpers/http_app.ts'

/** One app, two accounts, each on its own emulator. */
async function twoAccounts(cleanup: (fn: () => Promise<void>) => void) {
  const main = await startEmulator(cleanup, { rateLimits: false })
  const eu = await startEmulator(cleanup, { rateLimits: false })
  const app = await startHttpApp(cleanup, {
    clientRateLimiter: false,
    default: 'main',
    accounts: {
      main: { apiKey: main.apiKey, baseUrl: main.baseUrl },
      eu: { apiKey: eu.apiKey, baseUrl: eu.baseUrl, webhook: { secret: 'whsec_eu_secret' } },
    },
  } as any)
  return app
}

/** An inbox row of `account` waiting since `ageMs` ago (its worker stopped). */
async function insertPending(app: HttpApp, account: string, ageMs: number) {
  const db = await app.app.container.make('lucid.db')
  const client = db.connection()
  await client.table(`${app.prefix}webhook_deliveries`).insert({
    account,
    delivery_id: `dlv_${randomUUID()}`,
    event_type: 'payout.created',
    raw_body: Buffer.from('{}').toString('base64'),
    source: 'webhook',
    state: 'pending',
    attempts: 0,
    received_at: dbDate(client, new Date(Date.now() - ageMs)),
  })
}

test.group(`Health check, several accounts (${TEST_DB})`, () => {
  test('the check reports every account: each report in the meta, the worst verdict, the failing account named', async ({
    assert,
    cleanup,
  }) => {
    const app = await twoAccounts(cleanup)
    const checks = new HealthChecks().register([new PayoutsCheck(app.payouts)])

    const healthy = (await checks.run()).checks[0]
    assert.equal(healthy.status, 'ok')
    assert.deepEqual(Object.keys(healthy.meta!.accounts), ['main', 'eu'])
    assert.equal(healthy.meta!.accounts.eu.account, 'eu')

    // eu's inbox stalled for 31 minutes (past oldestPendingMs's error); main's is empty.
    await insertPending(app, 'eu', 31 * 60_000)
    const stalled = (await checks.run()).checks[0]
    assert.equal(stalled.status, 'error')
    assert.match(stalled.message, /^eu: /)
    assert.notMatch(stalled.message, /main: /)
    assert.equal(stalled.meta!.accounts.main.status, 'ok')
    assert.equal(stalled.meta!.accounts.eu.checks.inboxBacklog.value, 1)
    assert.equal(stalled.meta!.accounts.main.checks.inboxBacklog.value, 0)
  }).timeout(30_000)

  test("given one account's service, the check reports that account alone", async ({
    assert,
    cleanup,
  }) => {
    const app = await twoAccounts(cleanup)
    await insertPending(app, 'eu', 31 * 60_000)
    const checks = new HealthChecks().register([new PayoutsCheck(app.payouts.use('eu'))])
    const eu = (await checks.run()).checks[0]
    assert.equal(eu.status, 'error')
    assert.equal(eu.meta!.account, 'eu')
    assert.isUndefined(eu.meta!.accounts)
  }).timeout(30_000)
})

test.group(`Several accounts, one without a key (${TEST_DB})`, () => {
  /** main on its emulator; eu configured without a key (none issued yet). */
  async function oneKeyless(cleanup: (fn: () => Promise<void>) => void) {
    const main = await startEmulator(cleanup, { rateLimits: false })
    return startHttpApp(cleanup, {
      clientRateLimiter: false,
      webhook: { processing: 'worker' },
      default: 'main',
      accounts: {
        main: { apiKey: main.apiKey, baseUrl: main.baseUrl },
        eu: { apiKey: undefined, baseUrl: main.baseUrl, webhook: { secret: 'whsec_eu_secret' } },
      },
    } as any)
  }

  test("the check and payouts:status report main's health and eu's error, naming eu", async ({
    assert,
    cleanup,
  }) => {
    const app = await oneKeyless(cleanup)
    const check = (await new HealthChecks().register([new PayoutsCheck(app.payouts)]).run())
      .checks[0]
    assert.equal(check.status, 'error')
    assert.equal(check.meta!.accounts.main.status, 'ok')
    assert.equal(check.meta!.accounts.eu.status, 'error')
    assert.match(check.message, /^eu: could not read the health of account eu: .*account "eu"/)

    const ace = await app.app.container.make('ace')
    ace.ui.switchMode('raw')
    const command = await ace.create(PayoutsStatus, ['--json'])
    await command.exec()
    assert.equal(command.exitCode, 1)
    const printed = JSON.parse(command.logger.getLogs()[0].message)
    assert.equal(printed.accounts.main.status, 'ok')
    assert.equal(printed.accounts.eu.status, 'error')
    assert.match(printed.accounts.eu.message, /accounts\.eu\.apiKey/)
  }).timeout(30_000)

  test('payouts:work serves main and says that eu could not start, naming it', async ({
    assert,
    cleanup,
  }) => {
    const app = await oneKeyless(cleanup)
    const ace = await app.app.container.make('ace')
    ace.ui.switchMode('raw')
    const command = await ace.create(PayoutsWork, ['--poll-interval-ms=50'])
    await command.exec()
    cleanup(() => command.stop())
    const logs = command.logger
      .getLogs()
      .map((log: { message: string }) => log.message)
      .join('\n')
    assert.match(logs, /Worker for account "eu" failed to start: .*account "eu"/)
    assert.notMatch(logs, /account "main"/)
    // main's worker runs: it beats as main's worker.
    const payouts = app.payouts
    let beat: string | null | undefined
    for (let i = 0; i < 50 && !beat; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50))
      beat = (await payouts.health()).checks.heartbeats?.lastBeats.worker
    }
    assert.isString(beat)
    await command.stop()
    assert.notEqual(command.exitCode, 1)
  }).timeout(30_000)
})
