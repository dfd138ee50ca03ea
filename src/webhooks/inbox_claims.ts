import type { QueryClientContract, TransactionClientContract } from '@adonisjs/lucid/types/database'
import {
  affectedRows,
  isSqlite,
  locksRows,
  skipsLockedRows,
  whereAccountNotLeading,
} from '../database/dialects.ts'
import { dbDate } from '../database/dates.ts'
import { boundedTransaction, withStatementTimeout } from '../database/deadline.ts'
import {
  batches,
  MAX_BATCH,
  type InboxContext,
  type InboxRow,
  type InboxVerdict,
} from './inbox_context.ts'

/** The columns a claim reads back. */
const CLAIMED_COLUMNS = [
  'id',
  'delivery_id',
  'event_type',
  'raw_body',
  'source',
  'attempts',
  'trace_parent',
]

function toInboxRow(row: any): InboxRow {
  return {
    id: Number(row.id),
    deliveryId: row.delivery_id,
    eventType: row.event_type,
    rawBody: Buffer.from(row.raw_body, 'base64'),
    source: row.source,
    attempts: Number(row.attempts),
    traceParent: row.trace_parent ?? null,
  }
}

/** A statement of the row-by-row processing path, under the processing bound. */
function processingTimeout<Query extends { timeout(ms: number): Query }>(
  context: InboxContext,
  query: Query
): Query {
  return withStatementTimeout(query, context.options.transactionTimeoutMs ?? 0)
}

/** The state of a row never tried: due at once. */
const NEW = 'pending'
/** The states of a row tried before: due once `next_attempt_at` (backoff, lease) has passed. */
const RETRIED = ['failed', 'processing']

/** Due rows: new ones, failed ones past their backoff, processing ones past their lease. */
function due<Query>(query: Query, client: QueryClientContract, now: Date): Query {
  return (query as any).where((q: any) => {
    q.where('state', NEW).orWhere((failed: any) => {
      failed.whereIn('state', RETRIED).where('next_attempt_at', '<=', dbDate(client, now))
    })
  })
}

/**
 * `due` for rows already picked by their ids: on SQLite each column under a unary `+`, so
 * the ids stay the only way in. As plain terms, SQLite without statistics answered the OR
 * through the two due indexes, reading the whole backlog for each batch. Elsewhere `due`.
 */
function stillDue<Query>(query: Query, client: QueryClientContract, now: Date): Query {
  if (!isSqlite(client)) return due(query, client, now)
  const retried = RETRIED.map(() => '?').join(', ')
  return (query as any).whereRaw(`(+?? = ? or (+?? in (${retried}) and +?? <= ?))`, [
    'state',
    NEW,
    'state',
    ...RETRIED,
    'next_attempt_at',
    dbDate(client, now),
  ])
}

/**
 * SQLite: the ids of the first `limit` due rows, in id order, read as two index searches (new
 * rows by `state`, due retries by `(state, next_attempt_at)`) joined by UNION ALL. SQLite
 * keeps no statistics unless the app runs ANALYZE, and without them it answered the one
 * query with the OR of `due` by walking the account's every row (its unique index): the
 * processed rows the inbox keeps made each claim slower as they grew (24 ms at 50,000, on
 * the event loop, since better-sqlite3 is synchronous). This reads the backlog only.
 */
async function sqliteDueIds(
  context: InboxContext,
  client: QueryClientContract,
  now: Date,
  limit: number
): Promise<number[]> {
  const fresh = knexRowsOf(context, client).select('id').where('state', NEW)
  const retries = knexRowsOf(context, client)
    .select('id')
    .whereIn('state', RETRIED)
    .where('next_attempt_at', '<=', dbDate(client, now))
  const rows: Array<{ id: number }> = await fresh
    .unionAll(retries)
    .orderBy('id', 'asc')
    .limit(limit)
  return rows.map((row) => row.id)
}

/**
 * The context's table through `client`, narrowed to its account's rows. Every statement here
 * finds its rows by id, by state or by lease, never by delivery id, so on SQLite the account's
 * index is kept out of its plans (`whereAccountNotLeading`): without statistics SQLite read
 * `account = ? AND id IN (...)` along the `(account, delivery_id)` index, every row the
 * account keeps, where the ids are each one lookup (the claim of 20 rows took 102 ms on the
 * inbox of 100,000 payouts, and held the event loop; on 1,000,000, a second).
 */
function rowsOf(context: InboxContext, client: QueryClientContract) {
  return whereAccountNotLeading(client, client.from(context.table), context.account)
}

/** The same, as a knex query (the statements with RETURNING or row locks). */
function knexRowsOf(context: InboxContext, client: QueryClientContract) {
  return whereAccountNotLeading(client, client.knexQuery().table(context.table), context.account)
}

/** The row, while the claim that read it holds: still `processing`, at the same attempt. */
function held<Query>(query: Query, row: Pick<InboxRow, 'id' | 'attempts'>): Query {
  return (query as any)
    .where('id', row.id)
    .where('state', 'processing')
    .where('attempts', row.attempts)
}

/** The leased claim of `InboxStore.claimDue`: due rows marked `processing` until the lease. */
export async function claimDue(
  context: InboxContext,
  now: Date,
  limit: number,
  leaseMs: number
): Promise<InboxRow[]> {
  const client = context.client()
  const candidates: Array<{ id: number; state: string; attempts: number }> =
    await processingTimeout(
      context,
      isSqlite(client)
        ? // Read again with the due condition: a row another instance claimed meanwhile is not.
          stillDue(
            rowsOf(context, client)
              .select('id', 'state', 'attempts')
              .whereIn('id', await sqliteDueIds(context, client, now, limit)),
            client,
            now
          ).orderBy('id', 'asc')
        : due(rowsOf(context, client).select('id', 'state', 'attempts'), client, now)
            .orderBy('id', 'asc')
            .limit(limit)
    )
  if (candidates.length === 0) return []
  const lease = dbDate(client, new Date(now.getTime() + leaseMs))

  if (batches(context, client)) {
    // One statement claims the batch. The due condition is checked again inside it, so a
    // row another instance claimed in between (its lease now in the future) is skipped.
    const claimedRows: any[] = await stillDue(
      knexRowsOf(context, client).whereIn(
        'id',
        candidates.map((candidate) => candidate.id)
      ),
      client,
      now
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
    const updated = await rowsOf(context, client)
      .where('id', candidate.id)
      .where('state', candidate.state)
      .where('attempts', candidate.attempts)
      .update({ state: 'processing', next_attempt_at: lease, attempts: candidate.attempts + 1 })
    if (affectedRows(updated) !== 1) continue
    const row = await rowsOf(context, client).where('id', candidate.id).first()
    // Deleted between the claim and the read (pruning, an operator): nothing to process.
    if (!row) continue
    claimed.push(toInboxRow(row))
  }
  return claimed
}

/** Whether `processDueInTransaction` works on this client (see `InboxStore`). */
export function claimsInTransaction(context: InboxContext, client: QueryClientContract): boolean {
  return batches(context, client) || (!context.options.rowByRow && skipsLockedRows(client))
}

/** The claim of `InboxStore.processDueInTransaction`: claimed, worked on and marked in one transaction. */
export async function processDueInTransaction(
  context: InboxContext,
  now: Date,
  limit: number,
  work: (trx: TransactionClientContract, rows: InboxRow[]) => Promise<InboxVerdict[]>
): Promise<{ rows: InboxRow[]; verdicts: InboxVerdict[] } | null> {
  const timeoutMs = context.options.transactionTimeoutMs ?? 0
  return boundedTransaction(
    context.client(),
    { timeoutMs, what: 'inbox processing', writes: context.table },
    async (trx) => {
      const claimed = batches(context, trx)
        ? await claimReturning(context, trx, now, limit)
        : await claimLocking(context, trx, now, limit)
      if (claimed.length === 0) return null
      const rows = claimed.map(toInboxRow).sort((x, y) => x.id - y.id)
      const verdicts = await work(trx, rows)
      for (const [index, verdict] of verdicts.entries()) {
        if (verdict.state === 'processed' && verdict.note === null) continue
        await rowsOf(context, trx)
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
function claimedColumns(trx: TransactionClientContract, now: Date) {
  return {
    state: 'processed',
    processed_at: dbDate(trx, now),
    next_attempt_at: null,
    last_error: null,
    attempts: trx.knexRawQuery('attempts + 1'),
  }
}

/** The CTE of `claimReturning`: the due rows it picked. */
const PICKED = 'inbox_picked'

/**
 * Claimed in one statement (the job-queue form): a materialized CTE picks due rows in id
 * order and, on PostgreSQL, locks them, skipping rows another instance holds. Materialized,
 * so it is picked once: as a plain `id IN (subquery)`, PostgreSQL may plan a nested loop
 * that runs the subquery again for each row it updates, and each run, skipping the rows the
 * statement has just updated, picks `limit` more (the batch would take every due row).
 */
async function claimReturning(
  context: InboxContext,
  trx: TransactionClientContract,
  now: Date,
  limit: number
) {
  if (isSqlite(trx)) {
    // The transaction took the file's write lock first, so no other connection changes a row
    // between the read and the UPDATE; the due condition is checked again all the same (a
    // savepoint of a host test's transaction shares its connection), in the form that keeps
    // the ids the way in (`stillDue`). A subquery for the ids made SQLite walk the account's
    // rows.
    const ids = await sqliteDueIds(context, trx, now, limit)
    if (ids.length === 0) return []
    return (await stillDue(knexRowsOf(context, trx).whereIn('id', ids), trx, now)
      .update(claimedColumns(trx, now))
      .returning(CLAIMED_COLUMNS)) as any[]
  }
  const candidates = due(knexRowsOf(context, trx).select('id'), trx, now)
    .orderBy('id', 'asc')
    .limit(limit)
  if (locksRows(trx)) candidates.forUpdate().skipLocked()
  const picked = trx.knexQuery().from(PICKED).select('id')
  const claimed: any[] = await due(
    knexRowsOf(context, trx).withMaterialized(PICKED, candidates).whereIn('id', picked),
    trx,
    now
  )
    .update(claimedColumns(trx, now))
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
 * nothing to take. Rows of other accounts met along the index are not this claim's: at READ
 * COMMITTED their locks are released once the account does not match.
 */
async function claimLocking(
  context: InboxContext,
  trx: TransactionClientContract,
  now: Date,
  limit: number
) {
  const pick = (query: any, count: number): Promise<any[]> =>
    query.select(CLAIMED_COLUMNS).limit(count).forUpdate().skipLocked()
  const table = () => knexRowsOf(context, trx)
  const picked = await pick(
    table().where('state', NEW).whereNull('next_attempt_at').orderBy('id', 'asc'),
    limit
  )
  if (picked.length < limit) {
    picked.push(
      ...(await pick(
        table()
          .whereIn('state', RETRIED)
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
    .update(claimedColumns(trx, now))
  return picked.map((row) => ({ ...row, attempts: Number(row.attempts) + 1 }))
}

/** `InboxStore.processClaimed`: one leased row marked done and worked on in one transaction. */
export async function processClaimed<T>(
  context: InboxContext,
  row: Pick<InboxRow, 'id' | 'attempts'>,
  now: Date,
  work: (trx: TransactionClientContract) => Promise<{ note: string | null; value: T }>
): Promise<{ value: T } | null> {
  const timeoutMs = context.options.transactionTimeoutMs ?? 0
  return boundedTransaction(
    context.client(),
    { timeoutMs, what: 'inbox processing', writes: context.table },
    async (trx) => {
      const marked = await held(rowsOf(context, trx), row).update({
        state: 'processed',
        processed_at: dbDate(trx, now),
        next_attempt_at: null,
        last_error: null,
      })
      if (affectedRows(marked) !== 1) return null
      const { note, value } = await work(trx)
      if (note !== null) {
        await rowsOf(context, trx)
          .where('id', row.id)
          .update({ last_error: note.slice(0, 2000) })
      }
      return { value }
    }
  )
}

/** `InboxStore.renewLeases`: leases extended in chunks of `MAX_BATCH` rows. */
export async function renewLeases(
  context: InboxContext,
  rows: Array<Pick<InboxRow, 'id' | 'attempts'>>,
  until: Date
): Promise<number> {
  if (rows.length === 0) return 0
  const client = context.client()
  let renewed = 0
  for (let start = 0; start < rows.length; start += MAX_BATCH) {
    const chunk = rows.slice(start, start + MAX_BATCH)
    const updated = await processingTimeout(
      context,
      rowsOf(context, client)
        .where('state', 'processing')
        .where((heldRows) => {
          for (const row of chunk) {
            heldRows.orWhere((one) => one.where('id', row.id).where('attempts', row.attempts))
          }
        })
    ).update({ next_attempt_at: dbDate(client, until) })
    renewed += affectedRows(updated)
  }
  return renewed
}

/** `InboxStore.markProcessed`: rows marked done in one statement. */
export async function markProcessed(context: InboxContext, ids: number[], note: string | null) {
  if (ids.length === 0) return
  const client = context.client()
  await processingTimeout(context, rowsOf(context, client).whereIn('id', ids)).update({
    state: 'processed',
    processed_at: dbDate(client),
    next_attempt_at: null,
    last_error: note,
  })
}

/** `InboxStore.markFailed`: a failure recorded, for a retry or the dead letters. */
export async function markFailed(
  context: InboxContext,
  id: number,
  error: string,
  retryAt: Date | null,
  claim?: { attempts: number }
) {
  const client = context.client()
  const query = rowsOf(context, client).where('id', id)
  if (claim) query.where('state', 'processing').where('attempts', claim.attempts)
  await processingTimeout(context, query).update({
    state: retryAt ? 'failed' : 'dead',
    next_attempt_at: retryAt ? dbDate(client, retryAt) : null,
    last_error: error.slice(0, 2000),
  })
}
