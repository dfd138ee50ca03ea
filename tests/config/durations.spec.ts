import { test } from '@japa/runner'
import { validateManagerConfig } from '../../src/accounts_config.ts'
import { defineConfig } from '../../src/config.ts'
import { validateConfig } from '../../src/define_config.ts'
import { durationFlag, toMilliseconds } from '../../src/duration.ts'
import { createApp, TEST_API_KEY } from '../helpers/app.ts'

const base = { apiKey: TEST_API_KEY, baseUrl: 'http://127.0.0.1:9' }

/** The message of the E_PAYOUTS_INVALID_CONFIG `validate` throws, or a failure. */
function refusal(validate: () => unknown): string {
  try {
    validate()
  } catch (error) {
    const { code, message } = error as { code?: string; message: string }
    if (code !== 'E_PAYOUTS_INVALID_CONFIG') throw error
    return message
  }
  throw new Error('the config was accepted')
}

/** An input with `value` at `path` (`['jobs', 'pruneEveryMs']`). */
function withValue(path: string[], value: unknown): Record<string, unknown> {
  const input: Record<string, any> = { ...base }
  let node = input
  for (const key of path.slice(0, -1)) node = node[key] = { ...node[key] }
  node[path.at(-1)!] = value
  return input
}

function valueAt(config: unknown, path: string[]): unknown {
  return path.reduce<any>((node, key) => node?.[key], config)
}

/**
 * Every duration of the config, by path: the `*Ms` keys of the validated defaults (with the
 * warning and error of a `*Ms` health threshold), plus `webhook.inlineSliceMs` (no default).
 */
function durationPaths(): string[][] {
  const paths: string[][] = [['webhook', 'inlineSliceMs']]
  const walk = (node: Record<string, unknown>, path: string[]) => {
    for (const [key, value] of Object.entries(node)) {
      if (key.endsWith('Ms') && typeof value === 'object' && value !== null) {
        paths.push([...path, key, 'warning'], [...path, key, 'error'])
      } else if (key.endsWith('Ms')) {
        paths.push([...path, key])
      } else if (typeof value === 'object' && value !== null) {
        walk(value as Record<string, unknown>, [...path, key])
      }
    }
  }
  walk(validateConfig(base) as unknown as Record<string, unknown>, [])
  return paths
}

test.group('Config | durations', () => {
  test('every *Ms option takes a string such as "1s", and the validated config holds its milliseconds', ({
    assert,
  }) => {
    const paths = durationPaths()
    // The walk found them all, not none: a sample of each section.
    for (const expected of [
      'timeoutMs',
      'retry.baseDelayMs',
      'retry.maxRetryAfterMs',
      'webhook.ackTimeoutMs',
      'webhook.processingLeaseMs',
      'events.notifyLeaseMs',
      'reconcile.staleAfterMs',
      'jobs.pruneEveryMs',
      'jobs.runTimeoutMs',
      'transmit.relayIntervalMs',
      'ledger.transactionTimeoutMs',
      'health.oldestPendingMs.warning',
      'health.sinceLastEventMs.error',
      'health.reachability.cacheForMs',
    ]) {
      assert.isTrue(
        paths.some((path) => path.join('.') === expected),
        `${expected} is a duration`
      )
    }
    for (const path of paths) {
      // 1 s is within the bounds of every one of them.
      const config = validateConfig(withValue(path, '1s') as never)
      assert.strictEqual(valueAt(config, path), 1000, path.join('.'))
    }
  })

  test('every *Ms option refuses more than the longest timer (2^31 - 1 ms), as a number or "25d"', ({
    assert,
  }) => {
    for (const path of durationPaths()) {
      const name = path.join('.')
      for (const value of ['25d', 2_147_483_648]) {
        const message = refusal(() => validateConfig(withValue(path, value) as never))
        assert.include(message, name, `${name} = ${value}`)
        assert.include(message, 'at most 2147483647 ms', `${name} = ${value}`)
      }
    }
    // The longest timer itself is accepted where the key's own bounds allow it.
    const config = validateConfig(withValue(['jobs', 'pruneEveryMs'], 2_147_483_647) as never)
    assert.strictEqual(config.jobs.pruneEveryMs, 2_147_483_647)
  })

  test('a number is still milliseconds; "2h", "500ms", "1.5s", "2 minutes" and zero of any unit read as AdonisJS reads them', ({
    assert,
  }) => {
    assert.equal(validateConfig({ ...base, timeoutMs: 12_345 }).timeoutMs, 12_345)
    assert.equal(validateConfig({ ...base, timeoutMs: '500ms' }).timeoutMs, 500)
    assert.equal(validateConfig({ ...base, timeoutMs: '1.5s' }).timeoutMs, 1500)
    assert.equal(
      validateConfig({ ...base, jobs: { pruneEveryMs: '2h' } }).jobs.pruneEveryMs,
      7_200_000
    )
    assert.equal(
      validateConfig({ ...base, jobs: { stuckAfterMs: '2 minutes' } }).jobs.stuckAfterMs,
      120_000
    )
    for (const zero of ['0', '0s', '0ms', '0h']) {
      assert.strictEqual(
        validateConfig({ ...base, jobs: { pruneEveryMs: zero } }).jobs.pruneEveryMs,
        0
      )
    }
    const health = validateConfig({
      ...base,
      health: { oldestPendingMs: { warning: '5m', error: null } },
    })
    assert.deepEqual({ ...health.health.oldestPendingMs }, { warning: 300_000, error: null })
  })

  test('a string that is no duration is refused naming its key; bounds apply to the milliseconds', ({
    assert,
  }) => {
    for (const bad of ['soon', '10 parsecs', '', ' 10s', '0banana', '1e3']) {
      assert.match(
        refusal(() => validateConfig({ ...base, timeoutMs: bad })),
        /: timeoutMs must be milliseconds, or a duration such as "10s", "2h" or "500ms"$/,
        JSON.stringify(bad)
      )
    }
    assert.match(
      refusal(() => validateConfig({ ...base, jobs: { pruneEveryMs: true as never } })),
      /: jobs\.pruneEveryMs must be milliseconds, or a duration/
    )
    // The service gives 10 s: at most 9000 ms, whatever the form.
    assert.match(
      refusal(() => validateConfig({ ...base, webhook: { ackTimeoutMs: '10s' } })),
      /: webhook\.ackTimeoutMs Too big/
    )
    assert.equal(
      validateConfig({ ...base, webhook: { ackTimeoutMs: '9s' } }).webhook.ackTimeoutMs,
      9000
    )
    assert.match(
      refusal(() => validateConfig({ ...base, webhook: { processingLeaseMs: '500ms' } })),
      /: webhook\.processingLeaseMs Too small/
    )
    assert.match(
      refusal(() => validateConfig({ ...base, jobs: { pruneEveryMs: '-5s' } })),
      /: jobs\.pruneEveryMs Too small/
    )
    assert.match(
      refusal(() => validateConfig({ ...base, timeoutMs: '1.5ms' })),
      /: timeoutMs .*int/
    )
  })

  test("an account's duration is named under the account", ({ assert }) => {
    const message = refusal(() =>
      validateManagerConfig({
        ...base,
        accounts: { main: {}, eu: { apiKey: `sk_test_${'B'.repeat(43)}`, timeoutMs: 'later' } },
        default: 'main',
      })
    )
    assert.match(message, /: accounts\.eu\.timeoutMs must be milliseconds, or a duration/)
    const config = validateManagerConfig({
      ...base,
      jobs: { reconcileEveryMs: '5m' },
      accounts: {
        main: {},
        eu: { apiKey: `sk_test_${'B'.repeat(43)}`, jobs: { reconcileEveryMs: '30s' } },
      },
      default: 'main',
    })
    assert.equal(config.accounts.main.jobs.reconcileEveryMs, 300_000)
    assert.equal(config.accounts.eu.jobs.reconcileEveryMs, 30_000)
  })

  test('an app booted with durations as strings has their milliseconds', async ({
    assert,
    cleanup,
  }) => {
    const app = await createApp(
      defineConfig({
        ...base,
        timeoutMs: '10s',
        webhook: { ackTimeoutMs: '3s' },
        jobs: { enabled: false, reconcileEveryMs: '2m' },
      }) as never,
      cleanup
    )
    const payouts = await app.container.make('payouts.manager')
    assert.equal(payouts.config.timeoutMs, 10_000)
    assert.equal(payouts.config.webhook.ackTimeoutMs, 3000)
    assert.equal(payouts.config.jobs.reconcileEveryMs, 120_000)
  })
})

test.group('Durations | flags and values', () => {
  test('toMilliseconds reads numbers, digits and durations; undefined for anything else', ({
    assert,
  }) => {
    assert.equal(toMilliseconds(250), 250)
    assert.equal(toMilliseconds('250'), 250)
    assert.equal(toMilliseconds('2h'), 7_200_000)
    assert.equal(toMilliseconds('0s'), 0)
    for (const bad of ['soon', '0banana', '', null, undefined, ['1s'], {}]) {
      assert.isUndefined(toMilliseconds(bad), JSON.stringify(bad))
    }
  })

  test('durationFlag: milliseconds within bounds, or a refusal naming the flag and what it was given', ({
    assert,
  }) => {
    assert.deepEqual(durationFlag('older-than-ms', undefined, 0, 10), {})
    assert.deepEqual(durationFlag('older-than-ms', '2h', 0, Number.MAX_SAFE_INTEGER), {
      ms: 7_200_000,
    })
    assert.deepEqual(durationFlag('older-than-ms', '0', 0, 10), { ms: 0 })
    for (const bad of ['soon', '1.5', '-1', '11', '1s', '']) {
      const { ms, refused } = durationFlag('older-than-ms', bad, 0, 10)
      assert.isUndefined(ms, bad)
      assert.equal(
        refused,
        `--older-than-ms must be a whole number from 0 to 10, not "${bad}" (milliseconds, or a duration such as "10s", "2h" or "500ms"). Nothing done`
      )
    }
  })
})
