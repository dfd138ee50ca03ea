import type { Database } from '@adonisjs/lucid/database'
import type { QueryClientContract, TransactionClientContract } from '@adonisjs/lucid/types/database'
import {
  affectedRows,
  locksRows,
  RETURNING_DIALECTS,
  skipsLockedRows,
} from '../database/dialects.ts'
import { dbDate } from '../database/dates.ts'
import { withDeadline } from '../time_bounds.ts'
import {
  boundedTransaction,
  dropIdleConnections,
  withStatementTimeout,
} from '../database/deadline.ts'

/** A delivery as the route hands it to the inbox. */
export interface InboxDeliveryInput {
  deliveryId: string
  eventType: string
  rawBody: Buffer
  signatureHeader: string | null
  source: 'webhook' | 'websocket'
}

/** A stored delivery, as the processor reads it back. */
export interface InboxRow {
  id: number
  deliveryId: string
  eventType: string
  rawBody: Buffer
  source: string
  attempts: number
}

function toInboxRow(row: any): InboxRow {
  return {
    id: Number(row.id),
    deliveryId: row.delivery_id,
    eventType: row.event_type,
    rawBody: Buffer.from(row.raw_body, 'base64'),
    source: row.source,
    attempts: Number(row.attempts),
  }
}

/** What became of a row processed inside the claiming transaction. */
export type InboxVerdict =
  { state: 'processed'; note: string | null } | { state: 'dead'; note: string }

interface PendingInsert {
  input: InboxDeliveryInput
  resolve: (outcome: 'stored' | 'duplicate') => void
  reject: (error: unknown) => void
}

/** The columns a claim reads back. */
const CLAIMED_COLUMNS = ['id', 'delivery_id', 'event_type', 'raw_body', 'source', 'attempts']

/** Rows per statement: far below every dialect's bound-parameter limit (8 per row). */
const MAX_BATCH = 200

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
 * The durable inbox (`<prefix>webhook_deliveries`). Insert is the only work on the
 * webhook hot path, committed in groups; claiming uses a lease (`next_attempt_at`) so a
 * row held by a process that died is picked up again, and a conditional update so two
 * instances never both claim it.
 */
export class InboxStore {
  constructor(
    private db: Database,
    private table: string,
    private connection?: string,
    private options: {
      /**
       * Forces row-by-row inserts and leased claims (the path a failed batch takes), for
       * tests of that path on every dialect.
       */
      rowByRow?: boolean
      /**
       * How long one insert statement may take before its waiters fail and the next batch
       * starts (its connection is dropped); 0 waits forever.
       */
      insertTimeoutMs?: number
      /** How long a processing transaction may take before it is abandoned; 0 waits forever. */
      transactionTimeoutMs?: number
    } = {}
  ) {}

  #client(): QueryClientContract {
    return this.db.connection(this.connection)
  }

  /** Multi-row statements with RETURNING here (not MySQL, nor when row by row is forced). */
  #batches(client: QueryClientContract): boolean {
    return !this.options.rowByRow && RETURNING_DIALECTS.has(client.dialect.name)
  }

  /**
   * Group commit here: one statement per batch with RETURNING, or on MySQL one transaction
   * that reads which ids exist and inserts the rest in one `INSERT IGNORE`.
   */
  #groupsInserts(client: QueryClientContract): boolean {
    return this.#batches(client) || (!this.options.rowByRow && skipsLockedRows(client))
  }

  /**
   * Persists a delivery; a Svc-Delivery-Id seen before is reported as a duplicate. It
   * resolves only once the row is committed. Deliveries arriving together share one
   * statement and one commit (group commit): at 500/s a commit per delivery queues behind
   * the disk's fsync, a commit per batch does not.
   */
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
      const client = this.#client()
      if (!this.#groupsInserts(client)) {
        // Row by row forced: one row at a time, each delivery told its own outcome.
        for (const entry of batch) {
          await this.#bounded(this.#insertOne(client, entry.input)).then(
            entry.resolve,
            entry.reject
          )
        }
        continue
      }
      try {
        const outcomes = await this.#bounded(
          this.#insertBatch(
            client,
            batch.map((entry) => entry.input)
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
   * hold every later delivery behind it, for good.
   */
  #bounded<T>(insert: Promise<T>): Promise<T> {
    return withDeadline(insert, this.options.insertTimeoutMs ?? 0, 'inbox insert', (error) =>
      dropIdleConnections(this.#client(), error)
    )
  }

  /** A statement of the route's insert, under the route's bound. */
  #statementTimeout<Query extends { timeout(ms: number): Query }>(query: Query): Query {
    return withStatementTimeout(query, this.options.insertTimeoutMs ?? 0)
  }

  /** A statement of the row-by-row processing path, under the processing bound. */
  #processingTimeout<Query extends { timeout(ms: number): Query }>(query: Query): Query {
    return withStatementTimeout(query, this.options.transactionTimeoutMs ?? 0)
  }

  /** One multi-row insert; rows whose delivery id exists already are skipped, not failed. */
  async #insertBatch(
    client: QueryClientContract,
    inputs: InboxDeliveryInput[]
  ): Promise<Array<'stored' | 'duplicate'>> {
    // The same id twice in one batch: the first is the delivery, the rest duplicates.
    const firstIndex = new Map<string, number>()
    inputs.forEach((input, index) => {
      if (!firstIndex.has(input.deliveryId)) firstIndex.set(input.deliveryId, index)
    })
    const receivedAt = dbDate(client)
    const rows = [...firstIndex.values()].map((index) => this.#row(inputs[index], receivedAt))
    const stored = this.#batches(client)
      ? await this.#insertReturning(client, rows)
      : await this.#insertIgnoring(client, rows)
    return inputs.map((input, index) =>
      firstIndex.get(input.deliveryId) === index && stored.has(input.deliveryId)
        ? 'stored'
        : 'duplicate'
    )
  }

  /** The delivery ids one `INSERT ... ON CONFLICT DO NOTHING RETURNING` stored. */
  async #insertReturning(client: QueryClientContract, rows: Array<{ delivery_id: string }>) {
    const inserted: Array<{ delivery_id: string }> = await this.#statementTimeout(
      client
        .knexQuery()
        .table(this.table)
        .insert(rows)
        .onConflict('delivery_id')
        .ignore()
        .returning('delivery_id')
    )
    return new Set(inserted.map((row) => row.delivery_id))
  }

  /**
   * MySQL has no RETURNING: in one transaction, the ids already stored are read and the
   * others inserted in one INSERT (not `INSERT IGNORE`, which would also turn a refused
   * value into a stored default). A delivery another instance stores in between fails that
   * INSERT as a duplicate: the batch is then stored row by row, each row told its outcome.
   */
  async #insertIgnoring(client: QueryClientContract, rows: Array<{ delivery_id: string }>) {
    const ids = rows.map((row) => row.delivery_id)
    const timeoutMs = this.options.insertTimeoutMs ?? 0
    try {
      return await boundedTransaction(
        client,
        { timeoutMs, what: 'inbox insert', writes: this.table },
        async (trx) => {
          const existing: Array<{ delivery_id: string }> = await this.#statementTimeout(
            trx.knexQuery().table(this.table).select('delivery_id').whereIn('delivery_id', ids)
          )
          const known = new Set(existing.map((row) => row.delivery_id))
          const fresh = rows.filter((row) => !known.has(row.delivery_id))
          if (fresh.length > 0) {
            await this.#statementTimeout(trx.knexQuery().table(this.table).insert(fresh))
          }
          return new Set(fresh.map((row) => row.delivery_id))
        }
      )
    } catch (error) {
      if (!isUniqueViolation(error)) throw error
      const stored = new Set<string>()
      for (const row of rows) {
        if ((await this.#insertRow(client, row)) === 'stored') stored.add(row.delivery_id)
      }
      return stored
    }
  }

  async #insertOne(client: QueryClientContract, input: InboxDeliveryInput) {
    return this.#insertRow(client, this.#row(input, dbDate(client)))
  }

  /** One row on its own: stored, or found stored already. */
  async #insertRow(client: QueryClientContract, row: object) {
    try {
      await this.#statementTimeout(client.knexQuery().table(this.table).insert(row))
      return 'stored' as const
    } catch (error) {
      if (isUniqueViolation(error)) return 'duplicate' as const
      throw error
    }
  }

  #row(input: InboxDeliveryInput, receivedAt: unknown) {
    return {
      delivery_id: input.deliveryId,
      event_type: input.eventType,
      raw_body: input.rawBody.toString('base64'),
      signature_header: input.signatureHeader,
      source: input.source,
      state: 'pending',
      attempts: 0,
      received_at: receivedAt,
    }
  }

  /**
   * Claims up to `limit` rows that are due: new ones, failed ones whose backoff expired,
   * and ones whose processing lease expired (the process holding them died). The claim is
   * a conditional update, so only one instance wins each row: one UPDATE ... RETURNING for
   * the batch where the dialect has it, else one per row.
   */
  async claimDue(now: Date, limit: number, leaseMs: number): Promise<InboxRow[]> {
    const client = this.#client()
    const due = <Query>(query: Query) => this.#due(query, client, now)
    const candidates: Array<{ id: number; state: string; attempts: number }> =
      await this.#processingTimeout(
        due(client.from(this.table).select('id', 'state', 'attempts'))
          .orderBy('id', 'asc')
          .limit(limit)
      )
    if (candidates.length === 0) return []
    const lease = dbDate(client, new Date(now.getTime() + leaseMs))

    if (this.#batches(client)) {
      // One statement claims the batch. The due condition is checked again inside it, so a
      // row another instance claimed in between (its lease now in the future) is skipped.
      const claimedRows: any[] = await due(
        client
          .knexQuery()
          .table(this.table)
          .whereIn(
            'id',
            candidates.map((candidate) => candidate.id)
          )
      )
        .update({
          state: 'processing',
          next_attempt_at: lease,
          attempts: client.knexRawQuery('attempts + 1'),
        })
        .returning(CLAIMED_COLUMNS)
      return claimedRows.map(toInboxRow).sort((x, y) => x.id - y.id)
    }

    const claimed: InboxRow[] = []
    for (const candidate of candidates) {
      const updated = await client
        .from(this.table)
        .where('id', candidate.id)
        .where('state', candidate.state)
        .where('attempts', candidate.attempts)
        .update({ state: 'processing', next_attempt_at: lease, attempts: candidate.attempts + 1 })
      if (affectedRows(updated) !== 1) continue
      const row = await client.from(this.table).where('id', candidate.id).first()
      // Deleted between the claim and the read (pruning, an operator): nothing to process.
      if (!row) continue
      claimed.push(toInboxRow(row))
    }
    return claimed
  }

  /**
   * Whether `processDueInTransaction` works here: with UPDATE ... RETURNING, or with
   * `SELECT ... FOR UPDATE SKIP LOCKED` (MySQL 8, MariaDB 10.6), unless row by row is forced.
   */
  get claimsInTransaction(): boolean {
    const client = this.#client()
    return this.#batches(client) || (!this.options.rowByRow && skipsLockedRows(client))
  }

  /**
   * Claims up to `limit` due rows inside a transaction, hands them to `work` in that same
   * transaction, and records each verdict there: the rows are done exactly when the work
   * commits, and untouched if it rolls back. No lease is needed: on PostgreSQL the claimed
   * rows stay locked until COMMIT and other instances skip them; SQLite has one writer.
   * Resolves null when nothing is due.
   */
  async processDueInTransaction(
    now: Date,
    limit: number,
    work: (trx: TransactionClientContract, rows: InboxRow[]) => Promise<InboxVerdict[]>
  ): Promise<{ rows: InboxRow[]; verdicts: InboxVerdict[] } | null> {
    const timeoutMs = this.options.transactionTimeoutMs ?? 0
    return boundedTransaction(
      this.#client(),
      { timeoutMs, what: 'inbox processing', writes: this.table },
      async (trx) => {
        const claimed = this.#batches(trx)
          ? await this.#claimReturning(trx, now, limit)
          : await this.#claimLocking(trx, now, limit)
        if (claimed.length === 0) return null
        const rows = claimed.map(toInboxRow).sort((x, y) => x.id - y.id)
        const verdicts = await work(trx, rows)
        for (const [index, verdict] of verdicts.entries()) {
          if (verdict.state === 'processed' && verdict.note === null) continue
          await trx
            .from(this.table)
            .where('id', rows[index].id)
            .update({
              state: verdict.state,
              processed_at: verdict.state === 'dead' ? null : dbDate(trx, now),
              last_error: (verdict.note ?? '').slice(0, 2000),
            })
        }
        return { rows, verdicts }
      }
    )
  }

  /** What a claim marks on its rows: done, unless the transaction rolls back. */
  #claimedColumns(trx: TransactionClientContract, now: Date) {
    return {
      state: 'processed',
      processed_at: dbDate(trx, now),
      next_attempt_at: null,
      last_error: null,
      attempts: trx.knexRawQuery('attempts + 1'),
    }
  }

  /**
   * Claimed in one statement (the job-queue form): the subquery picks due rows in id order
   * and, on PostgreSQL, locks them, skipping rows another instance holds.
   */
  async #claimReturning(trx: TransactionClientContract, now: Date, limit: number) {
    const candidates = this.#due(trx.knexQuery().table(this.table).select('id'), trx, now)
      .orderBy('id', 'asc')
      .limit(limit)
    if (locksRows(trx)) candidates.forUpdate().skipLocked()
    const claimed: any[] = await this.#due(
      trx.knexQuery().table(this.table).whereIn('id', candidates),
      trx,
      now
    )
      .update(this.#claimedColumns(trx, now))
      .returning(CLAIMED_COLUMNS)
    return claimed
  }

  /**
   * Claimed without RETURNING (MySQL): due rows are read and locked with `SELECT ... FOR
   * UPDATE SKIP LOCKED`, skipping rows another instance holds, then marked with one UPDATE.
   * The locks last until COMMIT, so no other instance can claim them in between. InnoDB
   * locks every row a locking read reads before it sorts, so each read follows the
   * `(state, next_attempt_at)` index instead, stopping at `limit`: new rows (pending, no
   * lease) come in id order, then due retries and expired leases in due order. A read
   * sorted by id across them all would lock every due row, and leave the other instances
   * nothing to take.
   */
  async #claimLocking(trx: TransactionClientContract, now: Date, limit: number) {
    const pick = (query: any, count: number): Promise<any[]> =>
      query.select(CLAIMED_COLUMNS).limit(count).forUpdate().skipLocked()
    const table = () => trx.knexQuery().table(this.table)
    const picked = await pick(
      table().where('state', 'pending').whereNull('next_attempt_at').orderBy('id', 'asc'),
      limit
    )
    if (picked.length < limit) {
      picked.push(
        ...(await pick(
          table()
            .whereIn('state', ['failed', 'processing'])
            .where('next_attempt_at', '<=', dbDate(trx, now))
            .orderBy([
              { column: 'state', order: 'asc' },
              { column: 'next_attempt_at', order: 'asc' },
              { column: 'id', order: 'asc' },
            ]),
          limit - picked.length
        ))
      )
    }
    if (picked.length === 0) return []
    await table()
      .whereIn(
        'id',
        picked.map((row) => row.id)
      )
      .update(this.#claimedColumns(trx, now))
    return picked.map((row) => ({ ...row, attempts: Number(row.attempts) + 1 }))
  }

  /** Due rows: new ones, failed ones past their backoff, processing ones past their lease. */
  #due<Query>(query: Query, client: QueryClientContract, now: Date): Query {
    return (query as any).where((q: any) => {
      q.where('state', 'pending').orWhere((failed: any) => {
        failed
          .whereIn('state', ['failed', 'processing'])
          .where('next_attempt_at', '<=', dbDate(client, now))
      })
    })
  }

  /**
   * Processes one row claimed by `claimDue` in a transaction of its own: marks it processed
   * first, then hands the transaction to `work`, so the row is done exactly when its effects
   * commit (a process killed after COMMIT never applies it again), and untouched if `work`
   * throws. The mark holds only while the claim does (the row still `processing` at the
   * claim's attempt): a row whose lease expired and that another process claimed since is
   * left to it, and this resolves null without running `work`.
   */
  async processClaimed<T>(
    row: Pick<InboxRow, 'id' | 'attempts'>,
    now: Date,
    work: (trx: TransactionClientContract) => Promise<{ note: string | null; value: T }>
  ): Promise<{ value: T } | null> {
    const timeoutMs = this.options.transactionTimeoutMs ?? 0
    return boundedTransaction(
      this.#client(),
      { timeoutMs, what: 'inbox processing', writes: this.table },
      async (trx) => {
        const marked = await this.#held(trx.from(this.table), row).update({
          state: 'processed',
          processed_at: dbDate(trx, now),
          next_attempt_at: null,
          last_error: null,
        })
        if (affectedRows(marked) !== 1) return null
        const { note, value } = await work(trx)
        if (note !== null) {
          await trx
            .from(this.table)
            .where('id', row.id)
            .update({ last_error: note.slice(0, 2000) })
        }
        return { value }
      }
    )
  }

  /**
   * Extends the lease of claimed rows to `until`, where the claim still holds (each row
   * `processing` at its claim's attempt); answers how many it extended.
   */
  async renewLeases(rows: Array<Pick<InboxRow, 'id' | 'attempts'>>, until: Date) {
    if (rows.length === 0) return 0
    const client = this.#client()
    let renewed = 0
    for (let start = 0; start < rows.length; start += MAX_BATCH) {
      const chunk = rows.slice(start, start + MAX_BATCH)
      const updated = await this.#processingTimeout(
        client
          .from(this.table)
          .where('state', 'processing')
          .where((held) => {
            for (const row of chunk) {
              held.orWhere((one) => one.where('id', row.id).where('attempts', row.attempts))
            }
          })
      ).update({ next_attempt_at: dbDate(client, until) })
      renewed += affectedRows(updated)
    }
    return renewed
  }

  /** The row, while the claim that read it holds: still `processing`, at the same attempt. */
  #held<Query>(query: Query, row: Pick<InboxRow, 'id' | 'attempts'>): Query {
    return (query as any)
      .where('id', row.id)
      .where('state', 'processing')
      .where('attempts', row.attempts)
  }

  /**
   * Marks rows done in one statement; `note` records why an authentic but unusable
   * delivery was skipped.
   */
  async markProcessed(ids: number[], note: string | null = null) {
    if (ids.length === 0) return
    const client = this.#client()
    await this.#processingTimeout(client.from(this.table).whereIn('id', ids)).update({
      state: 'processed',
      processed_at: dbDate(client),
      next_attempt_at: null,
      last_error: note,
    })
  }

  /**
   * Records a failure: retried at `retryAt`, or dead-lettered when it is null. Given the
   * claim (`attempts`), only while it holds: a row another process claimed since is its.
   */
  async markFailed(id: number, error: string, retryAt: Date | null, claim?: { attempts: number }) {
    const client = this.#client()
    const query = client.from(this.table).where('id', id)
    if (claim) query.where('state', 'processing').where('attempts', claim.attempts)
    await this.#processingTimeout(query).update({
      state: retryAt ? 'failed' : 'dead',
      next_attempt_at: retryAt ? dbDate(client, retryAt) : null,
      last_error: error.slice(0, 2000),
    })
  }

  /**
   * Puts matching rows back in the queue (for `payouts:replay`). Processed rows move only
   * with `force`; re-applying them is safe, the state machine ignores what it has seen.
   */
  async requeue(filter: {
    ids?: string[]
    state?: 'failed' | 'dead' | 'processed' | 'pending'
    since?: Date
    until?: Date
    force?: boolean
  }): Promise<number[]> {
    const client = this.#client()
    const query = client.from(this.table).select('id', 'state')
    if (filter.ids?.length) query.whereIn('delivery_id', filter.ids)
    if (filter.state) query.where('state', filter.state)
    if (filter.since) query.where('received_at', '>=', dbDate(client, filter.since))
    if (filter.until) query.where('received_at', '<', dbDate(client, filter.until))
    const rows: Array<{ id: number; state: string }> = await query
    const ids = rows
      .filter((row) => row.state !== 'processing' && (row.state !== 'processed' || filter.force))
      .map((row) => Number(row.id))
    if (ids.length > 0) {
      await client
        .from(this.table)
        .whereIn('id', ids)
        .update({ state: 'pending', attempts: 0, next_attempt_at: null })
    }
    return ids
  }

  /** States of the given rows, after a replay. */
  async statesOf(ids: number[]): Promise<string[]> {
    if (ids.length === 0) return []
    const rows: Array<{ state: string }> = await this.#client()
      .from(this.table)
      .select('state')
      .whereIn('id', ids)
    return rows.map((row) => row.state)
  }
}
