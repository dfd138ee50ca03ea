/**
 * A host app that uses `@adonisjs/otel` as docs/observability.md tells a user to, in a scratch
 * folder (tests/helpers/scratch_app.ts), run as real child processes (`node bin/server.ts`,
 * `node bin/console.ts payouts:work`): what `node ace add @adonisjs/otel` sets up (`otel.ts`
 * at the root imported first by the stock `bin/server.ts` and `bin/console.ts`,
 * `config/otel.ts`, the provider, the router middleware, the env variables), with the plugin's
 * `PayoutsInstrumentation` in `instrumentations` and an OTLP destination; the plugin as
 * configure leaves it (provider, commands, `config/payouts.ts` reading the `PAYOUTS_*`
 * variables, `start/payouts.ts`) and one route of the app's own that executes a payout.
 * Also: a recording forwarder (what crossed the wire, headers and bodies), free ports, waits.
 */
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { readFile, writeFile } from 'node:fs/promises'
import { createServer, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { request } from 'undici'
import { scratchApp } from '../helpers/scratch_app.ts'

type Cleanup = (fn: () => Promise<void>) => void

const REPO = fileURLToPath(new URL('../../', import.meta.url))
/** The package from its sources (the scratch app has no `node_modules/@svc/adonis-payouts`). */
const file = (path: string) => pathToFileURL(join(REPO, path)).href

/** The route of the app's own that executes a payout: a template with the recipient's id. */
export const EXECUTE_ROUTE = '/recipients/:recipientId/payouts'

/** The app's files besides those every app has (scratch_app.ts) and the `bin/` entry points. */
async function appFiles(): Promise<Record<string, string>> {
  return {
    'adonisrc.ts': `import { defineConfig } from '@adonisjs/core/app'

export default defineConfig({
  commands: [() => import('./payouts_commands.ts')],
  providers: [
    () => import('@adonisjs/core/providers/app_provider'),
    () => import('@adonisjs/lucid/database_provider'),
    () => import('${file('providers/payouts_provider.ts')}'),
    () => import('@adonisjs/otel/otel_provider'),
  ],
  preloads: [() => import('#start/routes'), () => import('#start/kernel'), () => import('#start/payouts')],
})
`,
    // What `@svc/adonis-payouts/commands` gives, from the sources.
    'payouts_commands.ts': `import { ListLoader } from '@adonisjs/core/ace'
import PayoutsWork from '${file('commands/payouts_work.ts')}'

const loader = new ListLoader([PayoutsWork])
export const getMetaData = () => loader.getMetaData()
export const getCommand = (metaData: any) => loader.getCommand(metaData)
`,
    // @adonisjs/otel's stubs/otel.stub, as published.
    'otel.ts': `/**
 * OpenTelemetry initialization file.
 *
 * IMPORTANT: This file must be imported FIRST in bin/server.ts
 * for auto-instrumentation to work correctly.
 */
import { init } from '@adonisjs/otel/init'

await init(import.meta.dirname)
`,
    // docs/observability.md's config/otel.ts, with the collector as an OTLP destination.
    'config/otel.ts': `import { defineConfig, destinations } from '@adonisjs/otel'
import { PayoutsInstrumentation } from '${file('src/otel/main.ts')}'
import env from '#start/env'

export default defineConfig({
  serviceName: env.get('APP_NAME'),
  serviceVersion: env.get('APP_VERSION'),
  environment: env.get('APP_ENV'),
  destinations: {
    collector: destinations.otlp({ endpoint: env.get('OTEL_COLLECTOR_URL') }),
  },
  instrumentations: {
    '@svc/adonis-payouts': new PayoutsInstrumentation(),
  },
})
`,
    'start/env.ts': `import { Env } from '@adonisjs/core/env'

export default await Env.create(new URL('../', import.meta.url), {
  NODE_ENV: Env.schema.enum(['development', 'production', 'test'] as const),
  PORT: Env.schema.number(),
  HOST: Env.schema.string({ format: 'host' }),
  APP_KEY: Env.schema.string(),
  APP_NAME: Env.schema.string(),
  APP_VERSION: Env.schema.string(),
  APP_ENV: Env.schema.enum(['development', 'staging', 'production'] as const),
  OTEL_COLLECTOR_URL: Env.schema.string({ format: 'url', tld: false }),
  PAYOUTS_API_KEY: Env.schema.string.optional(),
  PAYOUTS_BASE_URL: Env.schema.string({ format: 'url', tld: false }),
  PAYOUTS_WEBHOOK_SECRET: Env.schema.string.optional(),
  PAYOUTS_PROCESSING: Env.schema.enum.optional(['inline', 'worker'] as const),
  PAYOUTS_TABLE_PREFIX: Env.schema.string(),
  DB_CONNECTION_JSON: Env.schema.string(),
})
`,
    // The stock kernel; \`node ace add @adonisjs/otel\` puts its middleware first.
    'start/kernel.ts': `import router from '@adonisjs/core/services/router'
import server from '@adonisjs/core/services/server'

server.use([])
router.use([
  () => import('@adonisjs/otel/otel_middleware'),
  () => import('@adonisjs/core/bodyparser_middleware'),
])

export const middleware = router.named({})
`,
    'start/routes.ts': `import router from '@adonisjs/core/services/router'
import payouts from '${file('services/main.ts')}'

router.post('${EXECUTE_ROUTE}', async ({ params, request }) => {
  const { payout } = await payouts.execute(
    {
      ...request.only(['fromCurrency', 'toCurrency', 'amount', 'userPaymentMethodId']),
      recipientId: params.recipientId,
    } as any,
    { idempotencyKey: request.header('idempotency-key') }
  )
  return { payoutId: payout.payoutUuid, status: payout.status }
})
`,
    // configure's start/payouts.ts, without Transmit.
    'start/payouts.ts': `import router from '@adonisjs/core/services/router'
import payouts from '${file('services/main.ts')}'

await payouts.registerRoutes(router)
`,
    'config/bodyparser.ts': await readFile(
      join(REPO, 'examples/demo/config/bodyparser.ts'),
      'utf8'
    ),
    'config/database.ts': `import { defineConfig } from '@adonisjs/lucid'
import env from '#start/env'

export default defineConfig({
  connection: 'main',
  connections: { main: JSON.parse(env.get('DB_CONNECTION_JSON')) },
})
`,
    // configure's config/payouts.ts; the jobs off (this app runs one payout, no cron).
    'config/payouts.ts': `import app from '@adonisjs/core/services/app'
import env from '#start/env'
import { defineConfig } from '${file('index.ts')}'

export default defineConfig({
  apiKey: env.get('PAYOUTS_API_KEY'),
  baseUrl: env.get('PAYOUTS_BASE_URL'),
  allowInsecureLoopbackWebhooks: !app.inProduction,
  webhook: {
    path: '/webhooks/payouts',
    secret: env.get('PAYOUTS_WEBHOOK_SECRET'),
    processing: env.get('PAYOUTS_PROCESSING', 'inline'),
  },
  jobs: { enabled: false },
  ledger: { enabled: true, tablePrefix: env.get('PAYOUTS_TABLE_PREFIX') },
})
`,
  }
}

/** What `node ace add @adonisjs/otel` inserts before the first import of `bin/server.ts`. */
const OTEL_IMPORT = `/**
 * OpenTelemetry initialization - MUST be the first import
 * @see https://opentelemetry.io/docs/languages/js/getting-started/nodejs/
 */
import '../otel.js'
`

/**
 * The scratch app; its `bin/server.ts` and `bin/console.ts` are the demo's stock ones with
 * `import '../otel.js'` before their first import, as `node ace add @adonisjs/otel` puts it
 * in the server's (and docs/observability.md asks for the console's); kept as they are if
 * the demo's have it already.
 */
export async function otelHostApp(cleanup: Cleanup) {
  const root = await scratchApp(cleanup, 'otel', await appFiles())
  for (const entry of ['server', 'console']) {
    const stock = await readFile(join(REPO, `examples/demo/bin/${entry}.ts`), 'utf8')
    const first = stock.indexOf('import ')
    const withOtel = stock.includes("import '../otel.js'")
      ? stock
      : `${stock.slice(0, first)}${OTEL_IMPORT}${stock.slice(first)}`
    await writeFile(join(root, `bin/${entry}.ts`), withOtel)
  }
  return root
}

/** The environment of the app's processes, besides the parent's own (minus its `OTEL_*`). */
export interface AppEnv {
  PORT: number
  OTEL_COLLECTOR_URL: string
  PAYOUTS_API_KEY: string
  PAYOUTS_BASE_URL: string
  PAYOUTS_WEBHOOK_SECRET: string
  PAYOUTS_PROCESSING: 'inline' | 'worker'
  PAYOUTS_TABLE_PREFIX: string
  DB_CONNECTION_JSON: string
}

/** A process of the app: its output so far, how it ended, and how to stop it. */
export interface AppProcess {
  pid: number
  output(): string
  exited: Promise<number | null>
  /** Sends `signal`; resolves the exit code, or throws with the output past `withinMs`. */
  stop(signal?: NodeJS.Signals, withinMs?: number): Promise<number | null>
}

/**
 * `node --import=@poppinss/ts-exec bin/<entry>.ts ...args` in the app (what `node ace serve`
 * and `node ace <command>` run), in development: `@adonisjs/otel` is off when NODE_ENV is
 * `test`. Killed in the test's cleanup if still running. Resolves once `ready` is in its output.
 */
export async function startAppProcess(
  cleanup: Cleanup,
  root: string,
  args: string[],
  env: AppEnv,
  ready: RegExp,
  timeoutMs = 30_000
): Promise<AppProcess> {
  const inherited = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.startsWith('OTEL_'))
  )
  const child = spawn(process.execPath, ['--import=@poppinss/ts-exec', ...args], {
    cwd: root,
    env: {
      ...inherited,
      NODE_ENV: 'development',
      HOST: '127.0.0.1',
      APP_KEY: randomBytes(32).toString('base64url'),
      APP_NAME: 'otel-host-app',
      APP_VERSION: '1.0.0',
      APP_ENV: 'development',
      ...Object.fromEntries(Object.entries(env).map(([name, value]) => [name, String(value)])),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  for (const stream of [child.stdout!, child.stderr!]) {
    stream.setEncoding('utf8')
    stream.on('data', (chunk) => (output += chunk))
  }
  const exited = once(child, 'exit').then(([code]) => code as number | null)
  const running = () => child.exitCode === null && child.signalCode === null
  cleanup(async () => {
    if (running()) child.kill('SIGKILL')
    await exited
  })
  const what = `${args.join(' ')} (pid ${child.pid})`
  await waitFor(
    `${what} ready`,
    () => {
      if (!running()) throw new Error(`${what} exited early:\n${output}`)
      return ready.test(output)
    },
    timeoutMs
  ).catch((error) => {
    throw new Error(`${error.message}; its output:\n${output}`)
  })
  return {
    pid: child.pid!,
    output: () => output,
    exited,
    async stop(signal = 'SIGTERM', withinMs = 15_000) {
      if (running()) child.kill(signal)
      let timer: NodeJS.Timeout | undefined
      const late = new Promise<'late'>((resolve) => {
        timer = setTimeout(() => resolve('late'), withinMs)
      })
      const code = await Promise.race([exited, late]).finally(() => clearTimeout(timer))
      if (code === 'late') throw new Error(`${what} still running ${withinMs} ms after ${signal}`)
      return code
    },
  }
}

/** One request that crossed a forwarder, and its answer. */
export interface Exchange {
  method: string
  path: string
  headers: IncomingHttpHeaders
  body: string
  status: number
  responseBody: string
}

/**
 * A forwarder on 127.0.0.1 in front of `target` that keeps every exchange, headers and
 * bodies both ways: what the app sent the service (its key, Idempotency-Keys, bodies), what
 * the service delivered to the app (signatures, event bodies). A target not listening yet is
 * answered 502.
 */
export async function startTap(cleanup: Cleanup, target: string) {
  const exchanges: Exchange[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', async () => {
      const body = Buffer.concat(chunks)
      const headers = { ...req.headers }
      delete headers.host
      delete headers.connection
      try {
        const response = await request(`${target}${req.url}`, {
          method: req.method as 'GET',
          headers,
          body: body.length > 0 ? body : undefined,
        })
        const answer = Buffer.from(await response.body.arrayBuffer())
        exchanges.push({
          method: req.method!,
          path: req.url!,
          headers: req.headers,
          body: body.toString('utf8'),
          status: response.statusCode,
          responseBody: answer.toString('utf8'),
        })
        const forwarded = { ...response.headers }
        delete forwarded['transfer-encoding']
        delete forwarded.connection
        res.writeHead(response.statusCode, forwarded as Record<string, string>)
        res.end(answer)
      } catch {
        res.writeHead(502)
        res.end()
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  cleanup(async () => {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, exchanges }
}

/** A loopback port free right now. */
export async function freePort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}

/**
 * Polls `check` until it returns a value (not undefined, null or false); past the time, fails
 * naming `what` and what `state` says.
 */
export async function waitFor<T>(
  what: string,
  check: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  timeoutMs: number,
  state?: () => unknown
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value !== undefined && value !== null && value !== false) return value
    if (Date.now() > deadline) {
      const seen = state ? ` (${JSON.stringify(state())})` : ''
      throw new Error(`timed out after ${timeoutMs} ms: ${what}${seen}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}
