import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readFileSync } from 'node:fs'
import { rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { randomBytes, randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { InboxStore } from '../../src/webhooks/inbox_store.ts'
import { TEST_API_KEY } from '../helpers/app.ts'
import { connectionConfig, setupDatabase, TEST_DB } from '../helpers/database.ts'
import { scratchApp } from '../helpers/scratch_app.ts'

/**
 * `node ace payouts:work` stopped by a signal, in an app shaped like configure's output
 * with the stock `bin/console.ts` (copied from examples/demo), whose SIGTERM listener
 * terminates the app (and closes Lucid) while the worker still finishes its batch.
 */

const REPO = fileURLToPath(new URL('../../', import.meta.url))
const TRANSACTION_TIMEOUT_MS = 5000
/** The documented bound: `ledger.transactionTimeoutMs` + 10 s. */
const STOP_BOUND_MS = TRANSACTION_TIMEOUT_MS + 10_000
const BATCH_SIZE = 10

/** What the scratch app reads from STOP_TEST. */
interface AppOptions {
  prefix: string
  connection: object
  eventsFile: string
  /** Each app listener of a `payouts:*` event takes this long; -1 never returns. */
  listenerMs: number
}

const file = (path: string) => pathToFileURL(join(REPO, path)).href

/** The files configure leaves (provider, commands, config/payouts.ts) plus the app's own. */
function appFiles(): Record<string, string> {
  return {
    'adonisrc.ts': `import { defineConfig } from '@adonisjs/core/app'

export default defineConfig({
  commands: [() => import('./payouts_commands.ts')],
  providers: [
    () => import('@adonisjs/core/providers/app_provider'),
    () => import('@adonisjs/lucid/database_provider'),
    () => import('${file('providers/payouts_provider.ts')}'),
  ],
  preloads: [() => import('#start/events')],
})
`,
    // What `@svc/adonis-payouts/commands` gives, from the sources.
    'payouts_commands.ts': `import { ListLoader } from '@adonisjs/core/ace'
import PayoutsWork from '${file('commands/payouts_work.ts')}'

const loader = new ListLoader([PayoutsWork])
export const getMetaData = () => loader.getMetaData()
export const getCommand = (metaData: any) => loader.getCommand(metaData)
`,
    'start/env.ts': `import { Env } from '@adonisjs/core/env'

export default await Env.create(new URL('../', import.meta.url), {
  NODE_ENV: Env.schema.enum(['development', 'production', 'test'] as const),
  APP_KEY: Env.schema.string(),
})
`,
    'start/events.ts': `import { appendFileSync } from 'node:fs'
import emitter from '@adonisjs/core/services/emitter'

const options = JSON.parse(process.env.STOP_TEST!)
emitter.onAny(async (name: any, data: any) => {
  if (!String(name).startsWith('payouts:')) return
  if (options.listenerMs < 0) return new Promise(() => setInterval(() => {}, 1000))
  await new Promise((resolve) => setTimeout(resolve, options.listenerMs))
  appendFileSync(options.eventsFile, JSON.stringify({ name, payoutId: data?.payoutId }) + '\\n')
})
`,
    'config/database.ts': `import { defineConfig } from '@adonisjs/lucid'

const { connection } = JSON.parse(process.env.STOP_TEST!)
export default defineConfig({ connection: 'main', connections: { main: connection } })
`,
    'config/payouts.ts': `import { defineConfig } from '${file('index.ts')}'

const { prefix } = JSON.parse(process.env.STOP_TEST!)
export default defineConfig({
  apiKey: '${TEST_API_KEY}',
  baseUrl: 'http://127.0.0.1:9',
  retry: { maxRetries: 0 },
  webhook: { processing: 'worker', retryIntervalMs: 100, processBatchSize: ${BATCH_SIZE} },
  jobs: { enabled: false },
  ledger: { tablePrefix: prefix, transactionTimeoutMs: ${TRANSACTION_TIMEOUT_MS} },
})
`,
  }
}

/** A database with `count` stored deliveries, and the app that will process them. */
async function setup(cleanup: (fn: () => Promise<void>) => void, count: number) {
  const { db, prefix } = await setupDatabase(cleanup, 'stop')
  const inbox = new InboxStore(db, `${prefix}webhook_deliveries`)
  await Promise.all(
    Array.from({ length: count }, () => {
      const payoutId = randomUUID()
      const body = {
        type: 'payout.created',
        createdAt: new Date().toISOString(),
        data: { payoutId },
      }
      return inbox.insert({
        deliveryId: `dlv_${payoutId}`,
        eventType: 'payout.created',
        rawBody: Buffer.from(JSON.stringify(body)),
        signatureHeader: null,
        source: 'webhook',
      })
    })
  )
  const eventsFile = join(tmpdir(), `svc-payouts-stop-events-${process.pid}-${Date.now()}.jsonl`)
  cleanup(() => rm(eventsFile, { force: true }))
  const root = await scratchApp(cleanup, 'stop', appFiles())
  const states = async () => {
    const counts: Record<string, number> = {}
    for (const row of await db.from(`${prefix}webhook_deliveries`).select('state')) {
      counts[row.state] = (counts[row.state] ?? 0) + 1
    }
    return counts
  }
  const unnotified = async () =>
    Number((await db.from(`${prefix}payout_events`).whereNull('notified_at').count('* as n'))[0].n)
  return { db, prefix, root, eventsFile, states, unnotified }
}

/** `node ace payouts:work ...args` in the scratch app; resolves its exit code and timing. */
function startWorker(
  cleanup: (fn: () => Promise<void>) => void,
  root: string,
  options: AppOptions,
  args: string[] = []
) {
  const child = spawn(
    process.execPath,
    ['--import=@poppinss/ts-exec', 'bin/console.ts', 'payouts:work', ...args],
    {
      cwd: root,
      env: {
        ...process.env,
        NODE_ENV: 'development',
        APP_KEY: randomBytes(32).toString('base64url'),
        STOP_TEST: JSON.stringify(options),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    }
  )
  let output = ''
  for (const stream of [child.stdout!, child.stderr!]) {
    stream.setEncoding('utf8')
    stream.on('data', (chunk) => (output += chunk))
  }
  const exited = once(child, 'exit').then(([code]) => code as number | null)
  cleanup(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await exited
  })
  return { child, output: () => output, exited }
}

/** Resolves once `check` holds; fails after `timeoutMs` with the worker's output. */
async function waitFor(
  what: string,
  check: () => boolean,
  worker: ReturnType<typeof startWorker>,
  timeoutMs = 20_000
) {
  const started = Date.now()
  while (!check()) {
    if (Date.now() - started > timeoutMs || worker.child.exitCode !== null) {
      throw new Error(`no sign of ${what}; the worker's output:\n${worker.output()}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/** Sends `signal`; resolves the exit code and how long it took, or null past `withinMs`. */
async function stopWith(
  worker: ReturnType<typeof startWorker>,
  signal: NodeJS.Signals,
  withinMs: number
) {
  const sentAt = Date.now()
  worker.child.kill(signal)
  const timer = new Promise<'late'>((resolve) => setTimeout(() => resolve('late'), withinMs))
  const code = await Promise.race([worker.exited, timer])
  return { code, tookMs: Date.now() - sentAt }
}

const lines = (path: string) =>
  existsSync(path) ? readFileSync(path, 'utf8').split('\n').filter(Boolean).length : 0

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  test.group(`Worker | ${signal} under the stock bin/console.ts (${TEST_DB})`, (group) => {
    group.each.timeout(90_000)

    test(`a busy worker finishes its batch and exits 0 within the stop bound`, async ({
      assert,
      cleanup,
    }) => {
      const app = await setup(cleanup, 60)
      const options = {
        prefix: app.prefix,
        connection: connectionConfig('stop'),
        eventsFile: app.eventsFile,
        listenerMs: 100,
      }
      const worker = startWorker(cleanup, app.root, options, ['--poll-interval-ms=100'])
      // The first batch's listeners are running: the worker is mid-batch.
      await waitFor('a listener run', () => lines(app.eventsFile) > 0, worker)
      const { code, tookMs } = await stopWith(worker, signal, STOP_BOUND_MS + 2000)
      assert.equal(code, 0, `exit code after ${tookMs} ms; output:\n${worker.output()}`)
      assert.isBelow(tookMs, STOP_BOUND_MS)

      // What it took was committed and told: no row left claimed, every change announced.
      const states = await app.states()
      assert.includeMembers(['pending', 'processed'], Object.keys(states))
      assert.isAtLeast(states.processed, BATCH_SIZE)
      assert.equal(await app.unnotified(), 0, 'every applied change was announced')
      assert.equal(lines(app.eventsFile), states.processed, 'one app event per applied delivery')
      assert.include(worker.output(), 'payouts worker stopped')
    })

    test(`listeners that hang: past --stop-timeout-ms the worker exits 1`, async ({
      assert,
      cleanup,
    }) => {
      const app = await setup(cleanup, 20)
      const options = {
        prefix: app.prefix,
        connection: connectionConfig('stop'),
        eventsFile: app.eventsFile,
        listenerMs: -1,
      }
      const worker = startWorker(cleanup, app.root, options, [
        '--poll-interval-ms=100',
        '--stop-timeout-ms=3000',
      ])
      const started = () => worker.output().includes('payouts worker started')
      await waitFor('the worker starting', started, worker)
      // Time for the first batch to reach its listeners, which never return.
      await new Promise((resolve) => setTimeout(resolve, 1000))
      const { code, tookMs } = await stopWith(worker, signal, 3000 + 4000)
      assert.equal(code, 1, `exit code after ${tookMs} ms; output:\n${worker.output()}`)
      assert.isAtLeast(tookMs, 2900)
      assert.include(worker.output(), 'payouts worker did not stop in time')
    })
  })
}
