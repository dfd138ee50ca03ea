import { test } from '@japa/runner'
import { HealthChecks } from '@adonisjs/core/health'
import { PayoutsCheck } from '../../src/health/main.ts'
import { startEmulator } from '../emulator/helpers.ts'
import { boundedConnection, connectionConfig, TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'
import { TcpProxy } from '../helpers/tcp_proxy.ts'

const SERVER_ONLY = 'needs PostgreSQL or MySQL (TEST_DB=pg, TEST_DB=mysql) behind a TCP proxy'

/** The report's bound in these tests, and what the check may take beyond it. */
const TIMEOUT_MS = 1000
const MARGIN_MS = 1500

/**
 * Runs the check as a host's health route does, but gives up waiting at `withinMs`: the
 * check's result, or 'no answer', and how long it took.
 */
async function runCheck(check: PayoutsCheck, withinMs: number) {
  const started = Date.now()
  let timer: NodeJS.Timeout | undefined
  const gaveUp = new Promise<'no answer'>((resolve) => {
    timer = setTimeout(() => resolve('no answer'), withinMs)
  })
  const running = new HealthChecks()
    .register([check])
    .run()
    .then((report) => ({ report, check: report.checks[0] }))
  const outcome = await Promise.race([running, gaveUp])
  clearTimeout(timer)
  return { outcome, ms: Date.now() - started }
}

test.group(`Faults | health while the database stops answering (${TEST_DB})`, () => {
  test('the check answers failed, with a database error line, within health.timeoutMs; ok again once healed', async ({
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
        health: { timeoutMs: TIMEOUT_MS },
        ledger: { transactionTimeoutMs: 1500 },
      },
      undefined,
      boundedConnection(base, { port: proxy.port, connectMs: 500 })
    )
    const check = new PayoutsCheck(app.payouts)
    // A first report leaves its connection idle in the pool.
    const first = await runCheck(check, 10_000)
    assert.notEqual(first.outcome, 'no answer')
    if (first.outcome === 'no answer') return
    assert.equal(first.outcome.check.status, 'ok')

    proxy.stall()
    const stalled = await runCheck(check, TIMEOUT_MS + MARGIN_MS)
    assert.notEqual(stalled.outcome, 'no answer', `no answer after ${stalled.ms} ms`)
    if (stalled.outcome === 'no answer') return
    const { report, check: result } = stalled.outcome
    assert.isFalse(report.isHealthy, 'the health route answers 503')
    assert.equal(result.status, 'error')
    const database = result.meta!.checks.database
    assert.equal(database.status, 'error')
    assert.match(database.message, /database connection "\w+" did not answer within 1000 ms/)
    assert.include(result.message, 'did not answer within 1000 ms')
    // The service itself still answers: only the database is named.
    assert.equal(result.meta!.checks.reachability.status, 'ok')
    assert.notProperty(result.meta!.checks, 'inboxBacklog')

    // A second report while stalled is bounded too (no connection left to hang on).
    const again = await runCheck(check, TIMEOUT_MS + MARGIN_MS)
    assert.notEqual(again.outcome, 'no answer', `no answer after ${again.ms} ms`)

    await proxy.heal()
    const healed = await runCheck(check, 10_000)
    assert.notEqual(healed.outcome, 'no answer')
    if (healed.outcome === 'no answer') return
    assert.equal(healed.outcome.check.meta!.checks.database.status, 'ok')
    assert.equal(healed.outcome.check.status, 'ok')
  })
    .skip(TEST_DB === 'sqlite', SERVER_ONLY)
    .timeout(60_000)
})
