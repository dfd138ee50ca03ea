import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { HealthChecks } from '@adonisjs/core/health'
import { request } from 'undici'
import PayoutsStatus from '../../commands/payouts_status.ts'
import type { PayoutsConfigInput } from '../../src/define_config.ts'
import { dbDate } from '../../src/database/dates.ts'
import { PayoutsEmulator } from '../../src/emulator/main.ts'
import { PayoutsCheck } from '../../src/health/main.ts'
import { signPayload } from '../../src/signature/main.ts'
import { jsonOf } from '../commands/helpers.ts'
import { startEmulator } from '../emulator/helpers.ts'
import { createApp } from '../helpers/app.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startAppOnEmulator, startHttpApp, type HttpApp } from '../helpers/http_app.ts'

/** Runs the plugin's check through AdonisJS's own runner, as a host's health route does. */
async function runChecks(check: PayoutsCheck) {
  const report = await new HealthChecks().register([check]).run()
  return { report, check: report.checks[0] }
}

/** An authentic delivery whose body cannot be parsed: it ends as a dead letter. */
async function deliverDeadLetter(app: HttpApp) {
  const body = '{"type":"payout.created",'
  const response = await request(`${app.url}/webhooks/payouts`, {
    method: 'POST',
    body,
    headers: {
      'content-type': 'application/json',
      'svc-signature': signPayload('whsec_current_secret', Math.floor(Date.now() / 1000), body),
      'svc-delivery-id': `dlv_${randomUUID()}`,
    },
  })
  await response.body.dump()
  await app.payouts.drainInbox()
}

/** Inbox rows not processed yet, received `ageMs` ago (a worker that stopped). */
async function insertPending(app: HttpApp, count: number, ageMs: number) {
  const db = await app.app.container.make('lucid.db')
  const client = db.connection()
  const at = dbDate(client, new Date(Date.now() - ageMs))
  for (let i = 0; i < count; i++) {
    await client.table(`${app.prefix}webhook_deliveries`).insert({
      delivery_id: `dlv_${randomUUID()}`,
      event_type: 'payout.created',
      raw_body: Buffer.from('{}').toString('base64'),
      source: 'webhook',
      state: 'pending',
      attempts: 0,
      received_at: at,
    })
  }
}

async function onEmulator(
  cleanup: (fn: () => Promise<void>) => void,
  health: PayoutsConfigInput['health'] = {}
) {
  return startAppOnEmulator(cleanup, { health })
}

/** Runs `payouts:status` in the app's Ace kernel; answers the command. */
async function status(app: HttpApp, args: string[] = []) {
  const ace = await app.app.container.make('ace')
  ace.ui.switchMode('raw')
  const command = await ace.create(PayoutsStatus, args)
  await command.exec()
  return command
}

/** The messages the command logged, one string. */
const logsOf = (command: any) =>
  command.logger
    .getLogs()
    .map((log: any) => log.message)
    .join('\n')

/** The last line the command logged, and its stream. */
const lastLog = (command: any): { message: string; stream: string } =>
  command.logger.getLogs().at(-1)

test.group(`Health check (${TEST_DB})`, () => {
  test('a healthy integration is ok through HealthChecks, with the report as meta', async ({
    assert,
    cleanup,
  }) => {
    const { app } = await onEmulator(cleanup)
    const { report, check } = await runChecks(new PayoutsCheck(app.payouts))
    assert.isTrue(report.isHealthy)
    assert.equal(check.name, 'Payouts')
    assert.equal(check.status, 'ok')
    assert.equal(check.message, 'all checks ok')
    assert.deepEqual(Object.keys(check.meta!.checks), [
      'reachability',
      'database',
      'inboxBacklog',
      'oldestPendingMs',
      'deadLetters',
      'unknownIntents',
      'escrowFailed',
      'stuckPayouts',
      'sinceLastEventMs',
      'heartbeats',
    ])
    assert.equal(check.meta!.checks.reachability.status, 'ok')
    assert.equal(check.meta!.checks.database.status, 'ok')
    // The test app leaves the jobs to the tests: nothing is expected to beat.
    assert.equal(check.meta!.checks.heartbeats.status, 'ok')
    assert.equal(check.meta!.checks.inboxBacklog.value, 0)
    assert.isNull(check.meta!.checks.sinceLastEventMs.value)
  })

  test('without a service the check resolves the app payouts.manager', async ({
    assert,
    cleanup,
  }) => {
    await onEmulator(cleanup)
    const { check } = await runChecks(new PayoutsCheck())
    assert.equal(check.status, 'ok')
  })

  test('a dead letter is a warning, named in the message, that keeps the app healthy; the last event is reported', async ({
    assert,
    cleanup,
  }) => {
    const { app } = await onEmulator(cleanup)
    await deliverDeadLetter(app)
    const { report, check } = await runChecks(new PayoutsCheck(app.payouts))
    // A dead letter needs a human, not a load balancer taking the instance out (503).
    assert.isTrue(report.isHealthy)
    assert.equal(check.status, 'warning')
    assert.include(check.message, '1 dead letters')
    assert.equal(check.meta!.checks.deadLetters.status, 'warning')
    assert.isNotNull(check.meta!.lastEventReceivedAt)
    assert.isNumber(check.meta!.checks.sinceLastEventMs.value)
  })

  test('thresholds flip verdicts: backlog, oldest row, dead letters', async ({
    assert,
    cleanup,
  }) => {
    const { app } = await onEmulator(cleanup, {
      inboxBacklog: { warning: 2, error: 5 },
      oldestPendingMs: { warning: null, error: null },
      deadLetters: { warning: 1, error: null },
    })
    await insertPending(app, 2, 0)
    let { check } = await runChecks(new PayoutsCheck(app.payouts))
    assert.equal(check.status, 'warning')
    assert.equal(check.meta!.checks.inboxBacklog.status, 'warning')
    assert.include(check.message, '2 inbox rows not processed (warning at 2)')

    await insertPending(app, 3, 0)
    ;({ check } = await runChecks(new PayoutsCheck(app.payouts)))
    assert.equal(check.meta!.checks.inboxBacklog.status, 'error')
    assert.equal(check.status, 'error')

    // The same rows under other thresholds: age counts, the backlog does not.
    const other = await startHttpApp(cleanup, {
      apiKey: app.payouts.config.apiKey,
      baseUrl: app.payouts.config.baseUrl,
      health: {
        inboxBacklog: { warning: null, error: null },
        oldestPendingMs: { warning: 60_000, error: 3600_000 },
        deadLetters: { warning: 1, error: null },
      },
    })
    await deliverDeadLetter(other)
    await insertPending(other, 1, 10 * 60_000)
    ;({ check } = await runChecks(new PayoutsCheck(other.payouts)))
    assert.equal(check.meta!.checks.inboxBacklog.status, 'ok')
    assert.equal(check.meta!.checks.oldestPendingMs.status, 'warning')
    assert.equal(check.meta!.checks.deadLetters.status, 'warning')
    assert.equal(check.status, 'warning')
  })

  test('the service down is an error naming its URL; the answer is cached', async ({
    assert,
    cleanup,
  }) => {
    const emu = await PayoutsEmulator.start({ port: 0, rateLimits: false })
    let closed = false
    cleanup(async () => {
      if (!closed) await emu.close()
    })
    const app = await startHttpApp(cleanup, {
      apiKey: emu.apiKey,
      baseUrl: emu.baseUrl,
      clientRateLimiter: false,
      health: { reachability: { cacheForMs: 3600_000 } },
    })
    const first = await runChecks(new PayoutsCheck(app.payouts))
    assert.equal(first.check.status, 'ok')
    await emu.close()
    closed = true
    const cached = await runChecks(new PayoutsCheck(app.payouts))
    assert.equal(cached.check.status, 'ok', 'answered from the cache')
    assert.isTrue(cached.check.meta!.checks.reachability.cached)

    const down = await startHttpApp(cleanup, {
      apiKey: app.payouts.config.apiKey,
      baseUrl: emu.baseUrl,
    })
    const { report, check } = await runChecks(new PayoutsCheck(down.payouts))
    assert.isFalse(report.isHealthy)
    assert.equal(check.status, 'error')
    assert.equal(check.meta!.checks.reachability.status, 'error')
    assert.include(check.message, `${emu.baseUrl} unreachable`)
  })

  test('an app without the ledger reports reachability alone', async ({ assert, cleanup }) => {
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const app = await createApp({ apiKey: emu.apiKey, baseUrl: emu.baseUrl }, cleanup)
    const payouts = await app.container.make('payouts.manager')
    const { check } = await runChecks(new PayoutsCheck(payouts))
    assert.equal(check.status, 'ok')
    assert.deepEqual(Object.keys(check.meta!.checks), ['reachability'])
  })

  test('a service slower than the timeout is an error, after one attempt', async ({
    assert,
    cleanup,
  }) => {
    const { emu, app } = await onEmulator(cleanup, { reachability: { timeoutMs: 200 } })
    emu.admin.setFaults({ latencyMs: 5000 })
    const { check } = await runChecks(new PayoutsCheck(app.payouts))
    assert.equal(check.status, 'error')
    assert.include(check.message, 'no answer within 200 ms')
    emu.admin.setFaults({})
  })
})

test.group(`payouts:status (${TEST_DB})`, () => {
  test('prints each line with its verdict and exits 0 when all are ok', async ({
    assert,
    cleanup,
  }) => {
    const { app } = await onEmulator(cleanup)
    const command = await status(app)
    command.assertSucceeded()
    const logs = logsOf(command)
    assert.match(logs, /reachability.*ok.*answered in/)
    assert.match(logs, /deadLetters.*ok.*0 dead letters/)
    assert.match(logs, /sinceLastEventMs.*ok.*no event received yet/)
  })

  test('exits 1 with the reason whenever a line is not ok: a warning labelled warn, an error labelled error, on stderr', async ({
    assert,
    cleanup,
  }) => {
    const { app } = await onEmulator(cleanup)
    await deliverDeadLetter(app)
    const warned = await status(app)
    warned.assertFailed()
    assert.equal(warned.exitCode, 1)
    assert.match(logsOf(warned), /deadLetters.*warning.*1 dead letters/)
    assert.deepInclude(lastLog(warned), {
      stream: 'stderr',
      message:
        '[ yellow(warn) ] payouts:status warning: 1 dead letters (payouts:replay requeues them) (warning at 1)',
    })
    assert.notMatch(logsOf(warned), /error/)

    const backlogged = await startAppOnEmulator(cleanup, {
      health: { inboxBacklog: { warning: null, error: 1 } },
    })
    await insertPending(backlogged.app, 1, 0)
    const failed = await status(backlogged.app)
    failed.assertFailed()
    assert.match(logsOf(failed), /inboxBacklog.*error.*1 inbox rows not processed/)
    assert.equal(failed.exitCode, 1)
    assert.deepInclude(lastLog(failed), { stream: 'stderr' })
    assert.match(
      lastLog(failed).message,
      /^\[ red\(error\) \] payouts:status error: 1 inbox rows not processed/
    )
  })

  test('contacts the service: down exits 1 naming the base URL; --json has camelCase keys', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup, { baseUrl: 'http://127.0.0.1:9' })
    const command = await status(app)
    command.assertFailed()
    assert.match(logsOf(command), /payouts:status error: http:\/\/127\.0\.0\.1:9 unreachable/)

    const json = await status(app, ['--json'])
    json.assertFailed()
    const report = jsonOf(json)
    assert.equal(report.status, 'error')
    assert.include(report.message, 'http://127.0.0.1:9 unreachable')
    assert.equal(report.checks.reachability.status, 'error')
    assert.includeMembers(Object.keys(report), [
      'status',
      'message',
      'environment',
      'eventSources',
      'lastEventReceivedAt',
      'checks',
    ])
  })
})
