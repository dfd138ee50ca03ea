import type { QueryClientContract, TransactionClientContract } from '@adonisjs/lucid/types/database'
import type { Knex } from 'knex'
import type { DateTime } from 'luxon'

/** What the dialect predicates need of a Lucid query or transaction client. */
type DialectClient = Pick<QueryClientContract, 'dialect'>

/** Lucid dialects whose SQL has INSERT ... ON CONFLICT DO NOTHING ... RETURNING. */
export const RETURNING_DIALECTS = new Set([
  'postgres',
  'redshift',
  'better-sqlite3',
  'sqlite3',
  'libsql',
])

/** Whether `INSERT`/`UPDATE ... RETURNING` (and `ON CONFLICT DO NOTHING`) work here: not on MySQL. */
export function hasReturning(client: DialectClient): boolean {
  return RETURNING_DIALECTS.has(client.dialect.name)
}

/** Whether this is PostgreSQL (LISTEN/NOTIFY). */
export function isPostgres(client: DialectClient): boolean {
  return client.dialect.name === 'postgres'
}

const SQLITE_DIALECTS = new Set(['sqlite3', 'better-sqlite3', 'libsql'])

/** Whether this is SQLite: one writer for the whole file, no row locks. */
export function isSqlite(client: QueryClientContract): boolean {
  return SQLITE_DIALECTS.has(client.dialect.name)
}

/**
 * How long a SQLite process that wrote should leave the file's write lock free so that a
 * process that waited for it through its last transaction (`heldMs`) gets it. SQLite's busy
 * handler (what `busy_timeout` installs) queues nobody: a waiter sleeps and polls, after 1,
 * 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, then 100 ms each, so a process that commits and
 * begins its next transaction at once takes the lock again before the waiter looks, batch
 * after batch (an insert behind ten back-to-back transactions of 50 ms waited 554 ms). A
 * waiter has waited at most `heldMs` when it ends, and its next poll comes within its current
 * sleep, at most max(5, heldMs) + 2 ms and 100 ms; 2 ms more let it be scheduled.
 */
export function sqliteHandoverMs(heldMs: number): number {
  return Math.min(100, Math.max(5, Math.ceil(heldMs)) + 2) + 2
}

/**
 * The query narrowed to one account's rows, without offering the account's index as the way
 * in on SQLite. SQLite keeps no statistics unless the app runs ANALYZE, and without them it
 * takes an equality on the first column of a unique index (`(account, delivery_id)`) for
 * narrow, and walks every row of the account (all of them, with one account) where another
 * index reads a few: the unary `+` takes the term out of its index choice. Elsewhere a plain
 * `where`: the servers keep statistics.
 */
export function whereAccountNotLeading<Query>(
  client: QueryClientContract,
  query: Query,
  account: string
): Query {
  const q = query as any
  return isSqlite(client)
    ? q.whereRaw('+?? = ?', ['account', account])
    : q.where('account', account)
}

/**
 * MySQL: whether one multi-row INSERT numbers its rows consecutively, in VALUES order, from
 * the LAST_INSERT_ID() it answers. InnoDB promises it for an INSERT whose row count is known
 * ("simple inserts") when `innodb_autoinc_lock_mode` is 0 or 1 (MariaDB's default is 1), and
 * only with `auto_increment_increment` = 1 (a multi-primary cluster sets another step).
 * Read on the caller's connection (the step can be a session's), one statement; otherwise
 * (mode 2, MySQL 8's default) the rows are inserted one by one.
 */
export async function numbersConsecutively(client: QueryClientContract): Promise<boolean> {
  if (!isMysql(client)) return false
  const [rows] = await client.rawQuery(
    'select @@innodb_autoinc_lock_mode as mode, @@auto_increment_increment as step'
  )
  const settings = (rows as Array<{ mode: unknown; step: unknown }>)[0]
  return Number(settings?.mode ?? Number.NaN) <= 1 && Number(settings?.step) === 1
}

/** Whether `SELECT ... FOR UPDATE` means something here (SQLite has one writer instead). */
export function locksRows(client: QueryClientContract): boolean {
  return !isSqlite(client)
}

/**
 * On SQLite, makes a transaction a write transaction from its first statement, as `BEGIN
 * IMMEDIATE` would (knex only says `BEGIN`): a DELETE that matches nothing takes the file's
 * RESERVED lock. A transaction that reads first holds SHARED and must upgrade at its first
 * write; while another process holds RESERVED, SQLite refuses that upgrade at once with
 * SQLITE_BUSY ("database is locked"), without the busy timeout, since waiting could deadlock.
 * Taken before any read, the lock is waited for like any statement's (the busy timeout:
 * better-sqlite3's 5 s), so processes writing one file queue. Elsewhere nothing is run.
 */
export async function beginWriting(trx: TransactionClientContract, table: string) {
  if (!isSqlite(trx)) return
  await trx.rawQuery('DELETE FROM ?? WHERE 0', [table])
}

const MYSQL_DIALECTS = new Set(['mysql'])

/** Whether this is MySQL or MariaDB (Lucid names both dialects `mysql`). */
export function isMysql(client: DialectClient): boolean {
  return MYSQL_DIALECTS.has(client.dialect.name)
}

/**
 * Whether a knex schema builder (`this.schema` in a migration, `db.connection().schema`)
 * builds for MySQL or MariaDB: knex names its dialect on the builder's client.
 */
export function buildsForMysql(schema: Knex.SchemaBuilder): boolean {
  return MYSQL_DIALECTS.has((schema as unknown as { client: { dialect: string } }).client.dialect)
}

/**
 * Whether claims can read and lock due rows with `SELECT ... FOR UPDATE SKIP LOCKED` when
 * there is no RETURNING: MySQL 8 and MariaDB 10.6 have it (the supported versions).
 */
export function skipsLockedRows(client: QueryClientContract): boolean {
  return isMysql(client)
}

/**
 * Options of the plugin's transactions. MySQL's default isolation, REPEATABLE READ, makes a
 * locking read of a row that does not exist yet take a gap lock, and two instances that both
 * then insert into the gap deadlock; at READ COMMITTED (PostgreSQL's default, the semantics
 * the ledger and the inbox are written for) locking reads lock only the rows they find.
 */
export function transactionOptions(
  client: QueryClientContract
): { isolationLevel: 'read committed' } | undefined {
  return isMysql(client) ? { isolationLevel: 'read committed' } : undefined
}

/**
 * Whether the database chose this transaction as a deadlock's victim (MySQL/MariaDB 1213,
 * PostgreSQL 40P01): it was rolled back whole, and running it again is the remedy.
 */
export function isDeadlock(error: unknown): boolean {
  const { code, errno } = (error ?? {}) as { code?: string; errno?: number }
  return code === 'ER_LOCK_DEADLOCK' || errno === 1213 || code === '40P01'
}

/** Rows an UPDATE touched: Lucid answers a count on some dialects, `[count]` on others. */
export function affectedRows(result: unknown): number {
  return Number(Array.isArray(result) ? result[0] : result)
}

/**
 * Whether timestamps keep fractions of a second as the plugin writes them (the dialect's
 * `dateTimeFormat`): PostgreSQL does; SQLite and MySQL (`yyyy-MM-dd HH:mm:ss`) do not.
 */
export function keepsFractionalSeconds(client: Pick<QueryClientContract, 'dialect'>): boolean {
  // Quoted literals ('T') are not fields of the format.
  return client.dialect.dateTimeFormat.replace(/'[^']*'/g, '').includes('S')
}

/** A timestamp as the database keeps it once written: whole seconds where fractions are dropped. */
export function asStored(client: Pick<QueryClientContract, 'dialect'>, value: DateTime): DateTime {
  return keepsFractionalSeconds(client) ? value : value.startOf('second')
}
