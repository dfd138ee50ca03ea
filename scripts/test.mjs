/**
 * `npm test`: the whole suite in Japa processes running side by side. Most of the suite's
 * time is waiting (child processes booting, leases expiring, a browser, a database stalled on
 * purpose), so they overlap well even on two cores.
 *
 * The spec files are cut into units (a long file alone, short ones packed together, by the
 * seconds tests/durations.json gives each) and TEST_JOBS processes (default 4) take the
 * longest unit left, one after the other. The files that run the example app
 * (`DEMO_FILES`) wait until the package is built and installed into it, once, which starts
 * first; they then run with SVC_DEMO_INSTALLED=1, each on its own port and database file.
 * Each unit's output is printed whole when it ends, then one summary for the run; the run
 * fails when any unit fails or ends without Japa's summary.
 *
 *   npm test                               every spec file, TEST_JOBS at a time
 *   npm test -- --files=tests/x.spec.ts    one Japa process with these arguments
 *   TEST_JOBS=1 npm test                   one Japa process for the whole suite
 *   TEST_JOBS_MAX=4 npm test               never more than TEST_JOBS at a time
 *
 * Every Node process of the run (Japa's, and the child processes its tests start, hundreds of
 * them) shares V8's compile cache (NODE_COMPILE_CACHE, unless set already): most of a child's
 * boot is compiling the same AdonisJS and Lucid modules, and the cache saves about a tenth of
 * the run's CPU time, which on two cores is its wall time. They run TypeScript with
 * scripts/ts_hooks.mjs (ts-exec's transform in the process's own thread), which boots each in
 * about half the CPU time ts-exec's loader thread takes, and keep their SQLite files in memory
 * where they can (tests/helpers/database.ts, SQLITE_FOLDER). On a slow 2-core machine the run
 * took 6 min 0-9 s before both, 4 min 51 s - 5 min 4 s with the hooks, 4 min 23 s with both.
 * On a faster one, 3 min 7-18 s four at a time and 2 min 54-58 s six at a time (TEST_JOBS=6),
 * its processes using 1.5 and 1.7 of the 2 cores. Six is not the default: on a machine half
 * as fast, six took 6 min 41 s where four took 5 min 28 s, the cores already full.
 *
 * So the count follows the cores instead: TEST_JOBS units always run, and one more starts
 * whenever half a core or more stayed idle over the last 4 s, up to TEST_JOBS_MAX (twice
 * TEST_JOBS). On a machine whose cores are full it stays at four; where units wait, others
 * fill the time. On a fast 2-core machine, from a fresh clone (the example app's install from
 * the registry included): 3 min 33 s four at a time, 2 min 54 s with the extra units (up to 8,
 * 1.7 of the 2 cores). The summary gives the run's CPU seconds, and each unit's line its own.
 *
 * TEST_DB (sqlite, pg, mysql) reaches every process. Nothing a process owns is shared: its
 * SQLite files are named by its pid, its server tables by a random prefix, its scratch folder
 * is tests/tmp-<n>/ (TEST_SHARD).
 *
 * Only for this repository: it is not in the published package.
 */
import { spawn } from 'node:child_process'
import { createWriteStream, globSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { availableParallelism, tmpdir } from 'node:os'
import { join } from 'node:path'

const TS_HOOKS = '--import=./scripts/ts_hooks.mjs'
const JAPA = [TS_HOOKS, '--enable-source-maps', 'bin/test.ts']
/** The spec files that start the example app: they need the package installed into it. */
const DEMO_FILES = [
  'tests/browser/payouts_page.spec.ts',
  'tests/integration/demo_fast_clock.spec.ts',
  'tests/integration/demo_otel.spec.ts',
  'tests/integration/demo_runner.spec.ts',
  'tests/integration/demo_tests.spec.ts',
  'tests/scaleout/scaleout_mysql.spec.ts',
  'tests/scaleout/scaleout_pg.spec.ts',
]
/** A file not in tests/durations.json counts as this many seconds. */
const UNKNOWN_FILE_S = 10
/** Short files are packed into units of about this many seconds. */
const UNIT_S = 15
/** A unit still running after this is stopped, and the run fails. */
const UNIT_LIMIT_MS = Number(process.env.TEST_UNIT_LIMIT_MS ?? 20 * 60_000)

const args = process.argv.slice(2)
process.env.NODE_COMPILE_CACHE ??= join(tmpdir(), 'svc-payouts-compile-cache')
const jobs = Math.max(1, Number(process.env.TEST_JOBS ?? 4) || 1)
/** Units running at most, `jobs` and the extra ones the idle cores take (TEST_JOBS_MAX). */
const maxJobs = Math.max(jobs, Number(process.env.TEST_JOBS_MAX ?? jobs * 2) || jobs)
/** An extra unit starts when this many cores stayed idle over the last EXTRA_EVERY_MS… */
const EXTRA_IDLE_CORES = 0.5
/** …and this long after the last extra one started (its boot shows in the cores' load). */
const EXTRA_EVERY_MS = 4000
const startedAt = Date.now()
const children = new Set()
/** The CPU seconds of the children reaped, at the last `reapedCpuSince()`. */
let reapedCpu = 0

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    for (const child of children) child.kill(signal)
    process.exitCode = 1
  })
}

if (args.length > 0 || jobs === 1) {
  const { code } = await run(JAPA.concat(args), { stdio: 'inherit' })
  process.exitCode = code
} else {
  process.exitCode = await runAll()
}

/** Every spec file, `jobs` processes at a time; prints each unit, then the run. */
async function runAll() {
  const files = globSync('tests/**/*.spec.ts').sort()
  const units = unitsOf(files, durations())
  const folder = mkdtempSync(join(tmpdir(), 'svc-payouts-test-'))
  say(`${files.length} spec files in ${units.length} runs, ${jobs} at a time (TEST_DB=${process.env.TEST_DB ?? 'sqlite'})`)

  // The example app's install runs first, in one of the slots.
  let installed = !units.some((unit) => unit.demo) || process.env.SVC_DEMO_INSTALLED === '1'
  const install = installed ? null : { install: true }
  const results = []
  const waiting = [...units]
  let slot = 0
  const next = () => {
    const index = waiting.findIndex((unit) => installed || !unit.demo)
    return index === -1 ? null : waiting.splice(index, 1)[0]
  }
  const idleCores = idleCoresMeter()
  /** The most units that ran at once. */
  let peak = jobs
  await new Promise((resolve) => {
    let running = 0
    /** When the last unit beyond `jobs` started. */
    let extraAt = 0
    // Beyond `jobs`, one more unit at a time while the cores have stayed partly idle (units
    // waiting on leases, timers, child processes, a browser), up to `maxJobs`.
    const idleSeen = []
    const watch = setInterval(() => {
      // The idle cores of each second, the last EXTRA_EVERY_MS of them averaged.
      idleSeen.push(idleCores())
      if (idleSeen.length > EXTRA_EVERY_MS / 1000) idleSeen.shift()
      if (running < jobs || running >= maxJobs || Date.now() - extraAt < EXTRA_EVERY_MS) return
      if (idleSeen.includes(null) || idleSeen.length < EXTRA_EVERY_MS / 1000) return
      const idle = idleSeen.reduce((sum, cores) => sum + cores, 0) / idleSeen.length
      if (idle < EXTRA_IDLE_CORES) return
      if (fill(running + 1) > 0) {
        extraAt = Date.now()
        peak = Math.max(peak, running)
      }
    }, 1000)
    /** Starts units while fewer than `limit` run; returns how many it started. */
    const fill = (limit = jobs) => {
      let started = 0
      while (running < limit) {
        const unit = install && !install.started ? install : next()
        if (!unit) break
        running++
        started++
        const id = ++slot
        const done = (result) => {
          running--
          results.push(result)
          if (waiting.length === 0 && running === 0) {
            clearInterval(watch)
            resolve()
          } else fill()
        }
        if (unit.install) {
          unit.started = true
          installDemo(folder).then((result) => {
            installed = result.code === 0
            // Without the app installed, its files would only fail: they are reported, not run.
            if (!installed) {
              for (const demo of waiting.filter((u) => u.demo)) {
                waiting.splice(waiting.indexOf(demo), 1)
                results.push({ name: demo.files.join(' '), code: 1, counts: null })
              }
            }
            done(result)
          })
        } else {
          runUnit(unit, id, folder).then(done)
        }
      }
      return started
    }
    fill()
  })
  rmSync(folder, { recursive: true, force: true })

  const total = { passed: 0, failed: 0, skipped: 0, todo: 0 }
  const broken = []
  for (const result of results) {
    if (result.install) {
      if (result.code !== 0) broken.push(`the example app could not be installed (exit code ${result.code})`)
      continue
    }
    if (!result.counts) broken.push(`${result.name}: no Japa summary`)
    else for (const key of Object.keys(total)) total[key] += result.counts[key]
    if (result.code !== 0) broken.push(`${result.name}: exit code ${result.code}`, ...(result.failures ?? []))
  }
  const parts = [`${total.passed} passed`]
  for (const key of ['failed', 'skipped', 'todo']) if (total[key]) parts.push(`${total[key]} ${key}`)
  const all = total.passed + total.failed + total.skipped + total.todo
  const seconds = Math.round((Date.now() - startedAt) / 1000)
  const ok = broken.length === 0 && total.failed === 0
  process.stdout.write(`\n${ok ? ' PASSED ' : ' FAILED '}\n\n`)
  process.stdout.write(`Tests  ${parts.join(', ')} (${all})\n`)
  const extra = peak > jobs ? `, up to ${peak} while cores were idle` : ''
  process.stdout.write(` Time  ${Math.floor(seconds / 60)}m ${seconds % 60}s (${jobs} at a time${extra})\n`)
  const cpu = results.reduce((sum, result) => sum + (result.cpuS ?? 0), 0)
  if (cpu > 0) {
    const cores = `${(cpu / seconds).toFixed(1)} of ${availableParallelism()} cores`
    process.stdout.write(`  CPU  ${Math.round(cpu)} s in the runs' processes (${cores})\n`)
  }
  for (const line of broken) process.stdout.write(`${line}\n`)
  return ok ? 0 : 1
}

/** One unit's Japa process, its output kept in `folder` and printed whole when it ends. */
async function runUnit(unit, id, folder) {
  const name = unit.files.length === 1 ? unit.files[0] : `${unit.files.length} files (${unit.files[0]}, …)`
  const output = join(folder, `unit-${id}.log`)
  const env = {
    ...process.env,
    TEST_SHARD: String(id),
    ...(unit.demo && { SVC_DEMO_INSTALLED: '1' }),
  }
  const { code, signal, cpuS } = await run(
    JAPA.concat(unit.files.map((file) => `--files=${file}`)),
    { output, env }
  )
  const text = readFileSync(output, 'utf8')
  const seconds = Math.round((Date.now() - startedAt) / 1000)
  const cpu = cpuS === null ? '' : `, ${cpuS.toFixed(1)} s of CPU`
  say(`${name}: ${code === 0 ? 'passed' : `failed (${signal ?? `exit code ${code}`})`}, ended at ${seconds} s${cpu}`)
  process.stdout.write(text)
  return { name, code, cpuS, counts: countsOf(text), failures: code === 0 ? [] : failuresOf(text) }
}

/**
 * The failed tests of a unit's output and their errors' first lines, repeated under the run's
 * summary: a log cut to its ends (CI's) still says what failed.
 */
function failuresOf(text) {
  const lines = text.replace(/\x1b\[[0-9;]*m/g, '').split('\n')
  const found = []
  let errors = false
  for (const line of lines) {
    const trimmed = line.trim()
    // Japa's ERRORS section: `❯ Group / test`, then `ℹ AssertionError: message`.
    if (trimmed === 'ERRORS') errors = true
    else if (errors && (/^❯ [^┃]+ \/ /.test(trimmed) || /^ℹ /.test(trimmed))) {
      found.push(`  ${trimmed.slice(0, 400)}`)
    }
    if (found.length === 12) break
  }
  return found
}

/** Builds the package and installs it into examples/demo (scripts/demo_runner.ts), once. */
async function installDemo(folder) {
  const output = join(folder, 'install.log')
  const script = "await (await import('./scripts/demo_runner.ts')).installDemo()"
  const { code, cpuS } = await run(
    [TS_HOOKS, '--input-type=module', '-e', script],
    { output, env: { ...process.env, SVC_DEMO_INSTALLED: '' } }
  )
  const seconds = Math.round((Date.now() - startedAt) / 1000)
  say(`the example app built and installed: ${code === 0 ? 'done' : `failed (exit code ${code})`}, at ${seconds} s`)
  if (code !== 0) process.stdout.write(readFileSync(output, 'utf8'))
  return { install: true, code, cpuS }
}

/** Runs Node with `argv`: inheriting the terminal, or into the file `output`; bounded. */
function run(argv, { stdio, output, env = process.env }) {
  return new Promise((resolve) => {
    const out = output ? createWriteStream(output) : null
    const child = spawn(process.execPath, argv, {
      env,
      stdio: stdio ?? ['ignore', 'pipe', 'pipe'],
    })
    children.add(child)
    if (out) {
      child.stdout.pipe(out, { end: false })
      child.stderr.pipe(out, { end: false })
    }
    const limit = out ? setTimeout(() => child.kill('SIGKILL'), UNIT_LIMIT_MS) : undefined
    let cpuS = null
    child.on('exit', () => (cpuS = reapedCpuSince()))
    child.on('close', (code, signal) => {
      clearTimeout(limit)
      children.delete(child)
      const result = { code: code ?? 1, signal, cpuS }
      if (out) out.end(() => resolve(result))
      else resolve(result)
    })
  })
}

/**
 * The CPU time (user and system, seconds) of the child processes reaped since the last call,
 * with the processes they reaped in turn (Linux's /proc/self/stat); null elsewhere. Read as a
 * unit's process exits, it is that unit's, its apps and workers included.
 */
function reapedCpuSince() {
  try {
    const fields = readFileSync('/proc/self/stat', 'utf8').split(') ')[1].split(' ')
    // cutime and cstime: fields 16 and 17 of the whole line, in clock ticks (100 a second).
    const total = (Number(fields[13]) + Number(fields[14])) / 100
    const since = total - reapedCpu
    reapedCpu = total
    return since
  } catch {
    return null
  }
}

/**
 * A function that returns how many cores were idle, on average, since its last call (idle
 * and waiting for I/O, from /proc/stat); null where there is no /proc/stat.
 */
function idleCoresMeter() {
  const read = () => {
    try {
      const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number)
      return { total: fields.reduce((a, b) => a + b, 0), idle: fields[3] + (fields[4] ?? 0) }
    } catch {
      return null
    }
  }
  let last = read()
  return () => {
    const now = read()
    if (!now || !last || now.total === last.total) return null
    const idle = ((now.idle - last.idle) / (now.total - last.total)) * availableParallelism()
    last = now
    return idle
  }
}

/** Seconds per spec file, measured (tests/durations.json); {} when there is none. */
function durations() {
  try {
    return JSON.parse(readFileSync('tests/durations.json', 'utf8')).files ?? {}
  } catch {
    return {}
  }
}

/**
 * The runs: a file of UNIT_S seconds or more alone, shorter ones packed together up to about
 * UNIT_S (the example app's files apart from the others), longest first.
 */
function unitsOf(files, seconds) {
  const units = []
  for (const demo of [true, false]) {
    const weighed = files
      .filter((file) => DEMO_FILES.includes(file) === demo)
      .map((file) => ({ file, seconds: seconds[file] ?? UNKNOWN_FILE_S }))
      .sort((a, b) => b.seconds - a.seconds || a.file.localeCompare(b.file))
    let pack = null
    for (const { file, seconds: s } of weighed) {
      if (s >= UNIT_S) {
        units.push({ files: [file], seconds: s, demo })
        continue
      }
      if (!pack || pack.seconds + s > UNIT_S) {
        pack = { files: [], seconds: 0, demo }
        units.push(pack)
      }
      pack.files.push(file)
      pack.seconds += s
    }
  }
  return units.sort((a, b) => b.seconds - a.seconds)
}

/** Japa's last summary line of a run (`Tests  3 passed, 1 failed, 2 skipped (6)`). */
function countsOf(text) {
  const plain = text.replace(/\x1b\[[0-9;]*m/g, '')
  const line = plain
    .split('\n')
    .filter((l) => /^\s*Tests\s+\d/.test(l))
    .at(-1)
  if (!line) return null
  const count = (word) => Number(new RegExp(`(\\d+) ${word}`).exec(line)?.[1] ?? 0)
  return { passed: count('passed'), failed: count('failed'), skipped: count('skipped'), todo: count('todo') }
}

function say(line) {
  process.stdout.write(`\n──── ${line}\n`)
}
