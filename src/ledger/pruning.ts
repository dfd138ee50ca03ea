import type { Database } from '@adonisjs/lucid/database'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import { dbDate } from '../database/dates.ts'
import { withDeadline } from '../time_bounds.ts'
import { withStatementTimeout } from '../database/deadline.ts'
import { affectedRows } from '../database/dialects.ts'
import { tableNames } from '../database/schema.ts'
import type { PayoutsConfig } from '../define_config.ts'

/**
 * The service retries a delivery under the same Svc-Delivery-Id for about 43 minutes
 * (attempts at 0, 30 s, 2, 8 and 32 minutes); replays use a new id. An inbox row, whose
 * unique delivery id is what deduplicates, is never removed younger than this.
 */
export const DEDUP_WINDOW_MS = 24 * 3_600_000

/** Intent states that nothing will ever send again. */
export const FINISHED_INTENT_STATES = ['succeeded', 'failed', 'refused'] as const

/**
 * Finished intents that may go. A succeeded intent under the app's key (or a key of unknown
 * origin, from before `key_origin`) stays as long as the payout it made: it is what makes
 * the same key answer that payout instead of sending a second one. Failed and refused
 * intents at their only attempt made no payout; `PayoutExecutor`'s `#repeat` sends them again
 * under the same key anyway, so one pruned and made again by the same key can only make the
 * one payout that never existed. Failed after more than one attempt, an earlier one may have
 * made it (see `mayHaveLeft`): kept, like a succeeded one.
 */
function removableIntents(query: any) {
  return query.where((removable: any) =>
    removable
      // At their only attempt: no earlier request of theirs can have made a payout.
      .where((final: any) =>
        final.whereIn('state', ['failed', 'refused']).where('attempts', '<=', 1)
      )
      // A key of the plugin's is never asked for again.
      .orWhere((ours: any) =>
        ours.whereIn('state', FINISHED_INTENT_STATES).where('key_origin', 'plugin')
      )
  )
}

/** What the pruner removes, and how. */
export interface PrunerOptions {
  db: Database
  /** The account whose rows it removes (`main` when absent); another's are never touched. */
  account?: string
  connection?: string
  tables: { webhookDeliveries: string; executionIntents: string }
  /** Processed inbox rows older than this (by `processed_at`) are removed. */
  processedDeliveriesDays: number
  /** Finished execution intents not touched for this long (by `updated_at`) are removed. */
  finishedIntentsHours: number
  /** Rows deleted per statement. */
  batchSize: number
  /** Bound of each statement; 0 waits forever. */
  statementTimeoutMs: number
  now?: () => Date
}

/** What one run removed (or, with `dryRun`, would remove), per kind of row. */
export interface PruneSummary {
  dryRun: boolean
  processedDeliveries: number
  deadLetters: number
  finishedIntents: number
}

/** One kind of row to remove: its table and the condition that makes a row removable. */
interface Target {
  table: string
  where: (query: any, client: QueryClientContract) => any
  /**
   * The order batches are taken in: the indexed column that the condition bounds, so each
   * batch is read from an index range and stops at `batchSize`. Ordered by id instead, a
   * run with nothing left to remove reads the whole table by its primary key; each batch
   * then starts after the last id the one before it read (see `#delete`).
   */
  orderBy: string
}

/**
 * Removes what the plugin no longer needs, in bounded batches: processed inbox rows past
 * their retention, finished execution intents past their window (never one that holds an
 * app's key to the payout it made, see `removableIntents`), and dead letters only
 * when asked. Each batch is one SELECT of at most `batchSize` ids and one DELETE of those
 * ids (the condition checked again, so a row replayed in between stays): no long lock, no
 * large transaction. The ledger (`payouts`, `payout_events`) is never touched, nor the rows of
 * another account than its own.
 */
export class Pruner {
  #options: PrunerOptions

  constructor(options: PrunerOptions) {
    this.#options = options
  }

  /** Removes what is due, or only counts it with `dryRun`. */
  async prune(options: { dryRun?: boolean; deadLetters?: boolean } = {}): Promise<PruneSummary> {
    const dryRun = options.dryRun === true
    const { tables } = this.#options
    const now = this.#options.now?.() ?? new Date()
    const processedBefore = new Date(
      now.getTime() - this.#options.processedDeliveriesDays * 86_400_000
    )
    const intentsBefore = new Date(now.getTime() - this.#options.finishedIntentsHours * 3_600_000)
    const run = (target: Target) => (dryRun ? this.#count(target) : this.#delete(target))
    return {
      dryRun,
      processedDeliveries: await run({
        table: tables.webhookDeliveries,
        where: (q, client) =>
          q.where('state', 'processed').where('processed_at', '<', dbDate(client, processedBefore)),
        orderBy: 'processed_at',
      }),
      deadLetters: options.deadLetters
        ? await run({
            table: tables.webhookDeliveries,
            where: (q, client) =>
              q
                .where('state', 'dead')
                .where(
                  'received_at',
                  '<',
                  dbDate(client, new Date(now.getTime() - DEDUP_WINDOW_MS))
                ),
            orderBy: 'id',
          })
        : 0,
      finishedIntents: await run({
        table: tables.executionIntents,
        where: (q, client) =>
          removableIntents(q).where('updated_at', '<', dbDate(client, intentsBefore)),
        orderBy: 'id',
      }),
    }
  }

  #client(): QueryClientContract {
    return this.#options.db.connection(this.#options.connection)
  }

  #bounded<T>(query: any, what: string): Promise<T> {
    const ms = this.#options.statementTimeoutMs
    return withDeadline(withStatementTimeout(query, ms), ms, what)
  }

  /** The account's rows of a table, on the pruner's connection. */
  #rows(client: QueryClientContract, table: string) {
    return client.from(table).where('account', this.#options.account ?? DEFAULT_ACCOUNT)
  }

  async #count(target: Target): Promise<number> {
    const client = this.#client()
    const rows: Array<{ total: number | string }> = await this.#bounded(
      target.where(this.#rows(client, target.table), client).count('* as total'),
      `prune count ${target.table}`
    )
    return Number(rows[0]?.total ?? 0)
  }

  async #delete(target: Target): Promise<number> {
    const client = this.#client()
    const { batchSize } = this.#options
    let removed = 0
    // Ordered by id, the rows a batch passed over (kept: an intent that holds an app's key,
    // a delivery not dead yet) lie before its last id, and stay there: the next batch starts
    // after it instead of reading them again. Without it, each batch read every kept row
    // before it again, and a run over a million kept intents read them once per batch.
    let after: number | null = null
    for (;;) {
      let select = target.where(this.#rows(client, target.table).select('id'), client)
      if (target.orderBy === 'id' && after !== null) select = select.where('id', '>', after)
      const rows: Array<{ id: number }> = await this.#bounded(
        select.orderBy(target.orderBy).orderBy('id').limit(batchSize),
        `prune select ${target.table}`
      )
      if (rows.length === 0) return removed
      after = Number(rows[rows.length - 1].id)
      const deleted = await this.#bounded<unknown>(
        target
          .where(
            this.#rows(client, target.table).whereIn(
              'id',
              rows.map((row) => Number(row.id))
            ),
            client
          )
          .delete(),
        `prune delete ${target.table}`
      )
      removed += affectedRows(deleted)
      if (rows.length < batchSize) return removed
    }
  }
}

/**
 * The pruner of the app's config: its account, its retention, its tables and its statement
 * bound.
 */
export function createPruner(db: Database, config: PayoutsConfig): Pruner {
  const { retention, ledger } = config
  return new Pruner({
    db,
    account: config.account,
    connection: ledger.connection,
    tables: tableNames(ledger.tablePrefix),
    ...retention,
    statementTimeoutMs: ledger.transactionTimeoutMs,
  })
}
