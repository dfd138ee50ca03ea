import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { randomBytes } from 'node:crypto'
import { test } from '@japa/runner'
import type { BaseCommand } from '@adonisjs/core/ace'
import { scratchApp } from '../helpers/scratch_app.ts'

/**
 * `node ace` in an app shaped like configure's output (the stock `bin/console.ts`, the plugin's
 * provider, commands and `config/payouts.ts`, Lucid and Transmit), with every module it loads
 * recorded: a command that does not use the service loads none of the plugin's heavy modules.
 */

const REPO = fileURLToPath(new URL('../../', import.meta.url))
const file = (path: string) => pathToFileURL(join(REPO, path)).href

/** What only the service needs: the client and its transport, validation, stream, models. */
const HEAVY = [
  /\/node_modules\/undici\//,
  /\/node_modules\/zod\//,
  /\/node_modules\/ws\//,
  /\/node_modules\/@opentelemetry\//,
  ...[
    'src/contract/endpoints.ts',
    'src/client/(?!errors\\.ts$|redact\\.ts$)',
    'src/emulator/',
    'src/models/',
    'src/service/wiring.ts',
    'src/otel/',
  ].map((path) => new RegExp(`^${file('').replaceAll('.', '\\.')}${path}`)),
]

/** Records every resolved module URL (ESM and CommonJS) into MODULES_FILE. */
const RECORDER = `import { registerHooks } from 'node:module'
import { appendFileSync } from 'node:fs'

registerHooks({
  resolve(specifier, context, next) {
    const resolved = next(specifier, context)
    appendFileSync(process.env.MODULES_FILE, resolved.url + '\\n')
    return resolved
  },
})
`

/** The metadata `adonis-kit index` writes to build/commands/commands.json, from the sources. */
async function commandsIndex() {
  const commands = []
  for (const name of (await readdir(join(REPO, 'commands'))).sort()) {
    if (!name.endsWith('.ts')) continue
    const { default: Command } = (await import(file(`commands/${name}`))) as {
      default: typeof BaseCommand
    }
    commands.push({ ...Command.serialize(), filePath: file(`commands/${name}`) })
  }
  return JSON.stringify({ commands, version: 1 })
}

/** The app's own files: what configure leaves (the rest every AdonisJS 7 app has). */
async function appFiles(): Promise<Record<string, string>> {
  const payoutsConfig = await readFile(join(REPO, 'examples/demo/config/payouts.ts'), 'utf8')
  return {
    'adonisrc.ts': `import { defineConfig } from '@adonisjs/core/app'

export default defineConfig({
  commands: [
    () => import('@adonisjs/core/commands'),
    () => import('@adonisjs/lucid/commands'),
    () => import('./payouts_commands.ts'),
  ],
  providers: [
    () => import('@adonisjs/core/providers/app_provider'),
    () => import('@adonisjs/core/providers/hash_provider'),
    () => import('@adonisjs/lucid/database_provider'),
    () => import('@adonisjs/transmit/transmit_provider'),
    () => import('${file('providers/payouts_provider.ts')}'),
  ],
})
`,
    // What `@svc/adonis-payouts/commands` is in the build: metadata read from a JSON file,
    // a command imported only when it runs.
    'commands.json': await commandsIndex(),
    'payouts_commands.ts': `import { readFile } from 'node:fs/promises'

const { commands } = JSON.parse(await readFile(new URL('./commands.json', import.meta.url), 'utf8'))
export const getMetaData = async () => commands
export async function getCommand(metaData: { commandName: string }) {
  const found = commands.find((command: any) => command.commandName === metaData.commandName)
  return found ? (await import(found.filePath)).default : null
}
`,
    'start/env.ts': `import { Env } from '@adonisjs/core/env'

export default await Env.create(new URL('../', import.meta.url), {
  NODE_ENV: Env.schema.enum(['development', 'production', 'test'] as const),
  APP_KEY: Env.schema.string(),
  PAYOUTS_API_KEY: Env.schema.string.optional(),
  PAYOUTS_BASE_URL: Env.schema.string(),
  PAYOUTS_WEBHOOK_SECRET: Env.schema.string.optional(),
  PAYOUTS_PROCESSING: Env.schema.enum.optional(['inline', 'worker'] as const),
  PAYOUTS_REDIS_URL: Env.schema.string.optional(),
})
`,
    'config/database.ts': `import app from '@adonisjs/core/services/app'
import { defineConfig } from '@adonisjs/lucid'

export default defineConfig({
  connection: 'sqlite',
  connections: {
    sqlite: {
      client: 'better-sqlite3',
      connection: { filename: app.makePath('tmp/db.sqlite') },
      useNullAsDefault: true,
      migrations: { paths: ['database/migrations'] },
    },
  },
})
`,
    'config/transmit.ts': `import { defineConfig } from '@adonisjs/transmit'

export default defineConfig({ pingInterval: false, transport: null })
`,
    'config/payouts.ts': payoutsConfig.replace(`'@svc/adonis-payouts'`, `'${file('index.ts')}'`),
    'database/migrations/.gitkeep': '',
    'tmp/.gitkeep': '',
    'recorder.mjs': RECORDER,
  }
}

/** `node ace ...args` in the app: its exit code, its output and the modules it loaded. */
async function ace(root: string, args: string[]) {
  const modulesFile = join(root, `modules-${randomBytes(4).toString('hex')}.txt`)
  await writeFile(modulesFile, '')
  const child = spawn(
    process.execPath,
    ['--import=@poppinss/ts-exec', '--import=./recorder.mjs', 'bin/console.ts', ...args],
    {
      cwd: root,
      env: {
        ...process.env,
        NODE_ENV: 'development',
        APP_KEY: randomBytes(32).toString('base64url'),
        PAYOUTS_BASE_URL: 'http://127.0.0.1:4010',
        MODULES_FILE: modulesFile,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    }
  )
  let output = ''
  for (const stream of [child.stdout!, child.stderr!]) {
    stream.setEncoding('utf8')
    stream.on('data', (chunk) => (output += chunk))
  }
  const [code] = await once(child, 'exit')
  const modules = new Set((await readFile(modulesFile, 'utf8')).split('\n').filter(Boolean))
  const heavy = [
    ...new Set(
      [...modules]
        .filter((url) => HEAVY.some((pattern) => pattern.test(url)))
        .map((url) => url.replace(/^.*\/node_modules\/([^/]+)\/.*$/, '$1').replace(file(''), ''))
    ),
  ]
  return { code: code as number | null, output, modules, heavy }
}

test.group('Lazy loading | node ace in a host app', () => {
  test('commands that do not use the service load no client, validator, stream or model', async ({
    assert,
    cleanup,
  }) => {
    const root = await scratchApp(cleanup, 'lazy', await appFiles())
    const runs: Array<[string[], RegExp]> = [
      [['list'], /payouts:status/],
      [['--help'], /View list of available commands/],
      [['make:controller', 'widgets'], /controllers\/widgets_controller\.ts/],
      // Boots the app (providers, config/payouts.ts) without resolving the service.
      [['migration:status'], /Status|migrat/i],
    ]
    for (const [args, shows] of runs) {
      const run = await ace(root, args)
      assert.equal(run.code, 0, `node ace ${args.join(' ')}: ${run.output}`)
      assert.match(run.output, shows)
      assert.isAbove(run.modules.size, 50, 'the recorder saw the modules')
      assert.deepEqual(run.heavy, [], `node ace ${args.join(' ')} loaded heavy modules`)
    }
  }).timeout(120_000)

  test('node ace payouts:status --help still describes the command', async ({
    assert,
    cleanup,
  }) => {
    const root = await scratchApp(cleanup, 'lazy', await appFiles())
    const run = await ace(root, ['payouts:status', '--help'])
    assert.equal(run.code, 0, run.output)
    assert.match(run.output, /payouts:status/)
    assert.match(run.output, /--json/)
    assert.match(run.output, /Service reachability/)
  }).timeout(60_000)
})
