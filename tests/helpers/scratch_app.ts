/**
 * A scratch AdonisJS 7 host app in a temporary folder, for the specs that run `node ace` in a
 * real app: the files every app has (package.json, config/app.ts, config/encryption.ts,
 * config/logger.ts), the demo's tsconfig.json and stock `bin/console.ts`, and the package's
 * own node_modules; each spec brings the rest (adonisrc.ts, start/env.ts, its config, ...).
 */
import { copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const REPO = fileURLToPath(new URL('../../', import.meta.url))

/** The files of every AdonisJS 7 app that the specs need, whatever else the app has. */
const COMMON_FILES: Record<string, string> = {
  'package.json': JSON.stringify({
    type: 'module',
    imports: { '#start/*': './start/*.ts', '#config/*': './config/*.ts' },
  }),
  'config/app.ts': `import { defineConfig } from '@adonisjs/core/http'

export const http = defineConfig({})
`,
  'config/encryption.ts': `import env from '#start/env'
import { defineConfig, drivers } from '@adonisjs/core/encryption'

export default defineConfig({
  default: 'gcm',
  list: { gcm: drivers.aes256gcm({ id: 'gcm', keys: [env.get('APP_KEY')] }) },
})
`,
  'config/logger.ts': `import { defineConfig } from '@adonisjs/core/logger'

export default defineConfig({ default: 'app', loggers: { app: { enabled: true, level: 'info' } } })
`,
}

/** An entry point of the demo without its first import, `import '../otel.js'`, and its comment. */
function withoutOtel(entry: string) {
  return entry.replace(
    /^\/\*\*\n \* OpenTelemetry initialization[\s\S]*?\*\/\nimport '\.\.\/otel\.js'\n/,
    ''
  )
}

/**
 * Writes the common files and `files` (path in the app to contents) into a new folder of the
 * system's temporary one, named `svc-payouts-<name>-...`, removed on cleanup; returns it.
 */
export async function scratchApp(
  cleanup: (fn: () => Promise<void>) => void,
  name: string,
  files: Record<string, string>
) {
  const root = await mkdtemp(join(tmpdir(), `svc-payouts-${name}-`))
  cleanup(() => rm(root, { recursive: true, force: true }))
  for (const [path, contents] of Object.entries({ ...COMMON_FILES, ...files })) {
    await mkdir(join(root, path, '..'), { recursive: true })
    await writeFile(join(root, path), contents)
  }
  await mkdir(join(root, 'bin'))
  await copyFile(join(REPO, 'examples/demo/tsconfig.json'), join(root, 'tsconfig.json'))
  // The stock console: `app.listen('SIGTERM', () => app.terminate())`, less the demo's
  // OpenTelemetry (its `import '../otel.js'`): a spec that wants it brings its own.
  const stock = await readFile(join(REPO, 'examples/demo/bin/console.ts'), 'utf8')
  await writeFile(join(root, 'bin/console.ts'), withoutOtel(stock))
  await symlink(join(REPO, 'node_modules'), join(root, 'node_modules'), 'dir')
  return root
}
