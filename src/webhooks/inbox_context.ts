import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { hasReturning } from '../database/dialects.ts'
import { DEFAULT_ACCOUNT } from '../constants.ts'

/** A delivery as the route hands it to the inbox. */
export interface InboxDeliveryInput {
  deliveryId: string
  eventType: string
  rawBody: Buffer
  signatureHeader: string | null
  source: 'webhook' | 'websocket'
  /**
   * The W3C traceparent of the context the delivery was received in (the route's); stored
   * only when it is one. None for the stream's messages.
   */
  traceParent?: string | null
}

/** A stored delivery, as the processor reads it back. */
export interface InboxRow {
  id: number
  deliveryId: string
  eventType: string
  rawBody: Buffer
  source: string
  attempts: number
  /** The traceparent it was received in (see `InboxDeliveryInput`), or null. */
  traceParent: string | null
}

/** What became of a row processed inside the claiming transaction. */
export type InboxVerdict =
  { state: 'processed'; note: string | null } | { state: 'dead'; note: string }

/** How an `InboxStore` runs its statements. */
export interface InboxStoreOptions {
  /**
   * The account whose deliveries it stores and processes (`config.account`): accounts share
   * the table, each store sees its own rows only. Default `main`.
   */
  account?: string
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
  /**
   * SQLite with better-sqlite3: another process writes the same file (worker mode, where
   * `payouts:work` applies the inbox), so the insert waits for that process's write lock off
   * the event loop (`writingWithoutBlocking`) instead of in SQLite's busy handler. It costs
   * three PRAGMA statements and a transaction of its own per insert batch (10-25 µs of CPU
   * per delivery in a batch of 16), so a process that is alone on its file (inline mode) does
   * not pay it. Default false.
   */
  lockWaitOffLoop?: boolean
}

/** What the inbox's queries share: its table, its account, its options, and its connection. */
export interface InboxContext {
  table: string
  /** Every statement reads and writes this account's rows only. */
  account: string
  options: InboxStoreOptions
  /** The inbox's connection, looked up anew at each use. */
  client(): QueryClientContract
}

/** Rows per statement: far below every dialect's bound-parameter limit (9 per row). */
export const MAX_BATCH = 200

/** Multi-row statements with RETURNING here (not MySQL, nor when row by row is forced). */
export function batches(context: InboxContext, client: QueryClientContract): boolean {
  return !context.options.rowByRow && hasReturning(client)
}

/** The account of a store's options: `main` when none is named. */
export function accountOf(options: { account?: string }): string {
  return options.account ?? DEFAULT_ACCOUNT
}

/**
 * `query` narrowed to the context's account. Ids are unique across accounts, but a filter on
 * each statement keeps one account's store from ever touching another's rows, whatever it
 * is handed.
 */
export function own<Query>(context: Pick<InboxContext, 'account'>, query: Query): Query {
  return (query as any).where('account', context.account)
}
