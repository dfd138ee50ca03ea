import type { QueryClientContract, TransactionClientContract } from '@adonisjs/lucid/types/database'
import { E_PAYOUTS_COMMIT_UNCONFIRMED } from '../errors.ts'
import { safeCause, safeError } from '../safe_error.ts'
import { withDeadline } from '../time_bounds.ts'
import debug from '../debug.ts'
import { beginWriting, isDeadlock, locksRows, transactionOptions } from './dialects.ts'

/**
 * Knex's own statement timeout, when `ms` > 0: a statement past it fails, and its
 * connection is destroyed instead of going back to the pool (it may be dead).
 */
export function withStatementTimeout<Query extends { timeout(ms: number): Query }>(
  query: Query,
  ms: number
): Query {
  return ms > 0 ? query.timeout(ms) : query
}

/**
 * After a statement of ours timed out, the idle connections of its pool most likely
 * share its fate (a NAT or proxy dropped every flow at once): each is marked so the pool
 * destroys it at its next checkout and opens a fresh one, instead of handing out one dead
 * connection after another, each to cost a request its deadline. Connections in use are
 * left to their own statements. SQLite has no socket to stall.
 */
export function dropIdleConnections(client: QueryClientContract, reason: Error) {
  if (!locksRows(client)) return
  const free: Array<{ resource?: Record<string, unknown> }> =
    (client.getWriteClient() as any)?.client?.pool?.free ?? []
  for (const idle of free) if (idle.resource) idle.resource.__knex__disposed = reason
}

/**
 * How many times in all a transaction is run while the database picks it as a deadlock's
 * victim (`retryingDeadlocks`): InnoDB's own advice is to issue such a transaction again.
 */
export const DEADLOCK_ATTEMPTS = 3

/**
 * Whether the database rolled the transaction back as a deadlock's victim: at one of its
 * statements, or at its COMMIT (then rolled back for certain too).
 */
function rolledBackByDeadlock(error: unknown): boolean {
  return (
    isDeadlock(error) || (error instanceof E_PAYOUTS_COMMIT_UNCONFIRMED && isDeadlock(error.cause))
  )
}

/**
 * Runs `transaction` (one statement, or one transaction of its own) again when the database
 * rolled it back as a deadlock's victim, up to `DEADLOCK_ATTEMPTS` times in all: nothing of
 * it was stored, so another run does exactly what the first would have. InnoDB picks such
 * victims among instances writing the same rows side by side (PostgreSQL among those that
 * wait on each other); failing instead would fail a webhook, or an execute whose payout the
 * service made. Not inside a caller's transaction (`client.isTransaction`, a host test's
 * global one): the deadlock rolled back (MySQL) or aborted (PostgreSQL) that one too, and
 * running it again is the caller's work; nor once `again()` says no (a bound was reached).
 */
export async function retryingDeadlocks<T>(
  client: QueryClientContract,
  what: string,
  transaction: () => Promise<T>,
  options: { again?: () => boolean; attempts?: number } = {}
): Promise<T> {
  const attempts = options.attempts ?? DEADLOCK_ATTEMPTS
  for (let attempt = 1; ; attempt++) {
    try {
      return await transaction()
    } catch (error) {
      const again = attempt < attempts && !client.isTransaction && (options.again?.() ?? true)
      if (!again || !rolledBackByDeadlock(error)) throw error
      debug('%s: a deadlock rolled it back, attempt %d', what, attempt + 1)
    }
  }
}

/** A transaction's work. */
type Work<T> = (trx: TransactionClientContract) => Promise<T>

/** What `boundedTransaction` runs under. */
export interface TransactionBound {
  /** Past this, `E_PAYOUTS_TIMEOUT`; 0 waits forever. */
  timeoutMs: number
  /** Named in the timeout error. */
  what: string
  /** A table the transaction writes: on SQLite its write lock is taken first (see `beginWriting`). */
  writes: string
}

/**
 * A transaction bounded in time: past `timeoutMs` it rejects with `E_PAYOUTS_TIMEOUT` and its
 * connection is dropped, so a database that stops answering without closing the socket
 * (a NAT or proxy dropping it silently) cannot hold the caller, or the pool slot, forever.
 * The connection is checked out here and handed to the transaction, so it can be dropped
 * even when the stall hits `BEGIN`. Dropping closes its socket (the driver's `end()` does
 * that while a query is in flight): the pending query fails, the server rolls back when it
 * hears of it, and the pool never hands the connection out again. If COMMIT reached the
 * server before the stall, the work is done and only the answer is lost: every caller here
 * is safe to repeat (the ledger ignores what it has seen; the outbox fires un-notified
 * changes later). SQLite has no socket to stall; its transaction is only waited for, and
 * takes the file's write lock before its first read, so another process writing the same
 * file makes it wait instead of failing with "database is locked".
 *
 * It resolves only once its COMMIT is confirmed (`commitConfirmed`); otherwise it rejects
 * with `E_PAYOUTS_COMMIT_UNCONFIRMED` and its connection is closed instead of going back to
 * the pool: a COMMIT that failed may leave the connection inside its transaction (SQLite's
 * SQLITE_BUSY at COMMIT, in its default journal mode, while another process reads), where
 * every later statement of the pool's next user would go, uncommitted. Closing it rolls back
 * what did not commit.
 */
export function boundedTransaction<T>(
  client: QueryClientContract,
  { timeoutMs: ms, what, writes }: TransactionBound,
  work: Work<T>
): Promise<T> {
  // Already inside a transaction (a host test's global transaction): a savepoint of it, which
  // takes no options and no connection of its own, and is bounded by its outer one.
  if (client.isTransaction) {
    return confirmed(what, (run) =>
      client.transaction(
        run(async (trx) => {
          if (!locksRows(trx)) await beginWriting(trx, writes)
          return work(trx)
        })
      )
    )
  }
  const sqlite = !locksRows(client)
  const writing: Work<T> = sqlite
    ? async (trx) => {
        await beginWriting(trx, writes)
        return work(trx)
      }
    : work
  const options = transactionOptions(client)
  const pool = (client.getWriteClient() as any).client
  let connection: Record<string, unknown> | undefined
  let released = false
  const release = () => {
    if (released || !connection) return
    released = true
    void Promise.resolve(pool.releaseConnection(connection)).catch(() => {})
  }
  let expired: Error | undefined
  const running = (async (): Promise<T> => {
    connection = await pool.acquireConnection()
    // Given up before the pool answered: back to the pool (dropped, see below).
    if (expired) return release() as never
    try {
      return await confirmed<T>(what, (run) =>
        client.transaction(run(writing), { ...options, connection } as any)
      )
    } catch (error) {
      // Closed by the pool at its next checkout, which opens another.
      if (error instanceof E_PAYOUTS_COMMIT_UNCONFIRMED) connection!.__knex__disposed = error
      throw error
    } finally {
      release()
    }
  })()
  if (sqlite || !(ms > 0)) return running
  return withDeadline(running, ms, what, (error) => {
    expired = error
    dropIdleConnections(client, error)
    if (!connection) return
    connection.__knex__disposed = error
    void Promise.resolve(pool.destroyRawConnection(connection)).catch(() => {})
    release()
  })
}

/**
 * Settles once the transaction's COMMIT (a savepoint's RELEASE) succeeded; rejects with
 * `E_PAYOUTS_COMMIT_UNCONFIRMED` when it failed. Lucid's `commit()` resolves, and runs the
 * transaction's `after('commit')` hooks, even when the COMMIT statement failed (the
 * connection dropped or given up at its deadline): knex reports that failure only on the
 * transaction's `executionPromise`. A hook that tells what the transaction wrote waits for
 * this first.
 */
export async function commitConfirmed(trx: TransactionClientContract, what: string) {
  const execution = (trx.knexClient as { executionPromise?: Promise<unknown> }).executionPromise
  if (!execution) return
  await execution.then(
    () => {},
    (error) => {
      const safe = safeError(error)
      throw new E_PAYOUTS_COMMIT_UNCONFIRMED([what, safe.message], { cause: safeCause(error) })
    }
  )
}

/**
 * Runs a managed transaction (`transaction(run(work))`) and resolves with its work's result
 * only once its COMMIT is confirmed (`commitConfirmed`).
 */
async function confirmed<T>(
  what: string,
  transaction: (run: (work: Work<T>) => Work<T>) => Promise<T>
): Promise<T> {
  let opened: TransactionClientContract | undefined
  const result = await transaction((work) => (trx) => {
    opened = trx
    return work(trx)
  })
  if (opened) await commitConfirmed(opened, what)
  return result
}
