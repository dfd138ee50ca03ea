import { readFile } from 'node:fs/promises'
import { test } from '@japa/runner'
import { IgnitorFactory } from '@adonisjs/core/factories'
import Configure from '@adonisjs/core/commands/configure'
import { validateManagerConfig } from '../../src/accounts_config.ts'
import { BASE_URL } from '../helpers/app.ts'

const FIXTURE = new URL('../fixtures/bare_app/', import.meta.url)
const BASE = 'http://127.0.0.1:4010'
const ARGS = ['../../index.ts', `--base-url=${BASE}`]
const KEY = 'sk_test_PrWQUkQBopclZmfdRk8So31KfinJ85UsI8o-7qO9wGk'

type Fs = { create(path: string, contents: string): Promise<void> }

/** The bare app in the scratch folder (as tests/integration/configure.spec.ts seeds it). */
async function setupScratchApp(fs: Fs, extraFiles: Record<string, string> = {}) {
  const app = new IgnitorFactory()
    .withCoreProviders()
    .withCoreConfig()
    .create(BASE_URL, {
      importer: (filePath) =>
        filePath.startsWith('.') ? import(new URL(filePath, BASE_URL).href) : import(filePath),
    })
    .createApp('console')
  await app.init()
  await app.boot()
  for (const file of ['adonisrc.ts', 'start/env.ts', '.env.example', 'tsconfig.json']) {
    await fs.create(file, await readFile(new URL(file, FIXTURE), 'utf8'))
  }
  await fs.create(
    '.env',
    'NODE_ENV=test\nPORT=3333\nHOST=127.0.0.1\nAPP_KEY=averylongrandomsecretkey32chars!\n'
  )
  for (const [path, contents] of Object.entries(extraFiles)) await fs.create(path, contents)
  const ace = await app.container.make('ace')
  ace.ui.switchMode('raw')
  return ace
}

/** Runs configure; fails with its log lines when it did not succeed. */
async function configure(ace: Awaited<ReturnType<typeof setupScratchApp>>, args: string[]) {
  const command = await ace.create(Configure, args)
  await command.exec()
  if (command.exitCode !== 0) {
    throw new Error(
      `configure exited ${command.exitCode}: ${JSON.stringify(command.logger.getLogs())}`
    )
  }
  return command
}

/** config/redis.ts as `node ace add @adonisjs/redis` publishes it, with another default. */
const REDIS_CONFIG = `import env from '#start/env'
import { defineConfig } from '@adonisjs/redis'
import { InferConnections } from '@adonisjs/redis/types'

const redisConfig = defineConfig({
  connection: 'cache',
  connections: {
    cache: { host: env.get('REDIS_HOST'), port: env.get('REDIS_PORT'), db: 0, keyPrefix: '' },
  },
})

export default redisConfig

declare module '@adonisjs/redis/types' {
  export interface RedisConnections extends InferConnections<typeof redisConfig> {}
}
`

test.group('Configure | secrets and the job locks', (group) => {
  group.each.timeout(0)

  test('start/env.ts gives the key and the webhook secret as Secrets, which the config takes', async ({
    assert,
    fs,
    cleanup,
  }) => {
    // Env.create puts .env into process.env: what it adds goes when the test ends.
    const before = new Set(Object.keys(process.env))
    cleanup(() => {
      for (const name of Object.keys(process.env)) if (!before.has(name)) delete process.env[name]
    })
    const ace = await setupScratchApp(fs)
    await configure(ace, [...ARGS, `--api-key=${KEY}`])
    await fs.create(
      '.env',
      `${await fs.contents('.env')}`.replace(
        /^PAYOUTS_WEBHOOK_SECRET=.*$/m,
        'PAYOUTS_WEBHOOK_SECRET=whsec_from_env'
      )
    )
    await assert.fileContains('start/env.ts', [
      'PAYOUTS_API_KEY: Env.schema.secret.optional()',
      'PAYOUTS_WEBHOOK_SECRET: Env.schema.secret.optional()',
    ])
    // start/env.ts as the app loads it.
    const { default: env } = await import(
      new URL(`start/env.ts?secrets=${Date.now()}`, BASE_URL).href
    )
    const apiKey = env.get('PAYOUTS_API_KEY')
    const secret = env.get('PAYOUTS_WEBHOOK_SECRET')
    assert.equal(String(apiKey), '[redacted]')
    assert.equal(apiKey.release(), KEY)
    assert.equal(String(secret), '[redacted]')
    const config = validateManagerConfig({
      apiKey,
      baseUrl: env.get('PAYOUTS_BASE_URL'),
      webhook: { secret },
    })
    assert.equal(config.accounts.main.apiKey, KEY)
    assert.equal(config.accounts.main.webhook.secret, 'whsec_from_env')
  })

  test('an app with @adonisjs/redis: the config names its default connection, no PAYOUTS_REDIS_URL', async ({
    assert,
    fs,
  }) => {
    const ace = await setupScratchApp(fs, { 'config/redis.ts': REDIS_CONFIG })
    await configure(ace, ARGS)
    await assert.fileContains('config/payouts.ts', [
      'jobs: {',
      `redis: 'cache',`,
      'through the app',
    ])
    await assert.fileNotContains('config/payouts.ts', 'PAYOUTS_REDIS_URL')
    await assert.fileNotContains('config/payouts.ts', 'redisUrl')
    await assert.fileNotContains('start/env.ts', 'PAYOUTS_REDIS_URL')
  })

  test('an app with @adonisjs/lock: the locks are left to its default store', async ({
    assert,
    fs,
  }) => {
    const ace = await setupScratchApp(fs, {
      'config/lock.ts': "export default { default: 'redis', stores: {} }\n",
      'config/redis.ts': REDIS_CONFIG,
    })
    await configure(ace, ARGS)
    await assert.fileContains('config/payouts.ts', 'default store of config/lock.ts')
    await assert.fileNotContains('config/payouts.ts', 'jobs: {')
    await assert.fileNotContains('config/payouts.ts', 'PAYOUTS_REDIS_URL')
    await assert.fileNotContains('start/env.ts', 'PAYOUTS_REDIS_URL')
  })

  test('an app with neither: the config reads PAYOUTS_REDIS_URL into jobs.redisUrl', async ({
    assert,
    fs,
  }) => {
    const ace = await setupScratchApp(fs)
    await configure(ace, ARGS)
    await assert.fileContains('config/payouts.ts', `redisUrl: env.get('PAYOUTS_REDIS_URL'),`)
    await assert.fileContains('start/env.ts', 'PAYOUTS_REDIS_URL: Env.schema.secret.optional()')
  })
})
