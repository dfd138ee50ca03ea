import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { createInterface } from 'node:readline'
import { mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { PayoutsEmulator, type ClockOptions } from '../src/emulator/main.ts'

const ROOT = fileURLToPath(new URL('../', import.meta.url))
export const DEMO_ROOT = fileURLToPath(new URL('../examples/demo/', import.meta.url))

type Log = (line: string) => void
const print: Log = (line) => console.log(line)

function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env) {
  const result = spawnSync(command, args, { cwd, stdio: ['ignore', 'inherit', 'inherit'], env })
  if (result.status !== 0) throw new Error(`${command} ${args.join(' ')} failed in ${cwd}`)
}

/**
 * Env every demo process gets; `extra` wins. A fresh APP_KEY unless one is given. Inline
 * processing unless told: a `.env` left by `npm run demo` (worker mode) must not decide it.
 * No OTEL_EXPORTER_PROMETHEUS_PORT: only the worker serves its metrics on a port of its own.
 */
export function demoEnv(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    NODE_ENV: 'development',
    HOST: '127.0.0.1',
    PORT: '3333',
    LOG_LEVEL: 'warn',
    APP_KEY: randomBytes(32).toString('base64url'),
    PAYOUTS_PROCESSING: 'inline',
  }
  delete env.OTEL_EXPORTER_PROMETHEUS_PORT
  for (const [key, value] of Object.entries(extra)) {
    if (value === undefined) delete env[key]
    else env[key] = value
  }
  return env
}

/**
 * `node ace <args>` in the example app. Asynchronous: the emulator may live in this
 * process, and a blocked event loop could not answer the command.
 */
export async function demoAce(args: string[], env: NodeJS.ProcessEnv) {
  const child = spawn(process.execPath, ['--import=@poppinss/ts-exec', 'bin/console.ts', ...args], {
    cwd: DEMO_ROOT,
    stdio: ['ignore', 'inherit', 'inherit'],
    env,
  })
  const [code] = await once(child, 'exit')
  if (code !== 0) throw new Error(`node ace ${args.join(' ')} failed (exit ${code})`)
}

let installed: Promise<void> | undefined

/**
 * Builds the package and installs it into examples/demo as a copy (install-links: a
 * symlink would give the app two copies of @adonisjs/core). Once per process; not at all
 * with SVC_DEMO_INSTALLED=1.
 */
export function installDemo(log: Log = print): Promise<void> {
  // `npm test` (scripts/test.mjs) installed it before starting the files that need it.
  if (process.env.SVC_DEMO_INSTALLED === '1') return Promise.resolve()
  installed ??= Promise.resolve().then(() => {
    log('Building @svc/adonis-payouts…')
    run('npm', ['run', 'build', '--silent'], ROOT)
    log('Installing it into examples/demo…')
    rmSync(`${DEMO_ROOT}node_modules/@svc`, { recursive: true, force: true })
    run('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error'], DEMO_ROOT)
  })
  return installed
}

/**
 * A TCP port free on 127.0.0.1 right now, for a demo app beside others: `preferred` when it
 * is free, else any.
 */
export function freePort(preferred = 0): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(preferred, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
    server.on('error', (error) => (preferred ? freePort().then(resolve, reject) : reject(error)))
  })
}

/** A demo process started by this one: stopping it, and its exit. */
export interface DemoProcess {
  child: ChildProcess
  /** SIGINT (the process stops cleanly), then SIGKILL after 5 s; resolves once it exited. */
  stop(): Promise<void>
}

export interface DemoApp extends DemoProcess {
  url: string
}

/** Preload that stops the app when its parent dies, however it dies. */
export const EXIT_WITH_PARENT = new URL('./exit_with_parent.ts', import.meta.url).href

/**
 * Spawns `script args` in examples/demo, linked to this process: the IPC channel is how
 * the child learns that this process died (exit_with_parent.ts).
 */
function spawnDemoProcess(
  script: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  output: 'inherit' | 'ignore' | 'pipe'
): DemoProcess {
  const child = spawn(
    process.execPath,
    ['--import=@poppinss/ts-exec', `--import=${EXIT_WITH_PARENT}`, script, ...args],
    { cwd: DEMO_ROOT, stdio: ['ignore', output, output, 'ipc'], env }
  )
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return
    const exited = new Promise((resolve) => child.once('exit', resolve))
    child.kill('SIGINT')
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000)
    await exited
    clearTimeout(timer)
  }
  return { child, stop }
}

/**
 * Starts `examples/demo/bin/server.ts` with `env` (see demoEnv) on `port` and resolves once
 * it answers. `stop()` sends SIGINT (the app terminates cleanly), then SIGKILL after 5 s.
 */
export async function startDemoApp(options: {
  port: number
  env: NodeJS.ProcessEnv
  output?: 'inherit' | 'ignore' | 'pipe'
}): Promise<DemoApp> {
  const { child, stop } = spawnDemoProcess(
    'bin/server.ts',
    [],
    { ...options.env, PORT: String(options.port) },
    options.output ?? 'inherit'
  )
  const url = `http://127.0.0.1:${options.port}`
  const started = Date.now()
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the demo app on port ${options.port} exited`)
    try {
      const response = await fetch(`${url}/api/payouts`)
      if (response.ok) break
    } catch {}
    if (Date.now() - started > 60_000) {
      await stop()
      throw new Error(`the demo app on port ${options.port} did not answer within 60 s`)
    }
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  return { url, child, stop }
}

/**
 * Starts `node ace payouts:work` in examples/demo with `env`: the worker that processes what
 * an app in `PAYOUTS_PROCESSING=worker` mode stores. It reads an empty inbox every
 * `pollIntervalMs`. With `metricsPort`, it serves its Prometheus metrics there
 * (`OTEL_EXPORTER_PROMETHEUS_PORT`, read by config/otel.ts). `stop()` as for the app
 * (SIGINT: the worker finishes its batch).
 */
export function startDemoWorker(options: {
  env: NodeJS.ProcessEnv
  pollIntervalMs?: number
  metricsPort?: number
  output?: 'inherit' | 'ignore' | 'pipe'
}): DemoProcess {
  const poll = `--poll-interval-ms=${options.pollIntervalMs ?? 250}`
  const env = options.metricsPort
    ? { ...options.env, OTEL_EXPORTER_PROMETHEUS_PORT: String(options.metricsPort) }
    : options.env
  return spawnDemoProcess(
    'bin/console.ts',
    ['payouts:work', poll],
    env,
    options.output ?? 'inherit'
  )
}

/** Resolves once `url` answers 200, or fails when `child` exits or 60 s pass. */
async function answering(url: string, child: ChildProcess, what: string) {
  const started = Date.now()
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`${what} exited`)
    try {
      const response = await fetch(url)
      await response.arrayBuffer()
      if (response.ok) return
    } catch {}
    if (Date.now() - started > 60_000) throw new Error(`${what} did not answer ${url} within 60 s`)
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
}

export interface DemoOptions {
  port?: number
  emulatorPort?: number
  /** Where the worker serves its Prometheus metrics (a free port unless told). */
  workerMetricsPort?: number
  /** Emulated time between lifecycle steps. */
  stepIntervalMs?: number
  /** The emulator's clock (real time unless told, e.g. `{ mode: 'scaled', scale: 60 }`). */
  clock?: ClockOptions
  /** Skip the package build and the demo's npm install (already done). */
  skipInstall?: boolean
  /** Write examples/demo/.env so `node ace` works there by hand afterwards. */
  writeEnvFile?: boolean
  output?: 'inherit' | 'ignore'
  log?: Log
  /**
   * Receives each line the worker prints, at LOG_LEVEL info (pino JSON, e.g. its
   * "payouts worker batch" lines); without it the worker's output follows `output`.
   */
  workerLog?: Log
  /** A test's demo: its SQLite file and span folder are removed once it stopped. */
  removeOnStop?: boolean
}

export interface RunningDemo {
  url: string
  /** Prometheus text of the web process (`GET /metrics` of the app). */
  metricsUrl: string
  /** Prometheus text of the worker, on a port of its own. */
  workerMetricsUrl: string
  emulator: PayoutsEmulator
  /** The web process (`PAYOUTS_PROCESSING=worker`: it stores deliveries, processes none). */
  app: DemoApp
  /** The `node ace payouts:work` process that processes them. */
  worker: DemoProcess
  /**
   * Stops the web process and starts a new one on the same port and database (what a deploy
   * does to open connections: the page's live stream drops and must come back).
   */
  restartApp(): Promise<void>
  /** Stops the app and the worker, then the emulator; a second call waits for the first. */
  stop(): Promise<void>
}

/**
 * The whole demo: builds and installs the package, starts the emulator, migrates a fresh
 * SQLite file, starts the app and a worker beside it (the app in worker mode; each exports
 * its metrics to Prometheus and its spans to tmp/spans-<port>/, emptied here), subscribes
 * its webhook, and returns its URLs.
 */
export async function startDemo(options: DemoOptions = {}): Promise<RunningDemo> {
  const log = options.log ?? print
  if (!options.skipInstall) await installDemo(log)
  const emulator = await PayoutsEmulator.start({
    port: options.emulatorPort ?? 0,
    clock: options.clock,
    stepIntervalMs: options.stepIntervalMs ?? 1500,
    escrowDetectionDelayMs: 3000,
    // The demo app receives its webhooks on this machine.
    allowInsecureWebhooks: true,
  })
  const port = options.port ?? 3333
  mkdirSync(`${DEMO_ROOT}tmp`, { recursive: true })
  const dbFile = `tmp/demo-${port}.sqlite`
  const removeFiles = () => {
    for (const suffix of ['', '-wal', '-shm'])
      rmSync(`${DEMO_ROOT}${dbFile}${suffix}`, { force: true })
    rmSync(`${DEMO_ROOT}tmp/spans-${port}`, { recursive: true, force: true })
  }
  removeFiles()
  const env = demoEnv({
    PORT: String(port),
    DB_FILE: dbFile,
    PAYOUTS_API_KEY: emulator.apiKey,
    PAYOUTS_BASE_URL: emulator.baseUrl,
    PAYOUTS_PROCESSING: 'worker',
  })
  if (options.writeEnvFile) {
    const keys = ['NODE_ENV', 'PORT', 'HOST', 'APP_KEY', 'LOG_LEVEL', 'DB_FILE']
    const payouts = ['PAYOUTS_API_KEY', 'PAYOUTS_BASE_URL', 'PAYOUTS_PROCESSING']
    const lines = [...keys, ...payouts].map((k) => `${k}=${env[k]}`)
    writeFileSync(`${DEMO_ROOT}.env`, lines.join('\n') + '\n')
  }
  try {
    log('Migrating…')
    await demoAce(['migration:run', '--force'], env)
    log('Starting the app and the worker…')
    const metricsPort = options.workerMetricsPort ?? (await freePort())
    const workerMetricsUrl = `http://127.0.0.1:${metricsPort}/metrics`
    const worker = startWorker(env, metricsPort, options)
    const app = await startDemoApp({ port, env, output: options.output }).catch(async (error) => {
      await worker.stop()
      throw error
    })
    try {
      await answering(workerMetricsUrl, worker.child, 'the demo worker')
      log('Subscribing the webhook…')
      await demoAce(['payouts:webhooks:create', `--url=${app.url}/webhooks/payouts`], env)
    } catch (error) {
      await Promise.all([app.stop(), worker.stop()])
      throw error
    }
    let stopped: Promise<void> | undefined
    const running: RunningDemo = {
      url: app.url,
      metricsUrl: `${app.url}/metrics`,
      workerMetricsUrl,
      emulator,
      app,
      worker,
      async restartApp() {
        await running.app.stop()
        running.app = await startDemoApp({ port, env, output: options.output })
      },
      stop() {
        stopped ??= Promise.all([running.app.stop(), worker.stop()])
          .then(() => emulator.close())
          .then(() => {
            if (options.removeOnStop) removeFiles()
          })
        return stopped
      },
    }
    return running
  } catch (error) {
    await emulator.close()
    throw error
  }
}

/** The demo's worker; its lines go to `options.workerLog` when given. */
function startWorker(env: NodeJS.ProcessEnv, metricsPort: number, options: DemoOptions) {
  const workerLog = options.workerLog
  if (!workerLog) return startDemoWorker({ env, metricsPort, output: options.output })
  const worker = startDemoWorker({
    env: { ...env, LOG_LEVEL: 'info' },
    metricsPort,
    output: 'pipe',
  })
  for (const stream of [worker.child.stdout!, worker.child.stderr!]) {
    createInterface({ input: stream }).on('line', workerLog)
  }
  return worker
}
