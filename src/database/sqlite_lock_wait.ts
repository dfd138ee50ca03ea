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
 * Runs `write`, one autocommitted statement on better-sqlite3, on a connection of `client`'s pool
 * (`write` gets it: `query.connection(raw)`) without stopping the event loop while another
 * connection to the file, another process's most likely, holds its write lock.
 *
 * better-sqlite3 is synchronous: with a `busy_timeout`, a locked write waits in SQLite's busy
 * handler, on the event loop, and that handler sleeps 1, 2, 5, 10, 15, 20, 25... ms between
 * its looks (then 100 ms each). Behind a worker's batch of 20 ms, an acknowledgement waited
 * 18 to 33 ms, and every request of the process waited with it. Here the statement runs with
 * the write lock asked for first, alone, with `busy_timeout = 0` (`BEGIN IMMEDIATE`; the
 * connection's own value is put back at once): while another connection holds the lock it is
 * refused at once with SQLITE_BUSY, nothing run, and asked again after 1, 2, then every 4 ms
 * (`LOCK_POLL_FIRST_MS`..`LOCK_POLL_MAX_MS`), the event loop free meanwhile. Once it is held,
 * `write` runs and commits. It waits as long as the connection's own `busy_timeout` would
 * have, in all, while `again()` holds, which is asked again right before each new ask; then
 * the last SQLITE_BUSY is thrown, as the connection would have.
 *
 * Only for one statement that needs no transaction of its own, and outside a transaction (a
 * transaction's client runs `write` as it is): `write` runs inside the one begun here.
 */
export async function writingWithoutBlocking<T>(
  client: QueryClientContract,
  write: (connection: unknown) => Promise<T>,
  options: { again?: () => boolean } = {}
): Promise<T> {
  // Another driver (sqlite3, libsql) has no `pragma()`, and waits its own way.
  if (client.isTransaction || client.dialect.name !== 'better-sqlite3') return write(undefined)
  const pool = client.getWriteClient().client as unknown as PoolClient
  const again = options.again ?? (() => true)
  const startedAt = performance.now()
  let pollMs = LOCK_POLL_FIRST_MS
  let refused: unknown
  /** The connection's own busy timeout: how long it would have waited, in all. */
  let timeoutMs = 0
  for (;;) {
    const connection = await pool.acquireConnection()
    let began = false
    try {
      // Its waiters were failed while this slept or waited for the connection: nothing more
      // runs for them (a row stored now would be answered 503 and delivered again).
      if (refused !== undefined && !again()) throw refused
      // The write lock asked for alone, without waiting: refused at once while another
      // connection holds it, and cheap to ask again (the statement is built and run only once
      // the lock is held). The connection's own timeout is back before anything else runs:
      // a COMMIT in the rollback journal still waits for readers as it always did.
      const ownTimeoutMs = Number(connection.pragma('busy_timeout', { simple: true })) || 0
      timeoutMs = ownTimeoutMs
      if (ownTimeoutMs > 0) connection.pragma('busy_timeout = 0')
      try {
        connection.exec('BEGIN IMMEDIATE')
        began = true
      } finally {
        if (ownTimeoutMs > 0) connection.pragma(`busy_timeout = ${ownTimeoutMs}`)
      }
      const written = await write(connection)
      connection.exec('COMMIT')
      began = false
      return written
    } catch (error) {
      refused = error
      if (began) {
        try {
          connection.exec('ROLLBACK')
        } catch {}
      }
    } finally {
      await pool.releaseConnection(connection)
    }
    const waitedMs = performance.now() - startedAt
    if (!isBusy(refused) || waitedMs >= timeoutMs || !again()) throw refused
    await sleep(pollMs)
    pollMs = Math.min(pollMs * 2, LOCK_POLL_MAX_MS)
  }
}
