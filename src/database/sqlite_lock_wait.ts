import { setTimeout as sleep } from 'node:timers/promises'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'

/** How often a write waiting for another connection's lock on the file asks again, ms. */
export const LOCK_POLL_MS = 1

/** better-sqlite3's connection, as far as this needs it. */
interface RawSqlite {
  pragma(source: string, options?: { simple: true }): unknown
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
 * Runs `write`, one autocommitted statement on SQLite, on a connection of `client`'s pool
 * (`write` gets it: `query.connection(raw)`) without stopping the event loop while another
 * connection to the file, another process's most likely, holds its write lock.
 *
 * better-sqlite3 is synchronous: with a `busy_timeout`, a locked write waits in SQLite's busy
 * handler, on the event loop, and that handler sleeps 1, 2, 5, 10, 15, 20, 25... ms between
 * its looks (then 100 ms each). Behind a worker's batch of 20 ms, an acknowledgement waited
 * 18 to 33 ms, and every request of the process waited with it. Here the statement runs with
 * `busy_timeout = 0` (the connection's own value is put back before it is released): a
 * locked write fails at once with SQLITE_BUSY, having changed nothing (SQLite undid the
 * statement whole), and runs again `LOCK_POLL_MS` later, the event loop free meanwhile. It
 * waits as long as the connection's own `busy_timeout` would have, in all, while `again()`
 * holds; then the last SQLITE_BUSY is thrown, as the connection would have.
 *
 * Only for a statement that is safe to run again after SQLITE_BUSY (any single autocommitted
 * statement is: nothing of it stays) and outside a transaction (a transaction's client runs
 * `write` as it is).
 */
export async function writingWithoutBlocking<T>(
  client: QueryClientContract,
  write: (connection: unknown) => Promise<T>,
  options: { again?: () => boolean } = {}
): Promise<T> {
  if (client.isTransaction) return write(undefined)
  const pool = client.getWriteClient().client as unknown as PoolClient
  const startedAt = performance.now()
  for (;;) {
    const connection = await pool.acquireConnection()
    let ownTimeoutMs = 0
    let failed: unknown
    try {
      ownTimeoutMs = Number(connection.pragma('busy_timeout', { simple: true })) || 0
      if (ownTimeoutMs > 0) connection.pragma('busy_timeout = 0')
      return await write(connection)
    } catch (error) {
      failed = error
    } finally {
      if (ownTimeoutMs > 0) connection.pragma(`busy_timeout = ${ownTimeoutMs}`)
      await pool.releaseConnection(connection)
    }
    const waitedMs = performance.now() - startedAt
    if (!isBusy(failed) || waitedMs >= ownTimeoutMs || options.again?.() === false) throw failed
    await sleep(LOCK_POLL_MS)
  }
}
