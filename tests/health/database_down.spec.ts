import { test } from '@japa/runner'
import { HealthChecks } from '@adonisjs/core/health'
import PayoutsStatus from '../../commands/payouts_status.ts'
import { PayoutsCheck } from '../../src/health/main.ts'
import { databaseFailure, unreadableReason } from '../../src/health/report.ts'
import { jsonOf } from '../commands/helpers.ts'
import { startEmulator } from '../emulator/helpers.ts'
import { boundedConnection, connectionConfig, TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'
import { TcpProxy } from '../helpers/tcp_proxy.ts'

const SERVER_ONLY = 'needs PostgreSQL or MySQL (TEST_DB=pg, TEST_DB=mysql) behind a TCP proxy'

/** The check's result, as a host's health route gets it. */
async function checkOf(check: PayoutsCheck) {
  const report = await new HealthChecks().register([check]).run()
  return { report, check: report.checks[0] }
}

/** What a report may never show of a database: its statement, tables or address (its port). */
function assertNothingOfTheDatabase(assert: any, text: string, prefix: string, port: number) {
  assert.notMatch(text, /\b(select|insert|where)\b/i, 'no SQL statement')
  assert.notInclude(text, prefix, 'no table name')
  assert.notInclude(text, String(port), "no database server's address")
}

test.group(`Health | the database down (${TEST_DB})`, () => {
  test('the check and payouts:status say the database did not answer, by its code alone', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const base = connectionConfig('http') as any
    const proxy = new TcpProxy({ host: base.connection.host, port: base.connection.port })
    await proxy.start()
    cleanup(() => proxy.close())
    const app = await startHttpApp(
      cleanup,
      {
        apiKey: emu.apiKey,
        baseUrl: emu.baseUrl,
        clientRateLimiter: false,
        health: { timeoutMs: 1000 },
      },
      undefined,
      boundedConnection(base, { port: proxy.port, connectMs: 500 })
    )
    // The database back before the app stops (cleanups run last registered first).
    cleanup(() => proxy.heal())

    // Down before the service's first use: the whole report cannot be read.
    await proxy.refuse()
    const unread = await checkOf(new PayoutsCheck(app.payouts))
    assert.isFalse(unread.report.isHealthy)
    assert.equal(unread.check.status, 'error')
    assert.match(
      unread.check.message,
      /^Could not read the payouts health: the database did not answer \((ECONNRESET|ECONNREFUSED|EPIPE|PROTOCOL_CONNECTION_LOST)\)$/
    )
    assertNothingOfTheDatabase(assert, unread.check.message, app.prefix, proxy.port)

    const ace = await app.app.container.make('ace')
    ace.ui.switchMode('raw')
    const command = await ace.create(PayoutsStatus, ['--json'])
    await command.exec()
    command.assertFailed()
    const { error } = jsonOf(command)
    assert.match(error.message, /^the database did not answer \((E\w+|PROTOCOL_\w+)\)$/)
    assert.equal(error.failure, 'Could not read the status')
    assertNothingOfTheDatabase(assert, JSON.stringify(error), app.prefix, proxy.port)

    // Down after it: the report is read, its database line says the same.
    await proxy.heal()
    assert.equal((await checkOf(new PayoutsCheck(app.payouts))).check.status, 'ok')
    await proxy.refuse()
    const { check } = await checkOf(new PayoutsCheck(app.payouts))
    assert.equal(check.status, 'error')
    const database = check.meta!.checks.database
    assert.match(
      database.message,
      /^database connection "\w+" did not answer \((E\w+|PROTOCOL_\w+)\)$/
    )
    assert.include(check.message, database.message)
    assertNothingOfTheDatabase(assert, JSON.stringify(check), app.prefix, proxy.port)
  })
    .skip(TEST_DB === 'sqlite', SERVER_ONLY)
    .timeout(60_000)

  test("a database error is told by its driver's code; any other error by its message", ({
    assert,
  }) => {
    const statement = 'select "name" from "svc_accounts" where "key_fingerprint" = \'f00\''
    const refused = Object.assign(new Error('connect ECONNREFUSED 10.0.0.5:5432'), {
      code: 'ECONNREFUSED',
      syscall: 'connect',
      address: '10.0.0.5',
      port: 5432,
    })
    const reset = Object.assign(new Error(`${statement} - write ECONNRESET`), {
      code: 'ECONNRESET',
      syscall: 'write',
    })
    const password = Object.assign(
      new Error(`${statement} - password authentication failed for user "payouts"`),
      { code: '28P01', severity: 'FATAL', routine: 'auth_failed' }
    )
    const mysql = Object.assign(new Error("Access denied for user 'payouts'@'10.0.0.9'"), {
      code: 'ER_ACCESS_DENIED_ERROR',
      sqlState: '28000',
    })
    const pool = Object.assign(new Error('Knex: Timeout acquiring a connection.'), {
      name: 'KnexTimeoutError',
      sql: statement,
    })
    const cases: Array<[unknown, string]> = [
      [refused, 'the database did not answer (ECONNREFUSED)'],
      [reset, 'the database did not answer (ECONNRESET)'],
      [password, 'the database answered with an error (28P01)'],
      [mysql, 'the database answered with an error (ER_ACCESS_DENIED_ERROR)'],
      [pool, 'the database did not answer (no pooled connection in time)'],
      [new Error(`${statement} - Connection terminated unexpectedly`), 'the database failed'],
      [
        new Error('could not reach https://user:secret@svc.test'),
        'could not reach https://[redacted]@svc.test',
      ],
    ]
    for (const [error, reason] of cases) assert.equal(unreadableReason(error), reason)
    assert.isNull(databaseFailure(new Error('E_PAYOUTS_FEATURE_DISABLED')))
  })
})
