import { test } from '@japa/runner'
import { IgnitorFactory } from '@adonisjs/core/factories'
import Configure from '@adonisjs/core/commands/configure'
import { BASE_URL } from '../helpers/app.ts'

async function setupScratchApp(fs: { create(path: string, contents: string): Promise<void> }) {
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
  await fs.create('.env', '')
  await fs.create('tsconfig.json', '{}')
  await fs.create('start/env.ts', `export default Env.create(new URL('./'), {})`)
  await fs.create('adonisrc.ts', `export default defineConfig({})`)
  const ace = await app.container.make('ace')
  ace.ui.switchMode('raw')
  return { app, ace }
}

test.group('Configure', (group) => {
  group.each.timeout(0)

  test('publishes the config, registers provider and commands, declares env vars', async ({
    assert,
    fs,
  }) => {
    const { ace } = await setupScratchApp(fs)
    const command = await ace.create(Configure, [
      '../../index.ts',
      '--base-url=http://127.0.0.1:4010',
    ])
    await command.exec()
    command.assertSucceeded()

    await assert.fileContains('config/payouts.ts', [
      `apiKey: env.get('PAYOUTS_API_KEY')`,
      `baseUrl: env.get('PAYOUTS_BASE_URL')`,
      `secret: env.get('PAYOUTS_WEBHOOK_SECRET')`,
    ])
    await assert.fileContains('adonisrc.ts', [
      '@svc/adonis-payouts/payouts_provider',
      '@svc/adonis-payouts/commands',
    ])
    await assert.fileContains('.env', 'PAYOUTS_BASE_URL=http://127.0.0.1:4010')
    const migrations = await fs.readDir('database/migrations')
    assert.lengthOf(migrations, 1)
    assert.match(migrations[0].path, /^\d+_create_payouts_tables\.ts$/)
    await assert.fileContains(`database/migrations/${migrations[0].path}`, [
      `createPayoutsTables(this.schema, 'svc_')`,
      `dropPayoutsTables(this.schema, 'svc_')`,
    ])
    await assert.fileContains('start/env.ts', [
      'PAYOUTS_API_KEY: Env.schema.string()',
      'PAYOUTS_WEBHOOK_SECRET: Env.schema.string.optional()',
    ])
  })

  test('running it twice leaves the app unchanged', async ({ assert, fs }) => {
    const { ace } = await setupScratchApp(fs)
    const args = ['../../index.ts', '--base-url=http://127.0.0.1:4010']
    const initial = await ace.create(Configure, args)
    await initial.exec()
    const files = ['config/payouts.ts', 'adonisrc.ts', '.env', 'start/env.ts']
    const first = await Promise.all(files.map((file) => fs.contents(file)))
    const again = await ace.create(Configure, args)
    await again.exec()
    again.assertSucceeded()
    assert.lengthOf(await fs.readDir('database/migrations'), 1)
    const second = await Promise.all(files.map((file) => fs.contents(file)))
    assert.deepEqual(second, first)
  })

  test('an invalid --base-url fails with a logged error and exit code 1', async ({ fs }) => {
    const { ace } = await setupScratchApp(fs)
    const command = await ace.create(Configure, ['../../index.ts', '--base-url=not a url'])
    await command.exec()
    command.assertFailed()
    command.assertLogMatches(/"not a url" is not a valid URL/)
  })
})
