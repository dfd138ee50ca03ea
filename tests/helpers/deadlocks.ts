import { setTimeout as sleep } from 'node:timers/promises'
import type { Database } from '@adonisjs/lucid/database'
import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { TEST_DB } from './database.ts'

/**
 * Real deadlocks between the plugin's transactions and another transaction on a connection
 * of the test's own (another instance of the app). On MySQL/MariaDB the other transaction
 * writes more rows, so InnoDB rolls back the plugin's (the lighter) as the victim; on
 * PostgreSQL the other transaction's `deadlock_timeout` is raised, so the plugin's statement,
 * which waits first, runs the deadlock check first and is the one cancelled.
 */

/** SQLite cannot be the victim of a deadlock: why such tests are skipped. */
export const ONE_WRITER =
  'SQLite has one writer for the whole file and no row locks: no deadlock can be built'

/** The rows of a raw query's answer: mysql2 answers `[rows, fields]`, pg `{ rows }`. */
export function rowsOf<Row>(result: any): Row[] {
  return TEST_DB === 'mysql' ? result[0] : result.rows
}

/**
 * Another instance's transaction, on a connection of its own, READ COMMITTED as the plugin's
 * are; rolled back in the test's cleanup if still open (before the tables are dropped).
 */
export async function otherTransaction(db: Database, cleanup: (fn: () => Promise<void>) => void) {
  // Options second: Lucid's `transaction(options)`, as typed, takes them for its callback
  // and gives knex none (the transaction then runs at the server's default isolation).
  const client = db.connection()
  const begin = client.transaction as unknown as (
    callback: undefined,
    options: { isolationLevel: 'read committed' }
  ) => Promise<TransactionClientContract>
  const trx = await begin.call(client, undefined, { isolationLevel: 'read committed' })
  cleanup(async () => {
    if (!trx.isCompleted) await trx.rollback()
  })
  const [{ id }] = rowsOf<{ id: number }>(
    await trx.rawQuery(
      TEST_DB === 'mysql' ? 'select connection_id() as id' : 'select pg_backend_pid() as id'
    )
  )
  // Its own deadlock check comes long after the plugin's, which then is the victim.
  if (TEST_DB === 'pg') await trx.rawQuery(`set local deadlock_timeout = '60s'`)
  return { trx, id }
}

/**
 * The transactions that wait for a lock `other` holds, each named by its transaction id
 * (each run of the plugin's batch is a transaction of its own). InnoDB refreshes these tables
 * only when they were not read for 0.1 s (see `POLL_MS`).
 */
export async function waitingOn(db: Database, other: { id: number }): Promise<string[]> {
  const result =
    TEST_DB === 'mysql'
      ? await db.rawQuery(
          `select r.trx_id as attempt from information_schema.innodb_lock_waits w
           join information_schema.innodb_trx r on r.trx_id = w.requesting_trx_id
           join information_schema.innodb_trx b on b.trx_id = w.blocking_trx_id
           where b.trx_mysql_thread_id = ?`,
          [other.id]
        )
      : await db.rawQuery(
          `select coalesce(backend_xid::text, pid || '@' || xact_start) as attempt
           from pg_stat_activity where ? = any(pg_blocking_pids(pid))`,
          [other.id]
        )
  return rowsOf<{ attempt: unknown }>(result).map((row) => String(row.attempt))
}

/** Between two looks at the lock waits: InnoDB's tables stay as they were while read more often. */
const POLL_MS = 150

/**
 * Resolves with the id of the first transaction not in `seen` that waits for `other` (and
 * adds it to `seen`), or with null once `settled()` says the inserts settled.
 */
export async function nextWaiter(
  db: Database,
  other: { id: number },
  seen: Set<string>,
  settled: () => boolean
): Promise<string | null> {
  const until = Date.now() + 10_000
  while (Date.now() < until) {
    if (settled()) return null
    const waiter = (await waitingOn(db, other)).find((attempt) => !seen.has(attempt))
    if (waiter) {
      seen.add(waiter)
      return waiter
    }
    await sleep(POLL_MS)
  }
  throw new Error('the plugin never waited for the other transaction: the scenario did not build')
}
