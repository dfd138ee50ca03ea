/**
 * What the bench's measures share: the run's mode, the stores compared, the check rows of
 * the results table, and an app child process per store.
 */
import { rmSync } from 'node:fs'
import knex from 'knex'
import { MYSQL_CONNECTION, PG_CONNECTION, type BenchDb } from './app.ts'
import { startChild, type Child } from './ipc.ts'

/** BENCH_QUICK=1: shorter runs (development); its figures never replace results.json. */
export const QUICK = process.env.BENCH_QUICK === '1'
/** Scratch folder of the bench (SQLite files, quick results). */
export const TMP = new URL('./tmp/', import.meta.url)
const APP_SERVER = new URL('./app_server.ts', import.meta.url)

/** When the bench started (ms since the epoch). */
export const startedAt = Date.now()
/** Prints one progress line. */
export const log = (line: string) => console.log(line)
/** Seconds since the bench started, for progress lines. */
export const elapsed = () => `${((Date.now() - startedAt) / 1000).toFixed(0)}s`

/** One store the bench runs the app on. */
export interface DbConfig {
  key: string
  db: BenchDb
  wal: boolean
  label: string
}

/** The stores compared, in the order they run. */
export const CONFIGS: DbConfig[] = [
  {
    key: 'sqlite',
    db: 'sqlite',
    wal: false,
    label: 'SQLite as Lucid opens it (rollback journal, synchronous=FULL)',
  },
  { key: 'sqlite-wal', db: 'sqlite', wal: true, label: 'SQLite, WAL + synchronous=NORMAL' },
  { key: 'pg', db: 'pg', wal: false, label: 'PostgreSQL 127.0.0.1:5432 (pool 2..10)' },
  { key: 'mysql', db: 'mysql', wal: false, label: 'MySQL/MariaDB 127.0.0.1:3306 (pool 2..10)' },
]

/** One row of the results table: a figure, and whether it meets its target. */
export interface Check {
  id: string
  measure: string
  db: string
  value: number | null
  unit: string
  target: string
  /** true / false against the target, null for figures reported without a target. */
  pass: boolean | null
}

function sqliteFile(name: string) {
  return new URL(`./${name}-${process.pid}.sqlite`, TMP).pathname
}

function removeSqlite(file: string) {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(file + suffix, { force: true })
}

/** Why a configuration cannot run here (its server away), or null. */
export async function unavailable(config: DbConfig): Promise<string | null> {
  if (config.db === 'sqlite') return null
  const name = config.db === 'pg' ? 'PostgreSQL' : 'MySQL'
  const reason = await serverAvailable(config.db)
  return reason ? `${name} unavailable: ${reason}` : null
}

/** Whether the server answers on 127.0.0.1 within 3 s; the reason when it does not. */
async function serverAvailable(db: 'pg' | 'mysql'): Promise<string | null> {
  const client = knex({
    client: db === 'pg' ? 'pg' : 'mysql2',
    connection: (db === 'pg'
      ? { ...PG_CONNECTION, connectionTimeoutMillis: 3000 }
      : { ...MYSQL_CONNECTION, connectTimeout: 3000 }) as any,
    pool: { min: 0, max: 1 },
    acquireConnectionTimeout: 3000,
  })
  try {
    await client.raw('select 1')
    return null
  } catch (error) {
    return (error as Error).message
  } finally {
    await client.destroy().catch(() => {})
  }
}

/**
 * Runs `fn` against a fresh app child (bench/app_server.ts) on `config`'s store, on a
 * fresh SQLite file (named after `name`, so that two apps of one store have one each; on
 * PostgreSQL and MySQL each app has its own table prefix), with app_server's switches
 * `args`; stops it and removes the file afterwards.
 */
export async function withApp<T>(
  config: DbConfig,
  fn: (child: Child<{ url: string }>) => Promise<T>,
  execArgv: string[] = [],
  name: string = config.key,
  args: string[] = []
): Promise<T> {
  const file = sqliteFile(name)
  removeSqlite(file)
  const child = await startChild<{ url: string }>(APP_SERVER, {
    args: [config.db, file, ...(config.wal ? ['--wal'] : []), ...args],
    execArgv,
  })
  try {
    return await fn(child)
  } finally {
    await child.stop()
    removeSqlite(file)
  }
}
