import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { randomBytes, randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { test } from '@japa/runner'
import { dbDate } from '../../src/database/dates.ts'
import { startEmulator } from '../emulator/helpers.ts'
import { connectionConfig, setupDatabase, TEST_DB } from '../helpers/database.ts'
import { scratchApp } from '../helpers/scratch_app.ts'
import { TS_HOOKS } from '../helpers/ts_hooks.ts'

/**
 * `node ace payouts:*` as an operator runs it: a real child process of a scratch app, its
 * output piped (not a terminal), as a monitoring script or `| tee` reads it.
 */

const REPO = fileURLToPath(new URL('../../', import.meta.url))
const href = (path: string) => pathToFileURL(join(REPO, path)).href
const ANSI = '\x1b['

/** An app shaped like configure's output, with the commands under test and the test's database. */
function appFiles(): Record<string, string> {
  return {
    'adonisrc.ts': `import { defineConfig } from '@adonisjs/core/app'

export default defineConfig({
  commands: [() => import('./payouts_commands.ts')],
  providers: [
    () => import('@adonisjs/core/providers/app_provider'),
    () => import('@adonisjs/lucid/database_provider'),
    () => import('${href('providers/payouts_provider.ts')}'),
  ],
})
`,
    'payouts_commands.ts': `import { ListLoader } from '@adonisjs/core/ace'
import PayoutsStatus from '${href('commands/payouts_status.ts')}'
import PayoutsWebhooksRedeliver from '${href('commands/payouts_webhooks_redeliver.ts')}'
import PayoutsDeliveriesReplay from '${href('commands/payouts_deliveries_replay.ts')}'

const loader = new ListLoader([PayoutsStatus, PayoutsWebhooksRedeliver, PayoutsDeliveriesReplay])
export const getMetaData = () => loader.getMetaData()
export const getCommand = (metaData: any) => loader.getCommand(metaData)
`,
    'start/env.ts': `import { Env } from '@adonisjs/core/env'

export default await Env.create(new URL('../', import.meta.url), {
  NODE_ENV: Env.schema.enum(['development', 'production', 'test'] as const),
  APP_KEY: Env.schema.string(),
})
`,
    'config/database.ts': `import { defineConfig } from '@adonisjs/lucid'

const { connection } = JSON.parse(process.env.CLI_TEST!)
export default defineConfig({ connection: 'main', connections: { main: connection } })
`,
    'config/payouts.ts': `import { defineConfig } from '${href('index.ts')}'

const { prefix, baseUrl, apiKey } = JSON.parse(process.env.CLI_TEST!)
export default defineConfig({
  apiKey,
  baseUrl,
  clientRateLimiter: false,
  jobs: { enabled: false },
  ledger: { tablePrefix: prefix },
})
`,
  }
}

/** A scratch app on the emulator and the suite's database, with one dead letter stored. */
async function cliApp(cleanup: (fn: () => Promise<void>) => void) {
  const name = 'cli'
  const { db, prefix } = await setupDatabase(cleanup, name)
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const client = db.connection()
  await client.table(`${prefix}webhook_deliveries`).insert({
    delivery_id: `dlv_${randomUUID()}`,
    event_type: 'payout.created',
    raw_body: Buffer.from('{').toString('base64'),
    source: 'webhook',
    state: 'dead',
    attempts: 5,
    received_at: dbDate(client, new Date()),
  })
  const root = await scratchApp(cleanup, name, appFiles())
  const settings = {
    prefix,
    baseUrl: emu.baseUrl,
    apiKey: emu.apiKey,
    connection: connectionConfig(name),
  }
  /** `node ace ...args`, stdout and stderr piped apart; no colour asked for unless `env` does. */
  return async (args: string[], env: Record<string, string> = {}) => {
    const inherited = { ...process.env }
    delete inherited.FORCE_COLOR
    delete inherited.NO_COLOR
    const child = spawn(process.execPath, [TS_HOOKS, 'bin/console.ts', ...args], {
      cwd: root,
      env: {
        ...inherited,
        NODE_ENV: 'development',
        APP_KEY: randomBytes(32).toString('base64url'),
        CLI_TEST: JSON.stringify(settings),
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (chunk) => (stdout += chunk))
    child.stderr.setEncoding('utf8').on('data', (chunk) => (stderr += chunk))
    const [code] = await once(child, 'exit')
    return { code: code as number | null, stdout, stderr }
  }
}

test.group(`Commands | node ace, output piped (${TEST_DB})`, (group) => {
  group.each.timeout(90_000)

  test('payouts:status: no colour code when piped; a warning exits 1, labelled warn on stderr', async ({
    assert,
    cleanup,
  }) => {
    const ace = await cliApp(cleanup)
    const piped = await ace(['payouts:status'])
    assert.equal(piped.code, 1, piped.stderr)
    assert.notInclude(piped.stdout, ANSI, 'no colour code on stdout')
    assert.notInclude(piped.stderr, ANSI, 'no colour code on stderr')
    assert.match(piped.stdout, /deadLetters +│ +warning +│ +1/)
    assert.equal(
      piped.stderr.trim(),
      '[ warn ] payouts:status warning: 1 dead letters (payouts:replay requeues them) (warning at 1)'
    )

    // What the check above would see: the same run with colours forced carries them.
    const forced = await ace(['payouts:status'], { FORCE_COLOR: '1' })
    assert.equal(forced.code, 1)
    assert.include(forced.stdout, ANSI)
  })

  test('payouts:deliveries:replay says on stderr that it is deprecated, then runs as payouts:webhooks:redeliver', async ({
    assert,
    cleanup,
  }) => {
    const ace = await cliApp(cleanup)
    const current = await ace(['payouts:webhooks:redeliver', 'dlv_missing'])
    const former = await ace(['payouts:deliveries:replay', 'dlv_missing'])
    const [notice, ...rest] = former.stderr.split('\n')
    assert.equal(
      notice,
      '[ warn ] payouts:deliveries:replay is deprecated and will be removed in 0.2.0: use payouts:webhooks:redeliver'
    )
    // The same run otherwise: the service asked, the same failure, the same exit code.
    assert.match(current.stderr, /^\[ error \] Redelivery failed: /)
    assert.equal(rest.join('\n'), current.stderr)
    assert.equal(former.stdout, current.stdout)
    assert.equal(former.code, 1)
    assert.equal(current.code, 1)
    assert.notInclude(current.stderr, 'deprecated')

    // With --json, stdout is the JSON alone; the notice stays on stderr.
    const json = await ace(['payouts:deliveries:replay', 'dlv_missing', '--json'])
    assert.match(json.stderr, /^\[ warn \] payouts:deliveries:replay is deprecated/)
    assert.match(JSON.parse(json.stdout).error.failure, /Redelivery failed/)
  })
})
