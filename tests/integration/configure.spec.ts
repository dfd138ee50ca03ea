import { readdir, readFile } from 'node:fs/promises'
import { pathToFileURL } from 'node:url'
import { test } from '@japa/runner'
import { IgnitorFactory } from '@adonisjs/core/factories'
import Configure from '@adonisjs/core/commands/configure'
import { BASE_URL } from '../helpers/app.ts'

const FIXTURE = new URL('../fixtures/bare_app/', import.meta.url)
const DEMO = new URL('../../examples/demo/', import.meta.url)
const BASE = 'http://127.0.0.1:4010'
const ARGS = ['../../index.ts', `--base-url=${BASE}`]

const SHIELD_CONFIG = `import { defineConfig } from '@adonisjs/shield'

const shieldConfig = defineConfig({
  csp: { enabled: false },
  csrf: {
    enabled: true,
    exceptRoutes: [],
    methods: ['POST', 'PUT', 'PATCH', 'DELETE'],
  },
})

export default shieldConfig
`

type Fs = { create(path: string, contents: string): Promise<void> }

/**
 * A console app in tests/tmp seeded with the bare app's files: the demo before configure
 * (with @adonisjs/otel already added, whose provider configure's goes after).
 */
async function setupScratchApp(fs: Fs, extraFiles: Record<string, string> = {}) {
  const ignitor = new IgnitorFactory()
    .withCoreProviders()
    .withCoreConfig()
    .create(BASE_URL, {
      importer: (filePath) => {
        if (filePath.startsWith('./') || filePath.startsWith('../')) {
          return import(new URL(filePath, BASE_URL).href)
        }
        return import(filePath)
      },
    })
  const app = ignitor.createApp('console')
  await app.init()
  await app.boot()
  for (const file of ['adonisrc.ts', 'start/env.ts', '.env.example', 'tsconfig.json']) {
    await fs.create(file, await readFile(new URL(file, FIXTURE), 'utf8'))
  }
  await fs.create('.env', 'PORT=3333\n')
  for (const [path, contents] of Object.entries(extraFiles)) await fs.create(path, contents)
  const ace = await app.container.make('ace')
  ace.ui.switchMode('raw')
  return { app, ace }
}

/** Fails with the command's own log lines, so a failure says why configure failed. */
function assertConfigured(command: { exitCode?: number; logger: { getLogs(): unknown[] } }) {
  if (command.exitCode !== 0) {
    throw new Error(
      `configure exited ${command.exitCode}: ${JSON.stringify(command.logger.getLogs(), null, 1)}`
    )
  }
}

/** A folder's URL, ending with a slash so relative paths resolve inside it. */
const folderUrl = (path: string) => pathToFileURL(`${path}/`)

/** The migrations configure published, in order (their names carry a timestamp). */
async function migrationsOf(root: URL) {
  const files = await readdir(new URL('database/migrations/', root))
  return files
    .filter((file) =>
      /_(create_payouts_tables|add_payouts_indexes|add_payouts_leases|add_payouts_trace_context|add_payouts_accounts|add_payouts_provider_metadata_at|add_payouts_provider_metadata_due)\.ts$/.test(
        file
      )
    )
    .sort()
}

/** A key in the spec's format whose 43 characters include `-` and `_` (url-safe base64). */
const URL_SAFE_KEY = 'sk_test_PrWQUkQBopclZmfdRk8So31KfinJ85UsI8o-7qO9wGk'

test.group('Configure', (group) => {
  group.each.timeout(0)

  test('publishes config, migration and preload; registers provider, commands and preload; declares env vars', async ({
    assert,
    fs,
  }) => {
    const { ace } = await setupScratchApp(fs)
    const command = await ace.create(Configure, [...ARGS, `--api-key=${URL_SAFE_KEY}`])
    await command.exec()
    assertConfigured(command)

    await assert.fileContains('config/payouts.ts', [
      `apiKey: env.get('PAYOUTS_API_KEY')`,
      `baseUrl: env.get('PAYOUTS_BASE_URL')`,
      `secret: env.get('PAYOUTS_WEBHOOK_SECRET')`,
      `processing: env.get('PAYOUTS_PROCESSING', 'inline')`,
      `redisUrl: env.get('PAYOUTS_REDIS_URL')`,
      `path: '/webhooks/payouts'`,
      `tablePrefix: 'svc_'`,
    ])
    await assert.fileContains('start/payouts.ts', [
      'await payouts.registerRoutes(router)',
      'payouts.registerChannels(transmit, {',
    ])
    await assert.fileContains('adonisrc.ts', [
      `() => import('@svc/adonis-payouts/payouts_provider')`,
      `() => import('@svc/adonis-payouts/commands')`,
      `() => import('#start/payouts')`,
    ])
    await assert.fileContains('.env', [
      'PAYOUTS_BASE_URL=http://127.0.0.1:4010',
      `PAYOUTS_API_KEY=${URL_SAFE_KEY}`,
    ])
    // The example file documents the variables without leaking the key.
    await assert.fileContains('.env.example', 'PAYOUTS_BASE_URL=http://127.0.0.1:4010')
    await assert.fileContains('.env.example', 'PAYOUTS_API_KEY=')
    await assert.fileNotContains('.env.example', URL_SAFE_KEY)
    const [migration, indexes, leases, traceContext, accounts, metadataAt, metadataDue, ...others] =
      await migrationsOf(folderUrl(fs.basePath))
    assert.lengthOf(others, 0)
    assert.lengthOf(await fs.readDir('database/migrations'), 7)
    assert.match(migration, /^\d+_create_payouts_tables\.ts$/)
    await assert.fileContains(`database/migrations/${migration}`, [
      `createPayoutsTables(this.schema, 'svc_')`,
      `dropPayoutsTables(this.schema, 'svc_')`,
    ])
    // The indexes come after the tables, in their own migration.
    assert.match(indexes, /^\d+_add_payouts_indexes\.ts$/)
    assert.isAbove(Number.parseInt(indexes), Number.parseInt(migration))
    await assert.fileContains(`database/migrations/${indexes}`, [
      `createPayoutsIndexes(this.schema, 'svc_')`,
      `dropPayoutsIndexes(this.schema, 'svc_')`,
    ])
    // The leases and heartbeats come next, in their own migration.
    assert.match(leases, /^\d+_add_payouts_leases\.ts$/)
    assert.isAbove(Number.parseInt(leases), Number.parseInt(indexes))
    await assert.fileContains(`database/migrations/${leases}`, [
      `createPayoutsLeases(this.schema, 'svc_')`,
      `dropPayoutsLeases(this.schema, 'svc_')`,
    ])
    // The trace context columns come next.
    assert.match(traceContext, /^\d+_add_payouts_trace_context\.ts$/)
    assert.isAbove(Number.parseInt(traceContext), Number.parseInt(leases))
    await assert.fileContains(`database/migrations/${traceContext}`, [
      `createPayoutsTraceContext(this.schema, 'svc_')`,
      `dropPayoutsTraceContext(this.schema, 'svc_')`,
    ])
    // The accounts come next.
    assert.match(accounts, /^\d+_add_payouts_accounts\.ts$/)
    assert.isAbove(Number.parseInt(accounts), Number.parseInt(traceContext))
    await assert.fileContains(`database/migrations/${accounts}`, [
      `createPayoutsAccounts(this.schema, 'svc_')`,
      `dropPayoutsAccounts(this.schema, 'svc_')`,
    ])
    // When each payout's routing detail was observed comes next.
    assert.match(metadataAt, /^\d+_add_payouts_provider_metadata_at\.ts$/)
    assert.isAbove(Number.parseInt(metadataAt), Number.parseInt(accounts))
    await assert.fileContains(`database/migrations/${metadataAt}`, [
      `createPayoutsProviderMetadataAt(this.schema, 'svc_')`,
      `dropPayoutsProviderMetadataAt(this.schema, 'svc_')`,
    ])
    // The mark of the ended payouts whose detail is still to read comes last.
    assert.match(metadataDue, /^\d+_add_payouts_provider_metadata_due\.ts$/)
    assert.isAbove(Number.parseInt(metadataDue), Number.parseInt(metadataAt))
    await assert.fileContains(`database/migrations/${metadataDue}`, [
      `createPayoutsProviderMetadataDue(this.schema, 'svc_')`,
      `dropPayoutsProviderMetadataDue(this.schema, 'svc_')`,
    ])
    await assert.fileContains('start/env.ts', [
      'PAYOUTS_API_KEY: Env.schema.secret.optional()',
      'PAYOUTS_WEBHOOK_SECRET: Env.schema.secret.optional()',
      'PAYOUTS_REDIS_URL: Env.schema.secret.optional()',
      "PAYOUTS_PROCESSING: Env.schema.enum.optional(['inline', 'worker'] as const)",
    ])
    command.assertLog('  - node ace migration:run')
    // The key was given: no step asks for it.
    const logs = command.logger.getLogs().map((log) => log.message)
    assert.notMatch(logs.join('\n'), /Set PAYOUTS_API_KEY/)
  })

  test('an app whose tables an earlier version created gets the later migrations alone', async ({
    assert,
    fs,
  }) => {
    const earlier = 'database/migrations/1700000000000_create_payouts_tables.ts'
    const { ace } = await setupScratchApp(fs, { [earlier]: '// the tables, as published before' })
    const command = await ace.create(Configure, ARGS)
    await command.exec()
    assertConfigured(command)
    const [tables, indexes, leases, traceContext, accounts, metadataAt, metadataDue, ...others] =
      await migrationsOf(folderUrl(fs.basePath))
    assert.lengthOf(others, 0)
    assert.equal(`database/migrations/${tables}`, earlier)
    await assert.fileEquals(earlier, '// the tables, as published before')
    assert.match(indexes, /^\d+_add_payouts_indexes\.ts$/)
    await assert.fileContains(`database/migrations/${indexes}`, [
      `createPayoutsIndexes(this.schema, 'svc_')`,
    ])
    assert.match(leases, /^\d+_add_payouts_leases\.ts$/)
    assert.isAbove(Number.parseInt(leases), Number.parseInt(indexes))
    assert.match(traceContext, /^\d+_add_payouts_trace_context\.ts$/)
    assert.isAbove(Number.parseInt(traceContext), Number.parseInt(leases))
    await assert.fileContains(`database/migrations/${traceContext}`, [
      `createPayoutsTraceContext(this.schema, 'svc_')`,
    ])
    assert.match(accounts, /^\d+_add_payouts_accounts\.ts$/)
    assert.isAbove(Number.parseInt(accounts), Number.parseInt(traceContext))
    assert.match(metadataAt, /^\d+_add_payouts_provider_metadata_at\.ts$/)
    assert.isAbove(Number.parseInt(metadataAt), Number.parseInt(accounts))
    assert.match(metadataDue, /^\d+_add_payouts_provider_metadata_due\.ts$/)
    assert.isAbove(Number.parseInt(metadataDue), Number.parseInt(metadataAt))
  })

  test('running it twice leaves the app unchanged', async ({ assert, fs }) => {
    const { ace } = await setupScratchApp(fs, { 'config/shield.ts': SHIELD_CONFIG })
    const initial = await ace.create(Configure, ARGS)
    await initial.exec()
    assertConfigured(initial)
    const files = [
      'config/payouts.ts',
      'config/shield.ts',
      'start/payouts.ts',
      'adonisrc.ts',
      '.env',
      '.env.example',
      'start/env.ts',
    ]
    const first = await Promise.all(files.map((file) => fs.contents(file)))
    const again = await ace.create(Configure, ARGS)
    await again.exec()
    assertConfigured(again)
    assert.lengthOf(await fs.readDir('database/migrations'), 7)
    const second = await Promise.all(files.map((file) => fs.contents(file)))
    assert.deepEqual(second, first)
  })

  test('exempts the webhook route from Shield CSRF when Shield is installed', async ({
    assert,
    fs,
  }) => {
    const { ace } = await setupScratchApp(fs, { 'config/shield.ts': SHIELD_CONFIG })
    const command = await ace.create(Configure, ARGS)
    await command.exec()
    assertConfigured(command)
    await assert.fileContains('config/shield.ts', `exceptRoutes: ['/webhooks/payouts']`)
    await assert.fileContains('config/shield.ts', `methods: ['POST', 'PUT', 'PATCH', 'DELETE']`)
  })

  test('an unrecognised shield config gets the manual step printed, not a broken edit', async ({
    assert,
    fs,
  }) => {
    const custom = SHIELD_CONFIG.replace('exceptRoutes: [],', 'exceptRoutes: (ctx) => false,')
    const { ace } = await setupScratchApp(fs, { 'config/shield.ts': custom })
    const command = await ace.create(Configure, ARGS)
    await command.exec()
    assertConfigured(command)
    command.assertLogMatches(/Add '\/webhooks\/payouts' to csrf\.exceptRoutes/)
    assert.equal(await fs.contents('config/shield.ts'), custom)
  })

  test('without Transmit the preload registers the route only', async ({ assert, fs }) => {
    const { ace } = await setupScratchApp(fs)
    const rc = await fs.contents('adonisrc.ts')
    await fs.create('adonisrc.ts', rc.replace(/.*transmit_provider.*\n/, ''))
    const command = await ace.create(Configure, ARGS)
    await command.exec()
    assertConfigured(command)
    command.assertLogMatches(/Set PAYOUTS_API_KEY/)
    await assert.fileContains('start/payouts.ts', 'await payouts.registerRoutes(router)')
    await assert.fileNotContains('start/payouts.ts', 'transmit')
  })

  test('an invalid --base-url fails with a logged error and exit code 1', async ({ fs }) => {
    const { ace } = await setupScratchApp(fs)
    const command = await ace.create(Configure, ['../../index.ts', '--base-url=not a url'])
    await command.exec()
    command.assertFailed()
    command.assertLogMatches(/"not a url" is not a valid URL/)
  })

  test('without a terminal and without --base-url it names the flag, exits 1 and writes nothing', async ({
    assert,
    fs,
  }) => {
    const { ace } = await setupScratchApp(fs)
    const before = Object.getOwnPropertyDescriptor(process.stdin, 'isTTY')
    Object.defineProperty(process.stdin, 'isTTY', { value: false, configurable: true })
    const command = await ace.create(Configure, ['../../index.ts'])
    // Were it asked anyway, the answer would let it run on (a failure here, not an exit).
    command.prompt.trap('Base URL of the Payout Service (the emulator by default)').replyWith(BASE)
    try {
      await command.exec()
    } finally {
      if (before) Object.defineProperty(process.stdin, 'isTTY', before)
      else delete (process.stdin as { isTTY?: boolean }).isTTY
    }
    command.assertFailed()
    command.assertLogMatches(/No terminal to ask on: pass --base-url/)
    await assert.fileNotExists('config/payouts.ts')
  })

  test('without --api-key the app still boots its env: the key is optional until issued', async ({
    assert,
    fs,
  }) => {
    const { ace } = await setupScratchApp(fs)
    await fs.create(
      '.env',
      'NODE_ENV=test\nPORT=3333\nHOST=127.0.0.1\nAPP_KEY=averylongrandomsecretkey32chars!\n'
    )
    const command = await ace.create(Configure, ARGS)
    await command.exec()
    assertConfigured(command)
    await assert.fileContains('.env', /^PAYOUTS_API_KEY=$/m)
    // start/env.ts as `node ace list` or `node ace migration:run` would load it.
    const envFile = new URL(`start/env.ts?no_key=${Date.now()}`, BASE_URL)
    const { default: env } = await import(envFile.href)
    assert.isUndefined(env.get('PAYOUTS_API_KEY'))
    assert.equal(env.get('PAYOUTS_BASE_URL'), BASE)
  })

  test('a malformed --api-key fails before anything is written', async ({ assert, fs }) => {
    const { ace } = await setupScratchApp(fs)
    for (const bad of ['pk_nope', 'sk_test_abc123', `${URL_SAFE_KEY}!`]) {
      const command = await ace.create(Configure, [...ARGS, `--api-key=${bad}`])
      await command.exec()
      command.assertFailed()
      command.assertLogMatches(/--api-key must be sk_test_ or sk_live_ followed by 43/)
      await assert.fileNotExists('config/payouts.ts')
    }
  })

  test('an adonisrc.ts it cannot update is a failure, never "configured"', async ({
    assert,
    fs,
  }) => {
    const { ace } = await setupScratchApp(fs, {
      // A shape the codemods do not know: no defineConfig call to add the provider to.
      'adonisrc.ts': 'const rc = { providers: [] }\nexport default rc\n',
    })
    const command = await ace.create(Configure, ARGS)
    await command.exec()
    command.assertFailed()
    command.assertLogMatches(/adonisrc.ts was not updated/)
    const logs = command.ui.logger.getLogs().map((line) => line.message)
    assert.notMatch(logs.join('\n'), /Payouts configured/)
  })

  test('the example app is what configure produces on the bare app', async ({ assert, fs }) => {
    const { ace } = await setupScratchApp(fs)
    const command = await ace.create(Configure, ARGS)
    await command.exec()
    assertConfigured(command)

    const demoFile = (path: string) => readFile(new URL(path, DEMO), 'utf8')
    for (const file of [
      'adonisrc.ts',
      'start/env.ts',
      '.env.example',
      'config/payouts.ts',
      'tsconfig.json',
    ]) {
      assert.equal(await demoFile(file), await fs.contents(file), `${file} differs`)
    }
    // The demo decides who may watch (step 4 of the next steps); the rest is configure's.
    const channels = /payouts\.registerChannels\(transmit, \{[\s\S]*?\n\}\)/
    const published = await fs.contents('start/payouts.ts')
    assert.match(published, channels)
    assert.equal(
      (await demoFile('start/payouts.ts')).replace(channels, '<channels>'),
      published.replace(channels, '<channels>')
    )
    const demoMigrations = await migrationsOf(DEMO)
    const migrations = await migrationsOf(folderUrl(fs.basePath))
    assert.lengthOf(demoMigrations, 7)
    for (const [index, demoMigration] of demoMigrations.entries()) {
      assert.equal(
        await demoFile(`database/migrations/${demoMigration}`),
        await fs.contents(`database/migrations/${migrations[index]}`)
      )
    }
  })
})
