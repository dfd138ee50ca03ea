import { setTimeout as sleep } from 'node:timers/promises'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'

/**
 * How long a write waiting for another connection's lock on the file sleeps before it asks
 * again: `LOCK_POLL_FIRST_MS`, doubled after each refusal up to `LOCK_POLL_MAX_MS`.
 */
export const LOCK_POLL_FIRST_MS = 1
export const LOCK_POLL_MAX_MS = 4

/** better-sqlite3's connection, as far as this needs it. */
interface RawSqlite {
  pragma(source: string, options?: { simple: true }): unknown
  exec(sql: string): unknown
  readonly inTransaction: boolean
  /** Set: knex's pool closes the connection at its next checkout instead of handing it out. */
  __knex__disposed?: unknown
}

/** knex's client of the connection: its pool. */
interface PoolClient {
  acquireConnection(): Promise<RawSqlite>
  releaseConnection(connection: RawSqlite): Promise<unknown>
}

/** SQLite's "database is locked": another connection holds the file's write lock. */
function isBusy(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY')
}

/**
 * Runs `write`, one statement on better-sqlite3, on a connection of `client`'s pool (`write`
 * gets it: `query.connection(raw)`), in a transaction of its own, without stopping the event
 * loop while another connection to the file, another process's most likely, holds its lock.
 *
 * better-sqlite3 is synchronous: with a `busy_timeout`, a locked write waits in SQLite's busy
 * handler, on the event loop, and that handler sleeps 1, 2, 5, 10, 15, 20, 25... ms between
 * its looks (then 100 ms each). Behind a worker's batch of 20 ms, an acknowledgement waited
 * 18 to 33 ms, and every request of the process waited with it. Here the two steps that wait
 * for another connection run with `busy_timeout = 0` (the connection's own value is put back
 * right after each): `BEGIN IMMEDIATE`, the write lock asked for alone, refused at once while
 * another connection holds it, and `COMMIT`, which in SQLite's default journal waits for the
 * other connections' readers to end (in WAL it never waits). A refusal is asked again after
 * 1, 2, then every 4 ms (`LOCK_POLL_FIRST_MS`..`LOCK_POLL_MAX_MS`), the event loop free
 * meanwhile; `write` itself runs once the lock is held, and once. The connection is released
 * between asks for the lock, and kept while its COMMIT is asked again (the transaction is
 * open). It waits as long as the connection's own `busy_timeout` would have, in all; then the
 * last SQLITE_BUSY is thrown, as the connection would have, and nothing was written.
 *
 * `signal`, aborted (the caller gave up: its waiters were answered), stops it before anything
 * more runs, also before the first ask, and rolls back a COMMIT still refused: nothing is
 * written after it. Outside better-sqlite3 (the `sqlite3` and `libsql` drivers have no
 * `pragma()`) and inside a transaction (its client runs `write` as it is), `write` runs as it
 * is, with no transaction of its own.
 */
export async function writingWithoutBlocking<T>(
  client: QueryClientContract,
  write: (connection: unknown) => Promise<T>,
  options: { signal?: AbortSignal } = {}
): Promise<T> {
  if (client.isTransaction || client.dialect.name !== 'better-sqlite3') return write(undefined)
  const pool = client.getWriteClient().client as unknown as PoolClient
  const { signal } = options
  const startedAt = performance.now()
  /** The connection's own busy timeout: how long it would have waited, in all. */
  let timeoutMs = 0
  let pollMs = LOCK_POLL_FIRST_MS
  /** Waits before the next ask; false when no ask may follow `refused`. */
  const askAgain = async (refused: unknown) => {
    if (!isBusy(refused) || signal?.aborted) return false
    if (performance.now() - startedAt >= timeoutMs) return false
    await sleep(pollMs)
    pollMs = Math.min(pollMs * 2, LOCK_POLL_MAX_MS)
    return !signal?.aborted
  }
  for (;;) {
    const connection = await pool.acquireConnection()
    let began = false
    let refused: unknown
    try {
      // Given up while this waited for the connection or slept: nothing more runs.
      signal?.throwIfAborted()
      timeoutMs = Number(connection.pragma('busy_timeout', { simple: true })) || 0
      unblocked(connection, timeoutMs, () => connection.exec('BEGIN IMMEDIATE'))
      began = true
      const written = await write(connection)
      // The transaction stays open while its COMMIT is refused: asked again, the connection
      // kept, until it commits or the wait is over (then rolled back below).
      for (;;) {
        try {
          unblocked(connection, timeoutMs, () => connection.exec('COMMIT'))
          began = false
          return written
        } catch (error) {
          if (!(await askAgain(error))) throw error
        }
      }
    } catch (error) {
      refused = error
      if (began) rollBack(connection, error)
    } finally {
      await pool.releaseConnection(connection)
    }
    if (!(await askAgain(refused))) throw refused
  }
}

/**
 * Runs `step` with the connection's busy timeout at 0, then puts `timeoutMs` back. `pragma()`
 * prepares its statement on every call (about 10 µs), and must: SQLite applies `busy_timeout`
 * (and reads it) when the statement is prepared, so a statement prepared once and run again
 * changes nothing.
 */
function unblocked(connection: RawSqlite, timeoutMs: number, step: () => unknown) {
  if (timeoutMs > 0) connection.pragma('busy_timeout = 0')
  try {
    step()
  } finally {
    if (timeoutMs > 0) connection.pragma(`busy_timeout = ${timeoutMs}`)
  }
}

/**
 * Rolls back the transaction begun here. A connection still inside it afterwards (its
 * ROLLBACK failed) is never handed out again: the pool closes it at its next checkout
 * (`__knex__disposed`, as `boundedTransaction` does), which rolls back what it held.
 */
function rollBack(connection: RawSqlite, cause: unknown) {
  try {
    connection.exec('ROLLBACK')
  } catch {}
  if (connection.inTransaction) connection.__knex__disposed = cause
}
