import { dirname, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { test } from '@japa/runner'
import ts from 'typescript'
import type { Secret } from '@adonisjs/core/helpers'
import type { PayoutsConfigInput, RedisConnectionName } from '../../src/define_config.ts'
import { SCRATCH_URL } from '../helpers/scratch.ts'

const CONFIG_MODULE = fileURLToPath(new URL('../../src/config.ts', import.meta.url))
const TSCONFIG = fileURLToPath(new URL('../../tsconfig.json', import.meta.url))

/**
 * The type errors of `source` as a file of an app would have them, compiled with this
 * repository's tsconfig (`defineConfig` imported as `#config`), one line each, numbered.
 */
function typeErrors(name: string, source: string): string[] {
  const file = fileURLToPath(new URL(name, SCRATCH_URL))
  const parsed = ts.getParsedCommandLineOfConfigFile(
    TSCONFIG,
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
        throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'))
      },
    }
  )!
  const host = ts.createCompilerHost(parsed.options)
  const readFile = host.readFile
  const configModule = relative(dirname(file), CONFIG_MODULE)
  host.readFile = (path) =>
    path === file ? source.replaceAll('#config', configModule) : readFile(path)
  host.fileExists = (
    (exists) => (path: string) =>
      path === file || exists(path)
  )(host.fileExists)
  const program = ts.createProgram([file], { ...parsed.options, noEmit: true }, host)
  return ts.getPreEmitDiagnostics(program, program.getSourceFile(file)).map((diagnostic) => {
    const { line } = diagnostic.file!.getLineAndCharacterOfPosition(diagnostic.start!)
    return `${line + 1}: ${ts.flattenDiagnosticMessageText(diagnostic.messageText, ' ')}`
  })
}

test.group('Config | types an app writes config/payouts.ts against', (group) => {
  group.each.timeout(120_000)

  test('secrets take a string or a Secret; durations a number or a string', ({ expectTypeOf }) => {
    expectTypeOf<PayoutsConfigInput['apiKey']>().toEqualTypeOf<
      string | Secret<string> | undefined
    >()
    expectTypeOf<NonNullable<PayoutsConfigInput['webhook']>['secret']>().toEqualTypeOf<
      string | Secret<string> | undefined
    >()
    expectTypeOf<NonNullable<PayoutsConfigInput['webhook']>['previousSecret']>().toEqualTypeOf<
      string | Secret<string> | undefined
    >()
    expectTypeOf<PayoutsConfigInput['timeoutMs']>().toEqualTypeOf<number | string | undefined>()
    expectTypeOf<NonNullable<PayoutsConfigInput['jobs']>['pruneEveryMs']>().toEqualTypeOf<
      number | string | undefined
    >()
    expectTypeOf<NonNullable<PayoutsConfigInput['jobs']>['redis']>().toEqualTypeOf<
      RedisConnectionName | undefined
    >()
    expectTypeOf<NonNullable<PayoutsConfigInput['jobs']>['redisUrl']>().toEqualTypeOf<
      string | Secret<string> | undefined
    >()
  })

  test("with the app's RedisConnections declared, jobs.redis takes only their names", ({
    assert,
  }) => {
    const errors = typeErrors(
      'redis_typed_probe.ts',
      `import { Secret } from '@adonisjs/core/helpers'
import { defineConfig } from '#config'

declare module '@adonisjs/redis/types' {
  interface RedisConnections {
    main: import('@adonisjs/redis/types').RedisConnectionConfig
    cache: import('@adonisjs/redis/types').RedisConnectionConfig
  }
}

defineConfig({
  baseUrl: 'http://x.test',
  apiKey: new Secret('sk_test_x'),
  timeoutMs: '10s',
  webhook: { secret: new Secret('whsec_x'), previousSecret: 'whsec_y', ackTimeoutMs: 5000 },
  jobs: { redis: 'cache', pruneEveryMs: '2h' },
  health: { oldestPendingMs: { warning: '5m', error: null } },
})
defineConfig({ baseUrl: 'http://x.test', jobs: { redisUrl: new Secret('redis://127.0.0.1:6379') } })
defineConfig({
  baseUrl: 'http://x.test',
  accounts: { eu: { apiKey: new Secret('sk_test_x'), jobs: { redis: 'main' } } },
})
defineConfig({ baseUrl: 'http://x.test', jobs: { redis: 'nope' } })
defineConfig({ baseUrl: 'http://x.test', accounts: { eu: { jobs: { redis: 'nope' } } } })
defineConfig({ baseUrl: 'http://x.test', timeoutMs: true })
`
    )
    // The last three calls only: a name config/redis.ts does not declare (shared, or an
    // account's), and a duration that is neither a number nor a string.
    assert.lengthOf(errors, 3, errors.join('\n'))
    const notAConnection = /: Type '"nope"' is not assignable to type 'keyof RedisConnections/
    assert.match(errors[0], new RegExp(`^24${notAConnection.source}`))
    assert.match(errors[1], new RegExp(`^25${notAConnection.source}`))
    assert.match(errors[2], /^26: Type 'true' is not assignable to type 'string \| number/)
  })

  test('without RedisConnections declared (no @adonisjs/redis config), jobs.redis is any name', ({
    assert,
  }) => {
    const errors = typeErrors(
      'redis_untyped_probe.ts',
      `import { defineConfig } from '#config'

defineConfig({ baseUrl: 'http://x.test', jobs: { redis: 'whatever' } })
`
    )
    assert.deepEqual(errors, [])
  })
})
