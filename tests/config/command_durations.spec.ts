import { test } from '@japa/runner'
import PayoutsReconcile from '../../commands/payouts_reconcile.ts'
import PayoutsRecover from '../../commands/payouts_recover.ts'
import PayoutsWork from '../../commands/payouts_work.ts'
import { TEST_DB } from '../helpers/database.ts'
import { setup } from '../commands/helpers.ts'

/** The lines a command logged, without the raw-mode logger's `[ red(error) ] ` tag. */
function logsOf(command: any): string[] {
  return command.logger
    .getLogs()
    .map((log: { message: string }) => log.message.replace(/^\[ \w+\(\w+\) \] /, ''))
}

const DURATION_FORM = '(milliseconds, or a duration such as "10s", "2h" or "500ms")'

test.group(`Commands | duration flags (${TEST_DB})`, () => {
  test('--older-than-ms and --stale-after-ms take "2h" as AdonisJS reads it, and a number as milliseconds', async ({
    assert,
    cleanup,
  }) => {
    const { app, run } = await setup(cleanup)
    const calls: Array<[string, unknown]> = []
    app.payouts.recover = (async (options: unknown) => {
      calls.push(['recover', options])
      return { resent: 0, succeeded: 0, failed: 0, unknown: 0, flagged: 0 }
    }) as never
    app.payouts.reconcile = (async (options: unknown) => {
      calls.push(['reconcile', options])
      return { checked: 0, changed: 0, missing: 0, failed: 0, stuck: 0 }
    }) as never

    for (const args of [['--older-than-ms=2h'], ['--older-than-ms=1500'], []]) {
      ;(await run(PayoutsRecover, [...args, '--json'])).assertSucceeded()
    }
    for (const args of [['--stale-after-ms=10m'], ['--stale-after-ms=0'], []]) {
      ;(await run(PayoutsReconcile, [...args, '--json'])).assertSucceeded()
    }
    assert.deepEqual(calls, [
      ['recover', { olderThanMs: 7_200_000 }],
      ['recover', { olderThanMs: 1500 }],
      // The default: a minute.
      ['recover', { olderThanMs: 60_000 }],
      ['reconcile', { staleAfterMs: 600_000 }],
      ['reconcile', { staleAfterMs: 0 }],
      ['reconcile', { staleAfterMs: undefined }],
    ])
  })

  test('a duration flag it cannot read is refused with exit code 1, and nothing is done', async ({
    assert,
    cleanup,
  }) => {
    const { app, run } = await setup(cleanup)
    let acted = 0
    app.payouts.recover = (async () => void acted++) as never
    app.payouts.reconcile = (async () => void acted++) as never
    for (const [Command, flag] of [
      [PayoutsRecover, 'older-than-ms'],
      [PayoutsReconcile, 'stale-after-ms'],
    ] as const) {
      for (const bad of ['soon', '2 fortnights', '-1h', '1.5']) {
        const refused = await run(Command, [`--${flag}=${bad}`])
        refused.assertFailed()
        const logs = logsOf(refused)
        assert.lengthOf(logs, 1, JSON.stringify(logs))
        assert.equal(
          logs[0],
          `--${flag} must be a whole number from 0 to ${Number.MAX_SAFE_INTEGER}, not "${bad}" ${DURATION_FORM}. Nothing done`
        )
        refused.logger.flushLogs()
      }
    }
    assert.equal(acted, 0, 'no refused command reached the service')
  })

  test('a duration flag given with no value (an unset variable in a script) is refused, never its default', async ({
    assert,
    cleanup,
  }) => {
    const { app, run } = await setup(cleanup)
    let acted = 0
    app.payouts.recover = (async () => void acted++) as never
    app.payouts.reconcile = (async () => void acted++) as never
    for (const [Command, flag] of [
      [PayoutsRecover, 'older-than-ms'],
      [PayoutsReconcile, 'stale-after-ms'],
    ] as const) {
      const outcome = await run(Command, [`--${flag}`, '--json']).then(
        (command) => ({ exitCode: command.exitCode as number | undefined, error: undefined }),
        (error: { code?: string }) => ({ exitCode: undefined, error })
      )
      assert.isTrue(
        outcome.error?.code === 'E_MISSING_FLAG_VALUE' || outcome.exitCode === 1,
        `--${flag} with no value is refused: ${JSON.stringify(outcome)}`
      )
    }
    assert.equal(acted, 0, 'no command reached the service')
  })

  test('payouts:work takes --poll-interval-ms and --stop-timeout-ms as durations, within setTimeout bounds', async ({
    assert,
    cleanup,
  }) => {
    const { run } = await setup(cleanup)
    const started = await run(PayoutsWork, ['--poll-interval-ms=1s', '--stop-timeout-ms=30s'])
    cleanup(() => started.stop())
    assert.notEqual(started.exitCode, 1, JSON.stringify(logsOf(started)))
    assert.deepEqual(
      logsOf(started).filter((line) => /must be/.test(line)),
      [],
      'nothing refused'
    )
    await started.stop()
    started.logger.flushLogs()

    for (const [flag, value, min] of [
      ['poll-interval-ms', 'soon', 50],
      ['poll-interval-ms', '10ms', 50],
      ['stop-timeout-ms', '30d', 1],
    ] as const) {
      const refused = await run(PayoutsWork, [`--${flag}=${value}`])
      cleanup(() => refused.stop())
      refused.assertFailed()
      assert.match(
        logsOf(refused)[0],
        new RegExp(`^--${flag} must be a whole number from ${min} to 2147483647, not "${value}"`)
      )
      refused.logger.flushLogs()
    }
  })
})
