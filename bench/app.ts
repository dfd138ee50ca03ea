import type { HttpContext } from '@adonisjs/core/http'
import type { ApplicationService, HttpRouterService } from '@adonisjs/core/types'
import type { NextFn } from '@adonisjs/core/types/http'
import { tableNames } from '../src/database/schema.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'
import { dbDate } from '../src/database/dates.ts'
import { readRawBody } from '../src/webhooks/raw_body.ts'
import { createSkippingBodyParser } from '../src/webhooks/skipping_bodyparser.ts'
import { serveHostApp } from '../tests/helpers/host_app.ts'
import { BENCH_SECRET } from './deliveries.ts'
import { partsOf } from '../src/service/payouts_service.ts'

export type BenchDb = 'sqlite' | 'pg' | 'mysql'

/** The three routes compared side by side. */
export const ROUTES = {
  plugin: '/webhooks/payouts',
  bare: '/bench/bare',
  insert: '/bench/insert',
} as const

/** PostgreSQL connection of the bench (the suite's database). */
export const PG_CONNECTION = {
  host: process.env.PG_HOST ?? '127.0.0.1',
  port: Number(process.env.PG_PORT ?? 5432),
  user: process.env.PG_USER ?? 'postgres',
  database: process.env.PG_DATABASE ?? 'test',
}

/** MySQL/MariaDB connection of the growth bench (`npm run bench:growth`). */
export const MYSQL_CONNECTION = {
  host: process.env.MYSQL_HOST ?? '127.0.0.1',
  port: Number(process.env.MYSQL_PORT ?? 3306),
  user: process.env.MYSQL_USER ?? 'root',
  password: process.env.MYSQL_PASSWORD ?? '',
  database: process.env.MYSQL_DATABASE ?? 'test',
}

export const BENCH_API_KEY = `sk_test_${'B'.repeat(43)}`
const APP_ROOT = new URL('./tmp/', import.meta.url)
const MAX_BODY_BYTES = 262_144

export interface BenchApp {
  app: ApplicationService
  payouts: PayoutsService
  url: string
  prefix: string
  inboxTable: string
  /** Server-side time per request (request received -> response finished), ms, by path. */
  serverTimes: Map<string, number[]>
  /** Turns the post-ack inbox processing (InboxProcessor.kick) on or off. */
  setProcessing(on: boolean): void
  close(): Promise<void>
}

/** SQLite as Lucid opens it (rollback journal, synchronous=FULL), or WAL + synchronous=NORMAL. */
export type SqliteJournal = 'default' | 'wal'

function connectionFor(db: BenchDb, sqliteFile: string, journal: SqliteJournal) {
  if (db === 'pg') {
    // knex's default pool size; every route shares it.
    return { client: 'pg' as const, connection: PG_CONNECTION, pool: { min: 2, max: 10 } }
  }
  if (db === 'mysql') {
    return { client: 'mysql2' as const, connection: MYSQL_CONNECTION, pool: { min: 2, max: 10 } }
  }
  return {
    client: 'better-sqlite3' as const,
    connection: { filename: sqliteFile },
    useNullAsDefault: true,
    pool:
      journal === 'wal'
        ? {
            afterCreate: (conn: { pragma(sql: string): unknown }, done: () => void) => {
              conn.pragma('journal_mode = WAL')
              conn.pragma('synchronous = NORMAL')
              // BENCH_SQLITE_CACHE_MB: a page cache other than better-sqlite3's 16 MB.
              if (process.env.BENCH_SQLITE_CACHE_MB) {
                conn.pragma(`cache_size = -${Number(process.env.BENCH_SQLITE_CACHE_MB) * 1024}`)
              }
              // BENCH_SQLITE_AUTOCHECKPOINT: WAL pages before a commit checkpoints (0: never).
              if (process.env.BENCH_SQLITE_AUTOCHECKPOINT) {
                conn.pragma(
                  `wal_autocheckpoint = ${Number(process.env.BENCH_SQLITE_AUTOCHECKPOINT)}`
                )
              }
              // BENCH_SQLITE_MMAP_MB: pages read through a memory map rather than copied in.
              if (process.env.BENCH_SQLITE_MMAP_MB) {
                conn.pragma(`mmap_size = ${Number(process.env.BENCH_SQLITE_MMAP_MB) * 1024 * 1024}`)
              }
              done()
            },
          }
        : undefined,
  }
}

/**
 * The suite's host app (tests/helpers/host_app.ts: Lucid, Transmit, the payouts provider,
 * the stock bodyparser as router middleware) on the bench's database, with three
 * POST routes: the plugin's webhook route (registerRoutes), a bare route that reads the
 * raw body and answers 200, and an insert-only route that reads the raw body and inserts
 * the same inbox row, one statement per request as a route would on its own, without
 * verifying (the plugin's InboxStore commits deliveries that arrive together in one go).
 * Server-side times are kept per path.
 */
export async function startBenchApp(options: {
  db: BenchDb
  sqliteFile: string
  journal?: SqliteJournal
  /** `transmit.relay`: on, each change goes out from this process's relay (bench/relay.ts). */
  relay?: boolean
}): Promise<BenchApp> {
  const prefix = `b${Math.random().toString(36).slice(2, 8)}_`
  const inboxTable = tableNames(prefix).webhookDeliveries
  const serverTimes = new Map<string, number[]>()
  const host = await serveHostApp({
    root: APP_ROOT,
    connection: connectionFor(options.db, options.sqliteFile, options.journal ?? 'default'),
    transmit: true,
    tablePrefix: prefix,
    config: { logger: { default: 'app', loggers: { app: { enabled: true, level: 'error' } } } },
    payouts: {
      apiKey: BENCH_API_KEY,
      baseUrl: 'http://127.0.0.1:9',
      webhook: {
        secret: BENCH_SECRET,
        path: ROUTES.plugin,
        // BENCH_INLINE_SLICE_MS=0: inline processing in whole batches, as before slices.
        ...(process.env.BENCH_INLINE_SLICE_MS
          ? { inlineSliceMs: Number(process.env.BENCH_INLINE_SLICE_MS) }
          : {}),
      },
      jobs: { enabled: false },
      ledger: {
        tablePrefix: prefix,
        // BENCH_SQLITE_CHECKPOINT=off: SQLite's own checkpoints only, as before the thread.
        ...(process.env.BENCH_SQLITE_CHECKPOINT === 'off' ? { sqliteCheckpointMs: 0 } : {}),
      },
      transmit: { relay: options.relay ?? false },
    },
    setup: ({ app, payouts, router }) => addBenchRoutes(app, payouts, router, inboxTable),
    onRequest(req, res) {
      const started = performance.now()
      res.once('finish', () => {
        const times = serverTimes.get(req.url ?? '') ?? []
        if (times.length < 100_000) times.push(performance.now() - started)
        serverTimes.set(req.url ?? '', times)
      })
    },
  })

  const { processor } = await partsOf(host.payouts)
  const kick = processor.kick.bind(processor)
  return {
    app: host.app,
    payouts: host.payouts,
    url: host.url,
    prefix,
    inboxTable,
    serverTimes,
    setProcessing(on) {
      processor.kick = on ? kick : () => {}
    },
    close: () => host.close(),
  }
}

/**
 * The bench's raw routes beside the plugin's, skipping the bodyparser as the plugin's route
 * does, and the plugin's Transmit channels.
 */
async function addBenchRoutes(
  app: ApplicationService,
  service: PayoutsService,
  router: HttpRouterService,
  inboxTable: string
) {
  // The provider bound a bodyparser that skips the plugin's route; the bench routes skip
  // it too (checked first, then the plugin's own check runs for everything else).
  const { default: BodyParserMiddleware } = await import('@adonisjs/core/bodyparser_middleware')
  const PluginBodyParser = createSkippingBodyParser((path) => path === ROUTES.plugin)
  const rawRoutes = new Set<string>([ROUTES.bare, ROUTES.insert])
  class BenchBodyParser extends PluginBodyParser {
    async handle(ctx: HttpContext, next: NextFn) {
      if (ctx.route && rawRoutes.has(ctx.route.pattern)) return next()
      return super.handle(ctx, next)
    }
  }
  app.container.singleton(
    BodyParserMiddleware,
    () => new BenchBodyParser(app.config.get('bodyparser'), app.experimentalFlags)
  )

  const db = await app.container.make('lucid.db')
  router.post(ROUTES.bare, async ({ request, response }) => {
    await readRawBody(request.request, MAX_BODY_BYTES)
    return response.status(200).send({ received: true })
  })
  router.post(ROUTES.insert, async ({ request, response }) => {
    const raw = await readRawBody(request.request, MAX_BODY_BYTES)
    // The insert a route would do on its own: one row, one statement, one commit.
    const client = db.connection()
    await client
      .insertQuery()
      .table(inboxTable)
      .insert({
        delivery_id: request.header('svc-delivery-id') ?? '',
        event_type: (request.header('svc-event-type') ?? 'unknown').slice(0, 100),
        raw_body: raw.toString('base64'),
        signature_header: request.header('svc-signature') ?? null,
        source: 'webhook',
        state: 'pending',
        attempts: 0,
        received_at: dbDate(client),
      })
    return response.status(200).send({ received: true })
  })

  const transmit = await app.container.make('transmit')
  transmit.registerRoutes()
  service.registerChannels(transmit, {
    owner: (ctx: HttpContext, ownerId: string) => ctx.request.header('x-owner') === ownerId,
  })
}

/**
 * Empties the bench app's inbox between runs. A drain in progress reads back each row it
 * claims, and deleting rows under it makes it fail: a drain that may be running
 * (`mayBeDraining`) is left nothing more to claim and let finish its batch first. In WAL mode
 * the delete is checkpointed now, not during the next run.
 */
export async function emptyInbox(bench: BenchApp, journal: SqliteJournal, mayBeDraining: boolean) {
  const lucid = await bench.app.container.make('lucid.db')
  const client = () => lucid.connection()
  bench.setProcessing(false)
  if (mayBeDraining) {
    await client()
      .from(bench.inboxTable)
      .whereIn('state', ['pending', 'failed'])
      .update({ state: 'dead' })
    const { processor } = await partsOf(bench.payouts)
    await processor.idle()
  }
  await client().truncate(bench.inboxTable)
  if (journal === 'wal') await client().rawQuery('PRAGMA wal_checkpoint(TRUNCATE)')
}
