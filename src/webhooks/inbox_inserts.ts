import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { isSqlite, skipsLockedRows } from '../database/dialects.ts'
import { writingWithoutBlocking } from '../database/sqlite_lock_wait.ts'
import { dbDate } from '../database/dates.ts'
import { withDeadline } from '../time_bounds.ts'
import { traceParentOrNull } from '../tracing/trace_parent.ts'
import {
  boundedTransaction,
  dropIdleConnections,
  retryingDeadlocks,
  withStatementTimeout,
} from '../database/deadline.ts'
import {
  batches,
  MAX_BATCH,
  own,
  type InboxContext,
  type InboxDeliveryInput,
} from './inbox_context.ts'

interface PendingInsert {
  input: InboxDeliveryInput
  resolve: (outcome: 'stored' | 'duplicate') => void
  reject: (error: unknown) => void
}

/** Unique-violation codes of SQLite, PostgreSQL and MySQL/MariaDB. */
function isUniqueViolation(error: unknown): boolean {
  const code = (error as { code?: string }).code
  return (
    code === 'SQLITE_CONSTRAINT_UNIQUE' ||
    code === 'SQLITE_CONSTRAINT_PRIMARYKEY' ||
    code === '23505' ||
    code === 'ER_DUP_ENTRY'
  )
}

/**
 * Group commit here: one statement per batch with RETURNING, or on MySQL one INSERT of the
 * batch (a batch with a stored id: one transaction that reads which ids exist and inserts the
 * rest in one INSERT).
 */
export function groupsInserts(context: InboxContext, client: QueryClientContract): boolean {
  return batches(context, client) || (!context.options.rowByRow && skipsLockedRows(client))
}

/**
 * The inbox's insert path (`InboxStore.insert`): deliveries arriving together are queued and
 * stored in one statement and one commit per batch, each waiter told its own outcome.
 */
export class InboxInserts {
  constructor(private context: InboxContext) {}

  /** Queues a delivery; resolves once its row is committed, or found stored already. */
  insert(input: InboxDeliveryInput): Promise<'stored' | 'duplicate'> {
    return new Promise((resolve, reject) => {
      this.#waiting.push({ input, resolve, reject })
      if (!this.#flushing) {
        this.#flushing = true
        // After this turn's I/O callbacks, so every delivery read in this turn joins.
        setImmediate(() => void this.#flush())
      }
    })
  }

  #waiting: PendingInsert[] = []
  #flushing = false

  async #flush() {
    while (this.#waiting.length > 0) {
      const batch = this.#waiting.splice(0, MAX_BATCH)
      const client = this.context.client()
      if (!groupsInserts(this.context, client)) {
        // Row by row forced: one row at a time, each delivery told its own outcome.
        for (const entry of batch) {
          await this.#bounded((expired) => this.#insertOne(client, entry.input, expired)).then(
            entry.resolve,
            entry.reject
          )
        }
        continue
      }
      try {
        const outcomes = await this.#bounded((expired) =>
          this.#insertBatch(
            client,
            batch.map((entry) => entry.input),
            expired
          )
        )
        batch.forEach((entry, index) => entry.resolve(outcomes[index]))
      } catch (error) {
        for (const entry of batch) entry.reject(error)
      }
    }
    this.#flushing = false
  }

  /**
   * A stuck statement fails its own waiters and lets the loop go on with the next batch.
   * Were it awaited unbounded, one connection that stops answering without closing would
   * hold every later delivery behind it, for good. The bound covers every run of a
   * deadlock's victim: `expired` tells the insert that its waiters were failed, so it runs
   * nothing more for them.
   */
  #bounded<T>(insert: (expired: AbortSignal) => Promise<T>): Promise<T> {
    const deadline = new AbortController()
    return withDeadline(
      insert(deadline.signal),
      this.context.options.insertTimeoutMs ?? 0,
      'inbox insert',
      (error) => {
        deadline.abort(error)
        dropIdleConnections(this.context.client(), error)
      }
    )
  }

  /**
   * `insert` run again while the database rolls it back as a deadlock's victim (at 500
   * deliveries/s InnoDB picks such victims among instances inserting side by side, and
   * PostgreSQL between two inserting the same ids; failing the batch instead would answer
   * each of its deliveries 503), but not once its waiters were failed at the bound
   * (`expired`).
   */
  #retryingDeadlocks<T>(
    client: QueryClientContract,
    expired: AbortSignal,
    insert: () => Promise<T>
  ): Promise<T> {
    return retryingDeadlocks(client, 'inbox insert', insert, { again: () => !expired.aborted })
  }

  /** A statement of the route's insert, under the route's bound. */
  #statementTimeout<Query extends { timeout(ms: number): Query }>(query: Query): Query {
    return withStatementTimeout(query, this.context.options.insertTimeoutMs ?? 0)
  }

  /**
   * One multi-row insert; rows whose delivery id exists already are skipped, not failed. The
   * rows go in the order they arrived, so they get ids in that order: the inbox is processed
   * in id order. (Two instances whose batches share ids may then lock them in different
   * orders; the one the database picks as the deadlock's victim runs again.)
   */
  async #insertBatch(
    client: QueryClientContract,
    inputs: InboxDeliveryInput[],
    expired: AbortSignal
  ): Promise<Array<'stored' | 'duplicate'>> {
    // The same id twice in one batch: the first is the delivery, the rest duplicates.
    const firstIndex = new Map<string, number>()
    inputs.forEach((input, index) => {
      if (!firstIndex.has(input.deliveryId)) firstIndex.set(input.deliveryId, index)
    })
    const receivedAt = dbDate(client)
    // Arrival order: the inbox is processed in id order, and a payout's deliveries that
    // arrive together (its step after step) must be applied in the order they came.
    const rows = [...firstIndex.values()].map((index) => this.#row(inputs[index], receivedAt))
    const stored = batches(this.context, client)
      ? await this.#retryingDeadlocks(client, expired, () =>
          this.#insertReturning(client, rows, expired)
        )
      : await this.#insertIgnoring(client, rows, expired)
    return inputs.map((input, index) =>
      firstIndex.get(input.deliveryId) === index && stored.has(input.deliveryId)
        ? 'stored'
        : 'duplicate'
    )
  }

  /**
   * The delivery ids one `INSERT ... ON CONFLICT DO NOTHING RETURNING` stored. The conflict
   * target is the unique key, `(account, delivery_id)`: every row here is of this account,
   * so a returned id is one of its own. On SQLite in worker mode (`lockWaitOffLoop`), while
   * the worker holds the file's write lock, the statement waits for it off the event loop
   * (`writingWithoutBlocking`), until the insert's bound (`expired`).
   */
  async #insertReturning(
    client: QueryClientContract,
    rows: Array<{ delivery_id: string }>,
    expired: AbortSignal
  ) {
    const insert = (connection?: unknown) => {
      const query = client
        .knexQuery()
        .table(this.context.table)
        .insert(rows)
        .onConflict(['account', 'delivery_id'])
        .ignore()
        .returning('delivery_id')
      if (connection) query.connection(connection)
      return this.#statementTimeout(query) as unknown as Promise<Array<{ delivery_id: string }>>
    }
    const inserted =
      this.context.options.lockWaitOffLoop && isSqlite(client)
        ? await writingWithoutBlocking(client, insert, { signal: expired })
        : await insert()
    return new Set(inserted.map((row) => row.delivery_id))
  }

  /**
   * MySQL has no RETURNING. The batch goes first as one INSERT on its own (autocommit): one
   * round trip, the common case, where none of its deliveries was stored before. Every
   * round trip of the acknowledgement waits for a turn of the event loop, which an inline
   * batch shares (a transaction with a read first took five: BEGIN, the read, the INSERT,
   * COMMIT, and the isolation level). A stored id fails the whole statement, nothing of it
   * kept (InnoDB undoes a failed statement), and the batch goes the careful way
   * (`#insertKnown`). A deadlock's victim is run again.
   */
  async #insertIgnoring(
    client: QueryClientContract,
    rows: Array<{ delivery_id: string }>,
    expired: AbortSignal
  ) {
    try {
      await this.#retryingDeadlocks(client, expired, () =>
        this.#statementTimeout(client.knexQuery().table(this.context.table).insert(rows))
      )
      return new Set(rows.map((row) => row.delivery_id))
    } catch (error) {
      if (!isUniqueViolation(error)) throw error
    }
    return this.#insertKnown(client, rows, expired)
  }

  /**
   * A batch that holds a stored delivery: in one transaction, the ids this account already
   * stored are read (another account's same id is no duplicate) and the others inserted in
   * one INSERT (not `INSERT IGNORE`, which would also turn a refused value into a stored
   * default). A delivery another instance stores in between fails that INSERT as a duplicate
   * of `(account, delivery_id)`: the batch is then stored row by row, each row told its
   * outcome. A transaction chosen as a deadlock's victim is run again whole, its read
   * included (what the other transaction committed meanwhile is then found stored).
   */
  async #insertKnown(
    client: QueryClientContract,
    rows: Array<{ delivery_id: string }>,
    expired: AbortSignal
  ) {
    const ids = rows.map((row) => row.delivery_id)
    const timeoutMs = this.context.options.insertTimeoutMs ?? 0
    try {
      return await this.#retryingDeadlocks(client, expired, () =>
        boundedTransaction(
          client,
          { timeoutMs, what: 'inbox insert', writes: this.context.table },
          async (trx) => {
            const existing: Array<{ delivery_id: string }> = await this.#statementTimeout(
              own(
                this.context,
                trx.knexQuery().table(this.context.table).select('delivery_id')
              ).whereIn('delivery_id', ids)
            )
            const known = new Set(existing.map((row) => row.delivery_id))
            const fresh = rows.filter((row) => !known.has(row.delivery_id))
            if (fresh.length > 0) {
              await this.#statementTimeout(trx.knexQuery().table(this.context.table).insert(fresh))
            }
            return new Set(fresh.map((row) => row.delivery_id))
          }
        )
      )
    } catch (error) {
      if (!isUniqueViolation(error)) throw error
      const stored = new Set<string>()
      for (const row of rows) {
        if ((await this.#insertRow(client, row, expired)) === 'stored') {
          stored.add(row.delivery_id)
        }
      }
      return stored
    }
  }

  async #insertOne(client: QueryClientContract, input: InboxDeliveryInput, expired: AbortSignal) {
    return this.#insertRow(client, this.#row(input, dbDate(client)), expired)
  }

  /** One row on its own (a deadlock's victim run again): stored, or found stored already. */
  async #insertRow(client: QueryClientContract, row: object, expired: AbortSignal) {
    try {
      await this.#retryingDeadlocks(client, expired, async () => {
        await this.#statementTimeout(client.knexQuery().table(this.context.table).insert(row))
      })
      return 'stored' as const
    } catch (error) {
      if (isUniqueViolation(error)) return 'duplicate' as const
      throw error
    }
  }

  #row(input: InboxDeliveryInput, receivedAt: unknown) {
    return {
      account: this.context.account,
      delivery_id: input.deliveryId,
      event_type: input.eventType,
      raw_body: input.rawBody.toString('base64'),
      signature_header: input.signatureHeader,
      source: input.source,
      state: 'pending',
      attempts: 0,
      received_at: receivedAt,
      trace_parent: traceParentOrNull(input.traceParent),
    }
  }
}
