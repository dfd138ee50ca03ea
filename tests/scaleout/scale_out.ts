import { randomBytes } from 'node:crypto'
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { test } from '@japa/runner'
import { Transmit } from '@adonisjs/transmit-client'
import { Redis } from 'ioredis'
import { Database } from '@adonisjs/lucid/database'
import { Emitter } from '@adonisjs/core/events'
import { Logger } from '@adonisjs/core/logger'
import { AppFactory } from '@adonisjs/core/factories/app'
import { EventSource } from 'undici'
import { tableNames } from '../../src/database/schema.ts'
import { PayoutsEmulator } from '../../src/emulator/main.ts'
import {
  demoAce,
  demoEnv,
  installDemo,
  startDemoApp,
  type DemoApp,
} from '../../scripts/demo_runner.ts'
import { SCRATCH_URL } from '../helpers/scratch.ts'

/**
 * Two instances of the example app (examples/demo) on one PostgreSQL or MySQL database and
 * one Redis: Transmit's Redis transport, the plugin's job locks in Redis. The emulator's
 * webhook subscription points at a round-robin proxy in this process (a stand-in for the
 * load balancer), so deliveries alternate between the instances.
 */

const REDIS = {
  host: process.env.REDIS_HOST ?? '127.0.0.1',
  port: process.env.REDIS_PORT ?? '6379',
}
const OWNER_CHANNEL = 'payouts/owners/demo-tenant'
const JOBS = ['reconcile', 'escrow', 'recover']
const PAYOUTS = 6

/** A database server both instances share: how this test reaches it, and how the demo does. */
interface SharedServer {
  name: 'PostgreSQL' | 'MySQL'
  /** The Lucid connection to one of its databases (the server's default one when omitted). */
  connection(database?: string): Record<string, unknown>
  /** The demo's environment variables for that database. */
  env(database: string): Record<string, string | undefined>
  /** Rows of a raw query's result. */
  rows(result: any): any[]
  dropDatabase(database: string): string
  /**
   * A database given to the test (its tables dropped at the end) instead of one it creates:
   * for servers where the test's user may not create databases.
   */
  given?: string
  where: string
}

const PG = {
  host: process.env.PG_HOST ?? '127.0.0.1',
  port: Number(process.env.PG_PORT ?? 5432),
  user: process.env.PG_USER ?? 'postgres',
  password: process.env.PG_PASSWORD,
  database: process.env.PG_DATABASE ?? 'test',
}
const MYSQL = {
  host: process.env.MYSQL_HOST ?? '127.0.0.1',
  port: Number(process.env.MYSQL_PORT ?? 3306),
  user: process.env.MYSQL_USER ?? 'root',
  password: process.env.MYSQL_PASSWORD ?? '',
  database: process.env.MYSQL_DATABASE ?? 'test',
}

const SERVERS: SharedServer[] = [
  {
    name: 'PostgreSQL',
    where: `${PG.host}:${PG.port}`,
    connection: (database = PG.database) => ({
      client: 'pg',
      connection: { ...PG, database },
      pool: { min: 0, max: 2 },
    }),
    env: (database) => ({
      DB_CONNECTION: 'pg',
      PG_HOST: PG.host,
      PG_PORT: String(PG.port),
      PG_USER: PG.user,
      PG_PASSWORD: PG.password,
      PG_DATABASE: database,
    }),
    rows: (result) => result.rows,
    dropDatabase: (database) => `drop database if exists ${database} with (force)`,
  },
  {
    name: 'MySQL',
    where: `${MYSQL.host}:${MYSQL.port}`,
    given: process.env.SCALEOUT_MYSQL_DATABASE,
    connection: (database = MYSQL.database) => ({
      client: 'mysql2',
      connection: { ...MYSQL, database },
      pool: { min: 0, max: 2 },
    }),
    env: (database) => ({
      DB_CONNECTION: 'mysql',
      MYSQL_HOST: MYSQL.host,
      MYSQL_PORT: String(MYSQL.port),
      MYSQL_USER: MYSQL.user,
      MYSQL_PASSWORD: MYSQL.password,
      MYSQL_DATABASE: database,
    }),
    rows: (result) => result[0],
    dropDatabase: (database) => `drop database if exists ${database}`,
  },
]

/** A Lucid connection to one database of the server, closed by the caller. */
async function open(server: SharedServer, database?: string) {
  const app = new AppFactory().create(SCRATCH_URL)
  await app.init()
  return new Database(
    { connection: 'shared', connections: { shared: server.connection(database) as any } },
    new Logger({ enabled: false }),
    new Emitter(app)
  )
}

/** The servers a variant needs; it runs when both answer (CI makes sure they do). */
async function serversDown(server: SharedServer): Promise<string | null> {
  const db = await open(server)
  try {
    await db.rawQuery('select 1')
  } catch {
    return `${server.name} does not answer at ${server.where}`
  } finally {
    await db.manager.closeAll()
  }
  const redis = new Redis({
    host: REDIS.host,
    port: Number(REDIS.port),
    lazyConnect: true,
    connectTimeout: 1500,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  })
  redis.on('error', () => {})
  try {
    await redis.connect()
    if ((await redis.ping()) !== 'PONG') throw new Error('no PONG')
  } catch {
    return `Redis does not answer at ${REDIS.host}:${REDIS.port}`
  } finally {
    redis.disconnect()
  }
  return null
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

async function freePort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}

async function until(
  what: string | (() => string),
  check: () => Promise<boolean> | boolean,
  timeoutMs = 30_000
) {
  const started = Date.now()
  while (!(await check())) {
    if (Date.now() - started > timeoutMs) {
      throw new Error(`timed out waiting for ${typeof what === 'string' ? what : what()}`)
    }
    await sleep(100)
  }
}

interface Routed {
  instance: 'A' | 'B'
  deliveryId: string
  payoutId: string
  status: number
}

/** The load balancer: each request goes to the next instance, body and headers untouched. */
async function roundRobinProxy(targets: Array<{ name: 'A' | 'B'; url: () => string }>) {
  const routed: Routed[] = []
  let next = 0
  const server: Server = createServer(async (req, res) => {
    const target = targets[next++ % targets.length]
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const body = Buffer.concat(chunks)
    const headers: Record<string, string> = {}
    for (const [key, value] of Object.entries(req.headers as IncomingHttpHeaders)) {
      if (typeof value === 'string' && !['host', 'connection', 'content-length'].includes(key))
        headers[key] = value
    }
    let payoutId = ''
    try {
      payoutId = JSON.parse(body.toString('utf8')).data?.payoutId ?? ''
    } catch {}
    try {
      const response = await fetch(`${target.url()}${req.url}`, {
        method: req.method,
        headers,
        body,
      })
      const text = await response.text()
      routed.push({
        instance: target.name,
        deliveryId: String(req.headers['svc-delivery-id']),
        payoutId,
        status: response.status,
      })
      res.writeHead(response.status, { 'content-type': 'application/json' }).end(text)
    } catch {
      res.writeHead(502).end()
    }
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    routed,
    close: async () => {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    },
  }
}

/** One instance's log lines (pino JSON on stdout), kept for the assertions. */
function captureLogs(app: DemoApp, name: string) {
  const lines: Array<Record<string, any>> = []
  let rest = ''
  app.child.stdout?.on('data', (chunk: Buffer) => {
    const text = rest + chunk.toString('utf8')
    const parts = text.split('\n')
    rest = parts.pop() ?? ''
    for (const part of parts) {
      try {
        lines.push({ ...JSON.parse(part), instance: name })
      } catch {
        if (part.trim()) lines.push({ msg: part, instance: name })
      }
    }
  })
  app.child.stderr?.on('data', (chunk: Buffer) => process.stderr.write(`[${name}] ${chunk}`))
  return lines
}

/** A browser stand-in: undici's EventSource (Node 24 has none) on one instance. */
async function subscribe(url: string, cleanup: (fn: () => Promise<void>) => void) {
  const client = new Transmit({
    baseUrl: url,
    eventSourceFactory: (source, options) =>
      new EventSource(source, options) as unknown as globalThis.EventSource,
    maxReconnectAttempts: 0,
  })
  cleanup(async () => client.close())
  const messages: any[] = []
  const subscription = client.subscription(OWNER_CHANNEL)
  subscription.onMessage((message) => messages.push(message))
  await subscription.create()
  return messages
}

/**
 * The suite on one server: each server has a spec file of its own (scaleout_pg.spec.ts,
 * scaleout_mysql.spec.ts), so `npm test` runs them side by side; most of each is waiting for
 * the jobs' 60 s interval.
 */
export async function scaleOutSuite(serverName: SharedServer['name']) {
  const server = SERVERS.find((candidate) => candidate.name === serverName)!
  const skipReason = await serversDown(server)
  test.group(`Scale-out | two instances of the example app on ${server.name} and Redis`, () => {
    test('deliveries spread across both, broadcasts cross instances, each job runs once per interval, nothing applied twice', async ({
      assert,
      cleanup,
    }) => {
      const started = Date.now()
      // SVC_DEMO_INSTALLED=1: the package is already built and installed in examples/demo.
      if (!process.env.SVC_DEMO_INSTALLED) await installDemo(() => {})

      // A database of its own, dropped at the end (or the one given, emptied at the end).
      const database = server.given ?? `svc_scaleout_${randomBytes(4).toString('hex')}`
      const admin = await open(server, server.given)
      if (server.given) {
        const tables = ['adonis_schema', 'adonis_schema_versions', ...Object.values(tableNames())]
        const dropTables = () =>
          Promise.all(tables.map((table) => admin.connection().schema.dropTableIfExists(table)))
        await dropTables()
        cleanup(async () => {
          await dropTables()
          await admin.manager.closeAll()
        })
      } else {
        await admin.rawQuery(`create database ${database}`)
        cleanup(async () => {
          await admin.rawQuery(server.dropDatabase(database))
          await admin.manager.closeAll()
        })
      }

      const emulator = await PayoutsEmulator.start({
        port: 0,
        stepIntervalMs: 150,
        allowInsecureWebhooks: true,
      })
      cleanup(() => emulator.close())
      // Duplicated deliveries (same delivery id) land on the other instance half the time.
      emulator.admin.setFaults({ webhookDuplicateRate: 0.25 })
      const ports = { A: await freePort(), B: await freePort() }
      const proxy = await roundRobinProxy([
        { name: 'A', url: () => `http://127.0.0.1:${ports.A}` },
        { name: 'B', url: () => `http://127.0.0.1:${ports.B}` },
      ])
      cleanup(() => proxy.close())
      const subscription = emulator.webhooks.createSubscription('acct_default', {
        url: `${proxy.url}/webhooks/payouts`,
        events: ['payout.created', 'payout.status.updated'],
      })

      const lockPrefix = `svc-scaleout:${randomBytes(4).toString('hex')}:`
      const env = demoEnv({
        LOG_LEVEL: 'info',
        ...server.env(database),
        REDIS_HOST: REDIS.host,
        REDIS_PORT: REDIS.port,
        PAYOUTS_REDIS_URL: `redis://${REDIS.host}:${REDIS.port}?keyPrefix=${encodeURIComponent(lockPrefix)}`,
        PAYOUTS_API_KEY: emulator.apiKey,
        PAYOUTS_BASE_URL: emulator.baseUrl,
        PAYOUTS_WEBHOOK_SECRET: subscription.secret,
      })
      const redis = new Redis({ host: REDIS.host, port: Number(REDIS.port) })
      cleanup(async () => {
        const keys = await redis.keys(`${lockPrefix}*`)
        if (keys.length) await redis.del(...keys)
        await redis.quit()
      })
      await demoAce(['migration:run', '--force'], env)

      // Piped, so the job runs can be read from the logs.
      const output = 'pipe'
      const start = async (port: number) => {
        const app = await startDemoApp({ port, env, output })
        cleanup(() => app.stop())
        // Never left behind, even if this runner exits without its cleanup.
        process.once('exit', () => app.child.kill('SIGKILL'))
        return app
      }
      const spawnedAt = Date.now()
      const [a, b] = await Promise.all([start(ports.A), start(ports.B)])
      const logs = [captureLogs(a, 'A'), captureLogs(b, 'B')]
      const allLogs = () => logs.flat()
      const booted = Date.now() - started

      const onA = await subscribe(a.url, cleanup)
      const onB = await subscribe(b.url, cleanup)

      // Payouts through both instances' API, in turns.
      const payoutIds: string[] = []
      const createdOn = new Map<string, 'A' | 'B'>()
      for (let i = 0; i < PAYOUTS; i++) {
        const [name, app] = i % 2 === 0 ? (['A', a] as const) : (['B', b] as const)
        const response = await fetch(`${app.url}/api/payouts`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'accept': 'application/json' },
          body: JSON.stringify({ flow: i % 3 === 2 ? 'onramp' : 'fiat_to_fiat', amount: 100 + i }),
        })
        const body = (await response.json()) as { payoutId?: string; error?: string }
        assert.equal(response.status, 200, body.error)
        payoutIds.push(body.payoutId!)
        createdOn.set(body.payoutId!, name)
      }

      // Every payout completes in the shared ledger; every delivery was answered 2xx.
      const db = await open(server, database)
      cleanup(() => db.manager.closeAll())
      const query = async (sql: string, bindings: any[] = []) =>
        server.rows(await db.rawQuery(sql, bindings)) as any[]
      await until('every payout completed', async () => {
        const [row] = await query(
          `select count(*) as n from svc_payouts where status = 'completed'`
        )
        return Number(row.n) === PAYOUTS
      })
      await emulator.admin.settle()
      // The changes the owner's channel carries as they happen: those applied once the payout
      // had its owner, i.e. from its `execute` row on.
      const ownerVisible = () =>
        query(
          `select e.id, e.payout_uuid, e.status, e.step, e.source, e.delivery_id
         from svc_payout_events e where e.applied and e.id >= (
           select min(x.id) from svc_payout_events x
           where x.payout_uuid = e.payout_uuid and x.source = 'execute')
         order by e.id`
        )
      // A payout whose webhook beat its execute response had ownerless changes; when the
      // execute response gives it its owner, the owner channel hears its position then, once.
      const ownerAttached = () =>
        query(
          `select e.id, e.payout_uuid, e.status, e.step, e.source, e.delivery_id
         from svc_payout_events e where e.id = (
           select max(x.id) from svc_payout_events x
           where x.payout_uuid = e.payout_uuid and x.applied and x.id < (
             select min(y.id) from svc_payout_events y
             where y.payout_uuid = e.payout_uuid and y.source = 'execute'))
         order by e.id`
        )
      const ownerHeard = async () => [...(await ownerVisible()), ...(await ownerAttached())]
      const mine = (messages: any[]) => messages.filter((m) => payoutIds.includes(m.payoutId))
      let changes = 0
      await until(
        () =>
          `every change on both subscribers (${changes} changes, A ${onA.length}, B ${onB.length})`,
        async () => {
          changes = (await ownerHeard()).length
          return mine(onA).length >= changes && mine(onB).length >= changes
        },
        15_000
      )

      // Let the jobs run a few intervals on both instances (one, if the app runs them on the
      // 60 s default), then stop both; each has ticked `rounds` times by then.
      const jobsStarted = (name: string) =>
        allLogs().find((line) => line.instance === name && line.msg === 'payouts jobs started')
      await until('both schedulers started', () => Boolean(jobsStarted('A') && jobsStarted('B')))
      assert.equal(jobsStarted('A')!.locks, 'redis')
      assert.equal(jobsStarted('B')!.locks, 'redis')
      assert.deepEqual(jobsStarted('A')!.intervals, jobsStarted('B')!.intervals)
      const intervals: Record<string, number> = jobsStarted('A')!.intervals
      const interval = Math.max(...JOBS.map((job) => intervals[job]))
      const rounds = interval <= 5000 ? 4 : 1
      const scheduledAt = Math.max(Number(jobsStarted('A')!.time), Number(jobsStarted('B')!.time))
      await sleep(Math.max(0, scheduledAt + rounds * interval + 500 - Date.now()))
      await Promise.all([a.stop(), b.stop()])
      const stoppedAt = Date.now()

      // 1. Deliveries spread across both instances, all accepted.
      const ours = proxy.routed.filter((r) => payoutIds.includes(r.payoutId))
      const toA = ours.filter((r) => r.instance === 'A')
      const toB = ours.filter((r) => r.instance === 'B')
      assert.isAbove(toA.length, 0)
      assert.isAbove(toB.length, 0)
      assert.deepEqual(
        ours.filter((r) => r.status >= 300),
        []
      )

      // 2. Nothing applied twice: one applied row per change, one inbox row per delivery id.
      const twice = await query(
        `select payout_uuid, status, step, count(*) as n from svc_payout_events
       where applied group by payout_uuid, status, step having count(*) > 1`
      )
      assert.deepEqual(twice, [])
      // The database is this test's own: every row is one of its payouts.
      const applied = await query('select id, source from svc_payout_events where applied')
      const visible = await ownerVisible()
      const attached = await ownerAttached()
      const inbox = await query('select delivery_id, state from svc_webhook_deliveries order by id')
      assert.equal(inbox.length, new Set(ours.map((r) => r.deliveryId)).size)
      assert.deepEqual(
        inbox.filter((row) => row.state !== 'processed'),
        []
      )

      // 3. Both subscribers received every change exactly once, whichever instance applied it.
      const key = (m: { payoutId?: string; payout_uuid?: string; status: string; step: string }) =>
        `${m.payoutId ?? m.payout_uuid} ${m.status} ${m.step}`
      const expected = [...visible, ...attached].map(key).toSorted()
      for (const [name, messages] of [
        ['A', onA],
        ['B', onB],
      ] as const) {
        const received = messages.filter((m) => payoutIds.includes(m.payoutId)).map(key)
        assert.deepEqual(received.toSorted(), expected, `subscriber on ${name}`)
      }
      // The subscriber on A heard payouts executed on B (B's own change, broadcast by B): the
      // execute's change, or, when the service's webhooks beat the execute response there, the
      // position B broadcast once the execute gave the payout its owner …
      const executedOnB = [
        ...visible.filter((row) => row.source === 'execute'),
        ...attached,
      ].filter((row) => createdOn.get(row.payout_uuid) === 'B')
      assert.equal(
        new Set(executedOnB.map((row) => row.payout_uuid)).size,
        payoutIds.filter((id) => createdOn.get(id) === 'B').length
      )
      for (const row of executedOnB) {
        assert.isTrue(
          onA.some((m) => key(m) === key(row) && m.source === row.source),
          `A heard ${key(row)} executed on B`
        )
      }
      // … and the changes whose webhooks B ingested.
      const ingestedOnB = new Set(toB.map((r) => r.deliveryId))
      const fromB = visible.filter((row) => ingestedOnB.has(row.delivery_id))
      assert.isAbove(fromB.length, 0)
      for (const row of fromB) {
        assert.isTrue(
          onA.some((m) => key(m) === key(row)),
          `A heard ${key(row)} ingested on B`
        )
      }

      // 4. Each job ran once per interval across both instances (never once per instance).
      const runs = allLogs().filter((line) => line.msg === 'payouts job ran')
      const ofJob = (job: string) => runs.filter((line) => line.job === job)
      const counts = Object.fromEntries(
        JOBS.map((job) => [
          job,
          {
            A: ofJob(job).filter((line) => line.instance === 'A').length,
            B: ofJob(job).filter((line) => line.instance === 'B').length,
          },
        ])
      )
      console.log(
        JSON.stringify({
          bootMs: booted,
          totalMs: Date.now() - started,
          deliveries: { A: toA.length, B: toB.length },
          duplicatedByEmulator: emulator.admin.faultStats().webhooks.duplicated,
          appliedChanges: applied.length,
          appliedBeforeOwnerKnown: applied.length - visible.length,
          ownerAttachedLate: attached.length,
          appliedFromDeliveriesOnB: fromB.length,
          messages: { A: onA.length, B: onB.length },
          jobIntervalMs: interval,
          jobWindowMs: stoppedAt - spawnedAt,
          jobRuns: counts,
        })
      )
      // No run before an interval has passed since the spawn, then at most one per lock TTL
      // (interval - 50 ms) across both instances; without the lock each instance would run
      // every job once per interval, twice the runs, some of them moments apart.
      for (const job of JOBS) {
        const every = intervals[job]
        const possible = Math.floor((stoppedAt - spawnedAt - every) / (every - 50)) + 1
        assert.isAtLeast(ofJob(job).length, rounds, `${job} ran`)
        assert.isAtMost(ofJob(job).length, possible, `${job} ran at most once per interval`)
        // When each run started: its log line's time, less how long it ran.
        const times = ofJob(job)
          .map((line) => Number(line.time) - Number(line.ms))
          .toSorted((x, y) => x - y)
        for (let i = 1; i < times.length; i++) {
          assert.isAtLeast(times[i] - times[i - 1], every - 250, `${job}: two runs too close`)
        }
      }
      assert.deepEqual(
        allLogs().filter((line) => line.level >= 50),
        [],
        'no errors logged'
      )
    })
      .skip(skipReason !== null, skipReason ?? undefined)
      .timeout(180_000)
  })
}
