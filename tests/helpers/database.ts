import { mkdirSync, statfsSync } from 'node:fs'
import { readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Database } from '@adonisjs/lucid/database'
import { BaseModel } from '@adonisjs/lucid/orm'
import { Emitter } from '@adonisjs/core/events'
import { Logger } from '@adonisjs/core/logger'
import { AppFactory } from '@adonisjs/core/factories/app'
import {
  createPayoutsAccounts,
  createPayoutsIndexes,
  createPayoutsLeases,
  createPayoutsProviderMetadataAt,
  createPayoutsProviderMetadataDue,
  createPayoutsTables,
  createPayoutsTraceContext,
  dropPayoutsTables,
} from '../../src/database/schema.ts'
import { configureModels } from '../../src/models/main.ts'
import { SCRATCH_URL } from './scratch.ts'

/** The plugin's tables as the seven published migrations leave them, in their order. */
export function createAllPayoutsTables(schema: any, prefix?: string) {
  return createPayoutsProviderMetadataDue(
    createPayoutsProviderMetadataAt(
      createPayoutsAccounts(
        createPayoutsTraceContext(
          createPayoutsLeases(
            createPayoutsIndexes(createPayoutsTables(schema, prefix), prefix),
            prefix
          ),
          prefix
        ),
        prefix
      ),
      prefix
    ),
    prefix
  ) as Promise<void>
}

/** The suite's database: `TEST_DB=pg` PostgreSQL, `TEST_DB=mysql` MySQL/MariaDB, else SQLite. */
export const TEST_DB: 'pg' | 'mysql' | 'sqlite' =
  process.env.TEST_DB === 'pg' ? 'pg' : process.env.TEST_DB === 'mysql' ? 'mysql' : 'sqlite'

/**
 * SQLite files of this run. Not under tests/tmp: @japa/file-system empties it after each test.
 * In memory (/dev/shm) where the system has one with room to spare, else in the temporary
 * folder; TEST_SQLITE_DIR chooses another. A SQLite COMMIT waits for its fsyncs, and on a
 * virtual disk they were about 40 % of the SQLite suites' time (ledger, inbox and pruning:
 * 17 s on disk, 10 s in memory). The files, their locks between processes and WAL's shared
 * memory are the same; only the fsyncs cost nothing, which no test can observe short of the
 * machine losing power.
 */
export const SQLITE_FOLDER = process.env.TEST_SQLITE_DIR ?? join(fastFolder(), 'svc-payouts-tests')

/** /dev/shm when it exists with 1 GB free (a container's is often 64 MB), else the temporary folder. */
function fastFolder(): string {
  try {
    const { bavail, bsize } = statfsSync('/dev/shm')
    if (bavail * bsize >= 1024 ** 3) return '/dev/shm'
  } catch {}
  return tmpdir()
}

/** A SQLite file of this run named `name`, in SQLITE_FOLDER (made if need be). */
export function sqlitePath(name: string): string {
  mkdirSync(SQLITE_FOLDER, { recursive: true })
  return join(SQLITE_FOLDER, name)
}

/** Removes this process's SQLite files (the runner's teardown). */
export async function removeSqliteFiles() {
  const files = await readdir(SQLITE_FOLDER).catch(() => [] as string[])
  const mine = files.filter((file) => file.includes(`-${process.pid}.sqlite`))
  await Promise.all(mine.map((file) => rm(join(SQLITE_FOLDER, file), { force: true })))
}

/** Lucid connection config for the suite's database (SQLite file, PostgreSQL or MySQL). */
export function connectionConfig(name = 'test') {
  if (TEST_DB === 'mysql') {
    return {
      client: 'mysql2' as const,
      connection: {
        host: process.env.MYSQL_HOST ?? '127.0.0.1',
        port: Number(process.env.MYSQL_PORT ?? 3306),
        user: process.env.MYSQL_USER ?? 'root',
        password: process.env.MYSQL_PASSWORD ?? '',
        database: process.env.MYSQL_DATABASE ?? 'test',
      },
      pool: { min: 0, max: 25 },
    }
  }
  if (TEST_DB === 'pg') {
    return {
      client: 'pg' as const,
      connection: {
        host: process.env.PG_HOST ?? '127.0.0.1',
        port: Number(process.env.PG_PORT ?? 5432),
        user: process.env.PG_USER ?? 'postgres',
        database: process.env.PG_DATABASE ?? 'test',
      },
      pool: { min: 0, max: 25 },
    }
  }
  return {
    client: 'better-sqlite3' as const,
    connection: {
      filename: process.env.SVC_TEST_SQLITE ?? sqlitePath(`${name}-${process.pid}.sqlite`),
    },
    useNullAsDefault: true,
  }
}

/**
 * A real Lucid database with the plugin's tables under a fresh prefix, dropped and
 * closed in the test's cleanup.
 */
export async function setupDatabase(
  cleanup: (fn: () => Promise<void>) => void,
  name = 'test',
  options: {
    prefix?: string
    createTables?: boolean
    /** Lucid connection settings, when not the suite's database as is (a proxy in front). */
    connection?: Record<string, unknown>
  } = {}
) {
  const app = new AppFactory().create(SCRATCH_URL)
  await app.init()
  const emitter = new Emitter(app)
  const logger = new Logger({ enabled: false })
  const db = new Database(
    {
      connection: 'primary',
      connections: { primary: (options.connection ?? connectionConfig(name)) as any },
    },
    logger,
    emitter
  )
  BaseModel.useAdapter(db.modelAdapter())
  const prefix = options.prefix ?? `t${Math.random().toString(36).slice(2, 8)}_`
  configureModels(prefix)
  const owner = options.createTables !== false
  if (owner) await createAllPayoutsTables(db.connection().schema, prefix)
  cleanup(async () => {
    if (owner) await dropPayoutsTables(db.connection().schema, prefix)
    await db.manager.closeAll()
  })
  return { db, prefix, emitter }
}

/**
 * A real database whose answer to one statement can be held back: the statement has run (and,
 * outside a transaction, committed), but its caller has not heard back, as when its connection
 * or its process stalls. `holdNext()` holds the answer to the next statement `matches` picks
 * (knex announces each statement as it sends it; the next answer handed through is that
 * one's, so nothing else may be in flight meanwhile); `reached` resolves once it ran;
 * `release()` lets it through (also at cleanup, before the tables go).
 */
export async function databaseHoldingAnAnswer(
  cleanup: (fn: () => Promise<void>) => void,
  name: string,
  matches: (query: { sql: string; bindings?: unknown[] }) => boolean
) {
  let armed = false
  let holding = false
  let ran!: () => void
  const reached = new Promise<void>((resolve) => (ran = resolve))
  let release!: () => void
  const released = new Promise<void>((resolve) => (release = resolve))
  const database = await setupDatabase(cleanup, name, {
    connection: {
      ...connectionConfig(name),
      // The held answer keeps its connection, as a stalled one does: SQLite's single
      // connection would leave the others none.
      ...(TEST_DB === 'sqlite' && { pool: { min: 1, max: 2 } }),
      // Knex hands every answer through here; a promise is waited for.
      postProcessResponse: (response: unknown) => {
        if (!holding) return response
        holding = false
        ran()
        return released.then(() => response)
      },
    },
  })
  cleanup(async () => release())
  database.db
    .connection()
    .getWriteClient()
    .on('query', (query: { sql: string; bindings?: unknown[] }) => {
      if (armed && matches(query)) [armed, holding] = [false, true]
    })
  return { ...database, holdNext: () => void (armed = true), reached, release: () => release() }
}

/** Every SQL statement the connection sends from now on, in order (a live array). */
export function recordStatements(db: Database, connection?: string): string[] {
  const statements: string[] = []
  db.connection(connection)
    .getWriteClient()
    .on('query', (query: { sql: string }) => void statements.push(query.sql.trim()))
  return statements
}

/**
 * The suite's server database (PostgreSQL or MySQL) reached on `port` (a test's proxy) with
 * the settings docs/production.md advises against connections that stop answering: opening
 * one is bounded by `connectMs`, and a session left idle inside a transaction by a dropped
 * flow is ended by the server after `idleInTransactionMs`, its locks with it (PostgreSQL's
 * `idle_in_transaction_session_timeout`, MariaDB's `idle_transaction_timeout`, in seconds).
 */
export function boundedConnection(
  base: any,
  options: { port?: number; connectMs: number; idleInTransactionMs?: number }
) {
  const port = options.port ?? base.connection.port
  if (base.client === 'mysql2') {
    const idle = options.idleInTransactionMs
    return {
      ...base,
      connection: { ...base.connection, port, connectTimeout: options.connectMs },
      pool: {
        ...base.pool,
        ...(idle && {
          afterCreate: (connection: any, done: (error: unknown, connection: unknown) => void) =>
            connection.query(
              `SET SESSION idle_transaction_timeout = ${Math.max(1, Math.round(idle / 1000))}`,
              // MySQL has no such variable (MariaDB only): its sessions keep their locks.
              (error: { code?: string } | null) =>
                done(error?.code === 'ER_UNKNOWN_SYSTEM_VARIABLE' ? null : error, connection)
            ),
        }),
      },
    }
  }
  return {
    ...base,
    connection: {
      ...base.connection,
      port,
      connectionTimeoutMillis: options.connectMs,
      ...(options.idleInTransactionMs && {
        options: `-c idle_in_transaction_session_timeout=${options.idleInTransactionMs}`,
      }),
    },
  }
}

/** The environment variable that moves the suite's server database to another port. */
export function portVariable() {
  return TEST_DB === 'mysql' ? 'MYSQL_PORT' : 'PG_PORT'
}
