import { inspect } from 'node:util'
import { test } from '@japa/runner'
import { HealthChecks } from '@adonisjs/core/health'
import PayoutsStatus from '../../commands/payouts_status.ts'
import PayoutsWebhooksList from '../../commands/payouts_webhooks_list.ts'
import { redactCredentials } from '../../src/client/redact.ts'
import { validateConfig } from '../../src/define_config.ts'
import { PayoutsCheck } from '../../src/health/main.ts'
import { startEmulator } from '../emulator/helpers.ts'
import { TEST_API_KEY } from '../helpers/app.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startHttpApp, type HttpApp } from '../helpers/http_app.ts'

const PASSWORD = 's3cr3t-pw'

/** `http://host:port` with a user and the password in it. */
const withCredentials = (url: string) => url.replace('://', `://payouts-user:${PASSWORD}@`)

/** Runs a command in the app's Ace kernel; answers it and everything it printed. */
async function run(app: HttpApp, Command: any, args: string[] = []) {
  const ace = await app.app.container.make('ace')
  ace.ui.switchMode('raw')
  const command = await ace.create(Command, args)
  await command.exec()
  const printed = command.logger
    .getLogs()
    .map((log: any) => log.message)
    .join('\n')
  return { command, printed }
}

test.group('Redacting credentials in URLs', () => {
  test('one function hides the user info of every URL in a text, and nothing else', ({
    assert,
  }) => {
    assert.equal(redactCredentials('https://user:pw@host/x?y=1'), 'https://[redacted]@host/x?y=1')
    assert.equal(redactCredentials('wss://token@host/ws'), 'wss://[redacted]@host/ws')
    assert.equal(redactCredentials('https://u:p@ss@host:1/a'), 'https://[redacted]@host:1/a')
    assert.equal(
      redactCredentials('https://a:b@one/ unreachable; redis://:pw@two:6379 and me@mail.com'),
      'https://[redacted]@one/ unreachable; redis://[redacted]@two:6379 and me@mail.com'
    )
    assert.equal(redactCredentials('https://host/a@b'), 'https://host/a@b')
    assert.equal(redactCredentials('http://127.0.0.1:9'), 'http://127.0.0.1:9')
    assert.isUndefined(redactCredentials(undefined))
  })

  test('the config shows no credentials of baseUrl, websocketUrl nor jobs.redis', ({ assert }) => {
    const config = validateConfig({
      baseUrl: `https://payouts-user:${PASSWORD}@payouts.example`,
      events: { websocketUrl: `wss://payouts-user:${PASSWORD}@payouts.example/ws` },
      jobs: { redis: `redis://:${PASSWORD}@redis.example:6379` },
    })
    for (const shown of [inspect(config, { depth: 5 }), JSON.stringify(config)]) {
      assert.notInclude(shown, PASSWORD)
      assert.include(shown, 'https://[redacted]@payouts.example')
      assert.include(shown, 'wss://[redacted]@payouts.example/ws')
      assert.include(shown, 'redis://[redacted]@redis.example:6379')
    }
    // The values themselves are untouched.
    assert.include(config.baseUrl, PASSWORD)
  })

  test('a credential in a query string (?password= that ioredis reads, ?token=) is hidden too, in every part of the config', ({
    assert,
  }) => {
    assert.equal(
      redactCredentials('redis://h:6379/0?db=1&password=pw&family=4'),
      'redis://h:6379/0?db=1&password=[redacted]&family=4'
    )
    assert.equal(
      redactCredentials('wss://h/ws?access_token=t0k#x'),
      'wss://h/ws?access_token=[redacted]#x'
    )
    assert.equal(redactCredentials('https://h/a?page=2&sort=asc'), 'https://h/a?page=2&sort=asc')
    const config = validateConfig({
      baseUrl: 'https://payouts.example',
      events: { websocketUrl: `wss://u:${PASSWORD}@payouts.example/ws?token=${PASSWORD}` },
      jobs: { redisUrl: `redis://redis.example:6379/0?password=${PASSWORD}` },
    })
    for (const part of [config, config.events, config.jobs]) {
      for (const shown of [inspect(part, { depth: 5 }), JSON.stringify(part)]) {
        assert.notInclude(shown, PASSWORD)
      }
    }
    assert.include(config.jobs.redisUrl, PASSWORD)
  })
})

test.group(`Health | a base URL with credentials (${TEST_DB})`, () => {
  test('not in payouts.health(), the check message and meta, payouts:status, the service and client views', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const app = await startHttpApp(cleanup, {
      apiKey: emu.apiKey,
      baseUrl: withCredentials(emu.baseUrl),
      clientRateLimiter: false,
    })
    const redacted = emu.baseUrl.replace('://', '://[redacted]@')

    const report = await app.payouts.health()
    assert.notInclude(JSON.stringify(report), PASSWORD)
    assert.equal(report.checks.reachability.baseUrl, redacted)
    assert.include(report.checks.reachability.message, redacted)

    const checks = await new HealthChecks().register([new PayoutsCheck(app.payouts)]).run()
    assert.notInclude(JSON.stringify(checks), PASSWORD)
    assert.equal(checks.checks[0].meta!.checks.reachability.baseUrl, redacted)

    const human = await run(app, PayoutsStatus)
    assert.notInclude(human.printed, PASSWORD)
    assert.include(human.printed, redacted)
    const json = await run(app, PayoutsStatus, ['--json'])
    assert.notInclude(json.printed, PASSWORD)
    assert.include(json.printed, redacted)

    for (const shown of [
      inspect(app.payouts),
      JSON.stringify(app.payouts),
      inspect(app.payouts.client),
      JSON.stringify(app.payouts.client),
    ]) {
      assert.notInclude(shown, PASSWORD)
      assert.include(shown, redacted)
    }
  })

  test('a service down: not in the error line, nor a command error naming the base URL', async ({
    assert,
    cleanup,
  }) => {
    const baseUrl = withCredentials('http://127.0.0.1:9')
    const app = await startHttpApp(cleanup, {
      apiKey: TEST_API_KEY,
      baseUrl,
      retry: { maxRetries: 0 },
    })
    const checks = await new HealthChecks().register([new PayoutsCheck(app.payouts)]).run()
    assert.equal(checks.checks[0].status, 'error')
    assert.include(checks.checks[0].message, 'http://[redacted]@127.0.0.1:9 unreachable')
    assert.notInclude(JSON.stringify(checks), PASSWORD)

    const status = await run(app, PayoutsStatus)
    status.command.assertFailed()
    assert.include(status.printed, 'http://[redacted]@127.0.0.1:9 unreachable')
    assert.notInclude(status.printed, PASSWORD)

    for (const args of [[], ['--json']]) {
      // A command that calls the service names its base URL when it cannot reach it.
      const list = await run(app, PayoutsWebhooksList, args)
      list.command.assertFailed()
      assert.include(list.printed, 'could not reach the Payout Service at http://[redacted]@127')
      assert.notInclude(list.printed, PASSWORD)
    }
  }).timeout(30_000)
})
