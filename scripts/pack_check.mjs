/**
 * Checks the package as an app receives it: `npm pack`, then install the tarball into a fresh
 * AdonisJS 7 app in a temp folder, type-check a file that imports every path of the `exports`
 * map with `skipLibCheck: false`, and import each path at runtime.
 *
 *   npm run build && npm run pack:check      (CI runs it after the build)
 *
 * The app depends on the tarball, the required peer (`@adonisjs/core`), every optional peer
 * (the check imports every path, and some paths need them: `./models` Lucid and luxon,
 * `./otel` the OpenTelemetry instrumentation) and what an AdonisJS 7 app has for TypeScript.
 * Versions come from this package's devDependencies, so `--prefer-offline` finds them in the
 * npm cache. PACK_CHECK_KEEP=1 keeps the temp folder; it is kept anyway when the check fails.
 *
 * Only for this repository's CI: it is not in the published package.
 */
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const root = new URL('..', import.meta.url).pathname
const started = Date.now()
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'))
const work = mkdtempSync(join(tmpdir(), 'payouts-pack-'))

const elapsed = () => `${((Date.now() - started) / 1000).toFixed(1)}s`
const step = (line) => console.log(`pack:check [${elapsed()}] ${line}`)
function fail(lines) {
  console.error(`\npack:check FAILED: ${lines[0]}`)
  for (const line of lines.slice(1)) console.error(`  ${line}`)
  console.error(`  (temp folder kept: ${work})`)
  process.exit(1)
}
function run(cmd, args, cwd) {
  const result = spawnSync(cmd, args, { cwd, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })
  if (result.error) fail([`${cmd} ${args.join(' ')} did not start: ${result.error.message}`])
  return result
}

if (!existsSync(join(root, 'build/index.js'))) {
  fail(['build/ is missing: run `npm run build` first'])
}

// --- 1. The tarball and what it holds ----------------------------------------------------
const packed = run('npm', ['pack', '--json', '--pack-destination', work], root)
if (packed.status !== 0) fail(['npm pack failed', ...packed.stderr.trim().split('\n')])
const [{ filename, files: packedFiles }] = JSON.parse(packed.stdout)
const shipped = new Set(packedFiles.map((file) => file.path))
const tarball = join(work, filename)
step(`packed ${filename} (${shipped.size} files)`)

const problems = []
const specifiers = []
for (const [key, target] of Object.entries(pkg.exports)) {
  const specifier = key === '.' ? pkg.name : `${pkg.name}/${key.slice(2)}`
  if (!target.startsWith('./')) {
    problems.push(`exports["${key}"] is not a path starting with ./: ${target}`)
    continue
  }
  const targetPath = target.slice(2)
  if (key.includes('*')) {
    const [before, after] = targetPath.split('*')
    const matches = [...shipped].filter(
      (file) =>
        file.startsWith(before) && file.endsWith(after) && !file.slice(before.length).includes('/')
    )
    if (matches.length === 0) problems.push(`exports["${key}"] matches no shipped file (${target})`)
    for (const file of matches) {
      const name = file.slice(before.length, file.length - after.length)
      if (name === 'main') continue // that is `./commands`, checked as its own entry
      specifiers.push(specifier.replace('*', name))
      if (!shipped.has(file.replace(/\.js$/, '.d.ts'))) problems.push(`${file} ships without .d.ts`)
    }
    continue
  }
  specifiers.push(specifier)
  if (!shipped.has(targetPath)) problems.push(`exports["${key}"] -> ${target}: not in the tarball`)
  else if (!shipped.has(targetPath.replace(/\.js$/, '.d.ts')))
    problems.push(`exports["${key}"] -> ${target}: its .d.ts is not in the tarball`)
}
for (const [name, target] of Object.entries(pkg.bin ?? {})) {
  if (!shipped.has(target.replace(/^\.\//, '')))
    problems.push(`bin "${name}" -> ${target}: not in the tarball`)
}
for (const file of shipped) {
  if (/^(CONTRIBUTING\.md|build\/(tests|bin|scripts|bench)\/|tests\/|scripts\/)/.test(file)) {
    problems.push(`${file} ships, but it is for contributors only`)
  }
}
if (problems.length) fail(['the tarball does not match package.json', ...problems])
step(`exports: ${specifiers.length} import paths, every target shipped with its types`)

// --- 2. A fresh AdonisJS 7 app with the tarball installed ----------------------------------
const app = join(work, 'app')
mkdirSync(app)
const dev = pkg.devDependencies
const version = (name) => dev[name] ?? pkg.peerDependencies[name]
const appDependencies = {
  [pkg.name]: `file:${tarball}`,
  ...Object.fromEntries(Object.keys(pkg.peerDependencies).map((name) => [name, version(name)])),
  'better-sqlite3': version('better-sqlite3'),
}
const appDevDependencies = Object.fromEntries(
  ['typescript', '@adonisjs/tsconfig', '@types/node', '@types/luxon'].map((name) => [
    name,
    version(name),
  ])
)
writeFileSync(
  join(app, 'package.json'),
  JSON.stringify(
    {
      name: 'pack-check-app',
      private: true,
      type: 'module',
      dependencies: appDependencies,
      devDependencies: appDevDependencies,
    },
    null,
    2
  )
)
const install = run(
  'npm',
  ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'],
  app
)
if (install.status !== 0) {
  fail(['npm install of the tarball into the app failed', ...install.stderr.trim().split('\n')])
}
step(`installed into ${app}`)

// --- 3. Type-check every import path with skipLibCheck: false -----------------------------
const modules = specifiers.map((specifier, index) => ({ specifier, id: `entry${index}` }))
const commandsEntry = modules.find((entry) => entry.specifier === `${pkg.name}/commands`)
writeFileSync(
  join(app, 'check.ts'),
  [
    ...modules.map(({ specifier, id }) => `import * as ${id} from '${specifier}'`),
    `import type { Kernel } from '@adonisjs/core/ace'`,
    '',
    `export const entries = [${modules.map(({ id }) => id).join(', ')}]`,
    ...(commandsEntry
      ? [
          '',
          '// The commands index is a loader the app kernel accepts (adonisrc `commands`).',
          `export function register(kernel: Kernel) {`,
          `  kernel.addLoader(${commandsEntry.id})`,
          `}`,
        ]
      : []),
    '',
  ].join('\n')
)
writeFileSync(
  join(app, 'tsconfig.json'),
  JSON.stringify(
    {
      extends: '@adonisjs/tsconfig/tsconfig.app.json',
      compilerOptions: { rootDir: './', noEmit: true, skipLibCheck: false },
      include: ['check.ts'],
    },
    null,
    2
  )
)
const tsc = run(
  join(app, 'node_modules/.bin/tsc'),
  ['-p', 'tsconfig.json', '--pretty', 'false'],
  app
)
const errors = tsc.stdout.split('\n').filter((line) => /error TS\d+/.test(line))
// Errors in other packages' .d.ts files (ace's untyped yargs-parser, core's optional VineJS,
// @verrou/core's optional kysely and DynamoDB drivers...) are theirs and show with
// skipLibCheck: false whatever we ship: counted, not failed on. Ours, and check.ts, fail.
const ownPrefix = `node_modules/${pkg.name}/`
const own = errors.filter((line) => line.startsWith(ownPrefix) || line.startsWith('check.ts'))
if (own.length || (tsc.status !== 0 && errors.length === 0)) {
  fail([
    `tsc found ${own.length} type error(s) in the installed package (skipLibCheck: false)`,
    ...(own.length ? own : tsc.stdout.trim().split('\n')),
  ])
}
step(
  `tsc (skipLibCheck: false): ${specifiers.length} import paths type-check` +
    (errors.length ? ` (${errors.length} errors in other packages' .d.ts files ignored)` : '')
)

// --- 4. Import every path at runtime --------------------------------------------------------
// `services/main` waits for a booted app (`app.booted`): importing it alone throws by design.
const runtime = specifiers.filter((specifier) => specifier !== `${pkg.name}/services/main`)
const probe = run(
  process.execPath,
  [
    '--input-type=module',
    '-e',
    `const failures = []
for (const specifier of ${JSON.stringify(runtime)}) {
  try { await import(specifier) } catch (error) { failures.push(specifier + ': ' + error.message.split('\\n')[0]) }
}
if (failures.length) { console.log(failures.join('\\n')); process.exit(1) }`,
  ],
  app
)
if (probe.status !== 0) {
  fail(['some import paths fail at runtime', ...(probe.stdout + probe.stderr).trim().split('\n')])
}
step(`node: ${runtime.length} import paths load (services/main needs a booted app)`)

if (!process.env.PACK_CHECK_KEEP) rmSync(work, { recursive: true, force: true })
step('OK')
