import { setTimeout as sleep } from 'node:timers/promises'
import { test } from '@japa/runner'
import { HealthChecks } from '@adonisjs/core/health'
import PayoutsConfirmEscrow from '../../commands/payouts_confirm_escrow.ts'
import PayoutsPrune from '../../commands/payouts_prune.ts'
import PayoutsReconcile from '../../commands/payouts_reconcile.ts'
import PayoutsRecover from '../../commands/payouts_recover.ts'
import { dbDate } from '../../src/database/dates.ts'
import { PayoutsCheck } from '../../src/health/main.ts'
import { PayoutsWorker } from '../../src/service/worker.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startAppOnEmulator, type HttpApp } from '../helpers/http_app.ts'

const ALL = ['worker', 'job:reconcile', 'job:escrow', 'job:recover', 'job:prune']

/** Runs the plugin's check through AdonisJS's own runner, as a host's health route does. */
async function runCheck(app: HttpApp) {
  const report = await new HealthChecks().register([new PayoutsCheck(app.payouts)]).run()
  return { report, check: report.checks[0] }
}

/** Heartbeat rows as a worker of the app's account that died `agoMs` ago left them. */
async function beatsFrom(app: HttpApp, names: string[], agoMs: number) {
  const db = await app.app.container.make('lucid.db')
  const client = db.connection()
  for (const name of names) {
    await client.table(`${app.prefix}heartbeats`).insert({
      account: app.payouts.config.account,
      name,
      owner: 'gone-host:1',
      beat_at: dbDate(client, new Date(Date.now() - agoMs)),
    })
  }
}

/** Runs a command in the app's Ace kernel, as cron would. */
async function run(app: HttpApp, Command: any, args: string[] = []) {
  const ace = await app.app.container.make('ace')
  ace.ui.switchMode('raw')
  const command = await ace.create(Command, args)
  await command.exec()
  return command
}

/** Polls the check until `done` holds (or `ms` passed); answers the last check. */
async function checkUntil(app: HttpApp, done: (check: any) => boolean, ms = 5000) {
  const until = Date.now() + ms
  let last = await runCheck(app)
  while (!done(last.check) && Date.now() < until) {
    await sleep(50)
    last = await runCheck(app)
  }
  return last
}

test.group(`Health | heartbeats of the worker and the jobs (${TEST_DB})`, () => {
  test('worker mode, no worker for 4 h: a warning naming the worker and each job; ok again once they run', async ({
    assert,
    cleanup,
  }) => {
    const { app } = await startAppOnEmulator(cleanup, {
      webhook: { processing: 'worker' },
      // The defaults: every minute, prune every hour. Nothing runs them in this process.
      jobs: { enabled: true },
    })
    await beatsFrom(app, ALL, 4 * 3600_000)

    let { report, check } = await runCheck(app)
    assert.isTrue(report.isHealthy, 'a warning: needs a human, not a 503')
    assert.equal(check.status, 'warning')
    const line = check.meta!.checks.heartbeats
    assert.equal(line.status, 'warning')
    assert.equal(line.value, 5)
    assert.deepEqual(line.overdue, ALL)
    assert.include(check.message, 'worker last ran 4 h ago (expected every 15 s)')
    assert.include(check.message, 'job:escrow last ran 4 h ago (expected every 1 min)')
    assert.include(check.message, 'job:prune last ran 4 h ago (expected every 1 h)')
    assert.include(check.message, 'is node ace payouts:work running?')

    // Cron runs the jobs through their commands: each run beats.
    for (const Command of [PayoutsReconcile, PayoutsConfirmEscrow, PayoutsRecover, PayoutsPrune]) {
      ;(await run(app, Command)).assertSucceeded()
    }
    ;({ check } = await runCheck(app))
    assert.deepEqual(check.meta!.checks.heartbeats.overdue, ['worker'])
    assert.notInclude(check.message, 'job:')

    // The worker's loop beats as it turns.
    const logger = await app.app.container.make('logger')
    const worker = new PayoutsWorker({ service: app.payouts, logger, pollIntervalMs: 20 })
    await worker.start()
    try {
      ;({ check } = await checkUntil(app, (c) => c.status === 'ok'))
    } finally {
      assert.isTrue(await worker.stop())
    }
    assert.equal(check.status, 'ok')
    assert.equal(check.meta!.checks.heartbeats.value, 0)
    assert.include(check.meta!.checks.heartbeats.message, 'ran within 3 of their intervals')
    for (const name of ALL) assert.isString(check.meta!.checks.heartbeats.lastBeats[name])
  }).timeout(60_000)

  test('a job never seen is overdue 3 intervals after the process began to expect it', async ({
    assert,
    cleanup,
  }) => {
    const { app } = await startAppOnEmulator(cleanup, {
      webhook: { processing: 'worker' },
      jobs: { enabled: true, escrowEveryMs: 100, reconcileEveryMs: 0, recoverEveryMs: 0 },
    })
    const { check } = await checkUntil(app, (c) => c.status !== 'ok')
    assert.equal(check.status, 'warning')
    assert.deepEqual(check.meta!.checks.heartbeats.overdue, ['job:escrow'])
    assert.include(check.message, 'job:escrow has not run (expected every 100 ms)')
    assert.isNull(check.meta!.checks.heartbeats.lastBeats['job:escrow'])
  }).timeout(30_000)

  test('inline mode: the scheduler runs of the jobs beat', async ({ assert, cleanup }) => {
    const { app } = await startAppOnEmulator(cleanup, {
      jobs: {
        enabled: true,
        escrowEveryMs: 100,
        reconcileEveryMs: 0,
        recoverEveryMs: 0,
        pruneEveryMs: 0,
      },
    })
    // The provider started the scheduler in this (web) process.
    await beatsFrom(app, ['job:escrow'], 3600_000)
    const { check } = await checkUntil(app, (c) => c.status === 'ok')
    assert.equal(check.status, 'ok')
    const last = Date.parse(check.meta!.checks.heartbeats.lastBeats['job:escrow'])
    assert.isBelow(Date.now() - last, 5000)
  }).timeout(30_000)

  test('jobs left to cron expect nothing, and still show when each command last ran', async ({
    assert,
    cleanup,
  }) => {
    const { app } = await startAppOnEmulator(cleanup, { jobs: { enabled: false } })
    await beatsFrom(app, ['job:escrow'], 30 * 24 * 3600_000)
    ;(await run(app, PayoutsReconcile)).assertSucceeded()
    // A dry run prunes nothing: it does not count as a run.
    ;(await run(app, PayoutsPrune, ['--dry-run'])).assertSucceeded()
    const { check } = await runCheck(app)
    const line = check.meta!.checks.heartbeats
    assert.equal(line.status, 'ok')
    assert.isNull(line.value)
    assert.include(line.message, 'no worker or job expected')
    assert.isString(line.lastBeats['job:reconcile'])
    assert.isString(line.lastBeats['job:escrow'])
    assert.isNull(line.lastBeats['job:prune'])
  })

  test('a heartbeat that cannot be written never fails the job', async ({ assert, cleanup }) => {
    const { app } = await startAppOnEmulator(cleanup)
    const db = await app.app.container.make('lucid.db')
    await db.connection().schema.dropTable(`${app.prefix}heartbeats`)
    const summary = await app.payouts.escrow.confirmDue()
    assert.equal(summary.failed, 0)
    await app.payouts.reconcile()
  })
})
