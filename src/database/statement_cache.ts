/**
 * Prepared statements kept and reused on better-sqlite3 connections (issue #30).
 *
 * knex's better-sqlite3 client prepares every query it runs (`connection.prepare(sql)`), and
 * better-sqlite3 13 compiles a row factory per statement besides: on an inline inbox batch,
 * preparing took a third as long as running the statements, about 140 µs each, twelve per
 * batch and one per acknowledgement. The same texts come back all the time (a batch's
 * statements differ only by how many rows they name), so each connection keeps its last
 * statements, by text, and hands the kept one out again.
 *
 * Only knex's own queries see them: the client's `_query` is given a view of the connection
 * whose `prepare` answers from the cache (the connection itself is untouched, so code that
 * prepares on a raw connection gets statements of its own, to configure as it likes). A
 * query that sets its own `safeIntegers` (which knex sets on the statement) is prepared as
 * before. A kept statement is the same as a new one: bindings are bound at each run, and
 * SQLite prepares it again by itself when the schema changed since.
 */

/** better-sqlite3's connection, as far as this needs it. */
interface RawSqlite {
  prepare(sql: string): unknown
}

/** knex's better-sqlite3 client, as far as this needs it. */
interface SqliteKnexClient {
  driverName?: string
  /** The knex config: a transaction's client shares its client's (`makeTxClient`). */
  config?: object
  _query(connection: RawSqlite, obj: { sql?: string; options?: unknown }): Promise<unknown>
}

/** What Lucid's query client gives of its knex instance. */
interface QueryClientLike {
  dialect: { name: string }
  getWriteClient(): unknown
  getReadClient?(): unknown
}

/** Statements longer than this are prepared each time: rare, and the biggest to keep. */
export const MAX_CACHED_SQL_LENGTH = 4096

/** How a client's cache has done since it was installed (tests, the bench). */
export interface StatementCacheStats {
  /** The most statements each connection keeps. */
  readonly size: number
  hits: number
  misses: number
}

/**
 * The knex configs whose queries keep their statements (a client's and its transactions'),
 * one registry per process, where the patched `_query` reads it: a second copy of this module
 * (two versions of the plugin in one app) registers into the same one.
 */
const REGISTRY = Symbol.for('@svc/adonis-payouts/statement-cache')
const caching: WeakMap<object, StatementCacheStats> = ((globalThis as Record<symbol, unknown>)[
  REGISTRY
] ??= new WeakMap()) as WeakMap<object, StatementCacheStats>
/** Each connection's view: the connection, with a `prepare` that keeps what it prepares. */
const views = new WeakMap<RawSqlite, RawSqlite>()
/** Marks a knex client class whose `_query` looks for its config in the registry. */
const PATCHED = Symbol.for('@svc/adonis-payouts/statement-cache/patched')
/** knex names each savepoint apart (`SAVEPOINT trx3;`): used once, never kept. */
const SAVEPOINT = /^(savepoint|release savepoint|rollback to savepoint) /i

/** Whether `options` (a query's `.options()`) sets `safeIntegers`, which knex sets on the statement. */
function setsSafeIntegers(options: unknown): boolean {
  return (
    typeof options === 'object' &&
    options !== null &&
    typeof (options as { safeIntegers?: unknown }).safeIntegers === 'boolean'
  )
}

/**
 * Keeps the last `size` statements of each connection of `client`'s knex instance (its read
 * instance too, when it has replicas), when its driver is better-sqlite3 and `size` is more
 * than 0; once per knex instance (a second call keeps the first size). Answers the cache's
 * counts, or null when nothing was installed.
 */
export function cacheSqliteStatements(
  client: QueryClientLike,
  size: number
): StatementCacheStats | null {
  if (client.dialect.name !== 'better-sqlite3' || !(size > 0)) return null
  const writer = client.getWriteClient()
  const stats = install(knexClientOf(writer), size)
  const reader = client.getReadClient?.()
  if (reader && reader !== writer) install(knexClientOf(reader), size)
  return stats
}

/** The cache's counts on `client`'s knex instance, or null when it has none (tests). */
export function statementCacheOf(client: QueryClientLike): StatementCacheStats | null {
  const config = knexClientOf(client.getWriteClient())?.config
  return (config && caching.get(config)) ?? null
}

function knexClientOf(instance: unknown): SqliteKnexClient | null {
  const knexClient = (instance as { client?: SqliteKnexClient } | null)?.client
  return knexClient && typeof knexClient._query === 'function' ? knexClient : null
}

function install(knexClient: SqliteKnexClient | null, size: number): StatementCacheStats | null {
  const config = knexClient?.config
  if (!knexClient || knexClient.driverName !== 'better-sqlite3' || !config) return null
  const installed = caching.get(config)
  if (installed) return installed
  // On the class: a transaction's client is made from it, not from this client.
  patch(Object.getPrototypeOf(knexClient) as SqliteKnexClient & { [PATCHED]?: true })
  const stats: StatementCacheStats = { size, hits: 0, misses: 0 }
  caching.set(config, stats)
  return stats
}

/** Gives `_query` of a knex client class the cached view of a connection whose config caches. */
function patch(proto: SqliteKnexClient & { [PATCHED]?: true }) {
  if (Object.hasOwn(proto, PATCHED)) return
  const original = proto._query
  proto._query = function (this: SqliteKnexClient, connection, obj) {
    const stats = this.config ? caching.get(this.config) : undefined
    if (!stats || !connection || setsSafeIntegers(obj?.options)) {
      return original.call(this, connection, obj)
    }
    return original.call(this, viewOf(connection, stats), obj)
  }
  Object.defineProperty(proto, PATCHED, { value: true })
}

function viewOf(connection: RawSqlite, stats: StatementCacheStats): RawSqlite {
  let view = views.get(connection)
  if (view) return view
  const kept = new Map<string, unknown>()
  const prepare = (sql: string) => {
    if (sql.length > MAX_CACHED_SQL_LENGTH || SAVEPOINT.test(sql)) return connection.prepare(sql)
    const statement = kept.get(sql)
    if (statement !== undefined) {
      stats.hits++
      // The most recently used last: the first is the one to drop.
      kept.delete(sql)
      kept.set(sql, statement)
      return statement
    }
    stats.misses++
    const prepared = connection.prepare(sql)
    kept.set(sql, prepared)
    if (kept.size > stats.size) kept.delete(kept.keys().next().value!)
    return prepared
  }
  view = Object.create(connection, { prepare: { value: prepare } }) as RawSqlite
  views.set(connection, view)
  return view
}
