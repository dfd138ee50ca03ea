import { withDeadline } from '../time_bounds.ts'
import {
  boundedTransaction,
  retryingDeadlocks,
  withStatementTimeout,
} from '../database/deadline.ts'
import type { Database } from '@adonisjs/lucid/database'
import type { QueryClientContract, TransactionClientContract } from '@adonisjs/lucid/types/database'
import type { DateTime } from 'luxon'
import { dbDate } from '../database/dates.ts'
import { affectedRows } from '../database/dialects.ts'
import { channels, traced } from '../tracing/channels.ts'
import ExecutionIntent, { type IntentState } from '../models/execution_intent.ts'

/**
 * `store`, a transaction that saves `intent` with the service's answer, run again while the
 * database rolls it back as a deadlock's victim (`retryingDeadlocks`). A run rolled back at
 * its COMMIT had saved the intent already: each run starts from what the row held before, so
 * it writes the intent again, and a failed store leaves the intent out of its transaction.
 */
export async function storedWithRetries<T>(
  client: QueryClientContract,
  intent: ExecutionIntent,
  what: string,
  store: () => Promise<T>
): Promise<T> {
  // Lucid's own copy, replaced (never changed in place) when a save succeeds.
  const before = { ...intent.$original }
  try {
    return await retryingDeadlocks(client, what, () => {
      intent.$original = { ...before }
      return store()
    })
  } catch (error) {
    intent.$original = { ...before }
    intent.$trx = undefined
    throw error
  }
}

/** What one recovery pass did with the intents it found. */
export interface RecoverySummary {
  resent: number
  succeeded: number
  failed: number
  unknown: number
  flagged: number
}

/** What the intents' bookkeeping takes from the executor's options (defaults applied). */
export interface ExecutionIntentsOptions {
  db: Database
  /** The account whose intents these are: a key is looked up, and recovered, within it. */
  account: string
  connection?: string
  /** Bound of each write (see `boundedTransaction`) and of a key's lookup; 0 waits forever. */
  transactionTimeoutMs: number
  /** The service's replay window. */
  idempotencyWindowMs: number
  /** Recovery stops re-sending this long before the window closes. */
  safetyMarginMs: number
  now: () => DateTime
}

/**
 * Whether an intent's request may have reached the service: unknown, pending after an
 * attempt, or failed or refused after more than one attempt (an earlier one's outcome was
 * unknown, and a later definitive refusal, a 401 after a key rotation say, does not undo it),
 * unless an operator checked at the service and settled it as not sent. A pending intent with
 * no attempt never left, and one failed or refused at its only attempt made no payout: sent
 * again under the same key, it can only ever make the one payout that does not exist yet.
 */
export function mayHaveLeft(intent: ExecutionIntent): boolean {
  if (intent.state === 'unknown') return true
  if (intent.state === 'pending') return intent.attempts > 0
  if (intent.state === 'failed' || intent.state === 'refused') {
    const resolution = (intent.error as { resolution?: { as?: string } } | null)?.resolution
    return intent.attempts > 1 && resolution?.as !== 'not-sent'
  }
  return false
}

/**
 * The executor's intents: their writes, each a bounded transaction of its own, the replay
 * window's rule, the intents this process is sending, and the recovery pass that sends the
 * ones a crash or an unknown outcome left behind again (see `PayoutExecutor`).
 */
export class ExecutionIntents {
  /**
   * Intents this process is sending right now, each with the number of callers holding it (a
   * batch holds all its chunks while it sends them one by one): recovery leaves them alone.
   */
  #sending = new Map<number, number>()

  constructor(private options: ExecutionIntentsOptions) {}

  /** Runs `work`, the sending of the intent: recovery and `retry` leave it alone meanwhile. */
  sending<T>(intent: ExecutionIntent, work: () => Promise<T>): Promise<T> {
    return this.holding([intent], work)
  }

  /**
   * Runs `work` while the intents count as being sent by this process: a batch holds every
   * chunk it has yet to send, so this process's recovery job never sends one beside it.
   */
  async holding<T>(intents: ExecutionIntent[], work: () => Promise<T>): Promise<T> {
    for (const { id } of intents) this.#sending.set(id, (this.#sending.get(id) ?? 0) + 1)
    try {
      return await work()
    } finally {
      for (const { id } of intents) {
        const left = (this.#sending.get(id) ?? 1) - 1
        if (left > 0) this.#sending.set(id, left)
        else this.#sending.delete(id)
      }
    }
  }

  /** Whether this process is sending the intent right now. */
  isSending(intent: ExecutionIntent): boolean {
    return this.#sending.has(intent.id)
  }

  /**
   * A write of the execute path, bounded by `transactionTimeoutMs` (`boundedTransaction`), run
   * again when the database rolls it back as a deadlock's victim (`retryingDeadlocks`): two
   * calls with one key at once on MySQL made one (a claim's UPDATE beside the other's store).
   * `work` may run more than once: it builds what it writes anew each time.
   */
  write<T>(what: string, work: (trx: TransactionClientContract) => Promise<T>): Promise<T> {
    const client = this.options.db.connection(this.options.connection)
    return retryingDeadlocks(client, what, () => this.#bounded(client, what, work))
  }

  #bounded<T>(
    client: QueryClientContract,
    what: string,
    work: (trx: TransactionClientContract) => Promise<T>
  ): Promise<T> {
    return boundedTransaction(
      client,
      { timeoutMs: this.options.transactionTimeoutMs, what, writes: ExecutionIntent.table },
      work
    )
  }

  /** Saves the intent's changes in a bounded transaction of their own. */
  async save(intent: ExecutionIntent, what: string) {
    const client = this.options.db.connection(this.options.connection)
    try {
      await storedWithRetries(client, intent, what, () =>
        this.#bounded(client, what, async (trx) => {
          intent.useTransaction(trx)
          await intent.save()
        })
      )
    } finally {
      // A transaction given up at its deadline never says it ended: forget it here.
      intent.$trx = undefined
    }
  }

  /** The intent of a key, read within the same bound. */
  findByKey(key: string): Promise<ExecutionIntent | null> {
    const ms = this.options.transactionTimeoutMs
    const query = ExecutionIntent.query({ connection: this.options.connection })
      .where('account', this.options.account)
      .where('idempotency_key', key)
    return withDeadline(withStatementTimeout(query, ms).first(), ms, 'execute intent lookup')
  }

  /**
   * The intents of these keys, by key, each read within the bound (a batch's chunks: 500 keys
   * per statement, under every database's limit of bound parameters).
   */
  async findByKeys(keys: string[]): Promise<Map<string, ExecutionIntent>> {
    const ms = this.options.transactionTimeoutMs
    const found = new Map<string, ExecutionIntent>()
    for (let start = 0; start < keys.length; start += 500) {
      const query = ExecutionIntent.query({ connection: this.options.connection })
        .where('account', this.options.account)
        .whereIn('idempotency_key', keys.slice(start, start + 500))
      const rows = await withDeadline(
        withStatementTimeout(query, ms).exec(),
        ms,
        'execute intents lookup'
      )
      for (const intent of rows) found.set(intent.idempotencyKey, intent)
    }
    return found
  }

  /**
   * The intents whose keys start with `prefix` and are of `flow` (a batch's chunks: the
   * caller keeps those of its batch), oldest first. `_` is a wildcard of LIKE: escaped.
   */
  findByKeyPrefix(prefix: string, flow: string): Promise<ExecutionIntent[]> {
    const ms = this.options.transactionTimeoutMs
    const pattern = `${prefix.replace(/[!%_]/g, (char) => `!${char}`)}%`
    const query = ExecutionIntent.query({ connection: this.options.connection })
      .where('account', this.options.account)
      .where('flow', flow)
      .whereRaw(`idempotency_key LIKE ? ESCAPE '!'`, [pattern])
      .orderBy('id', 'asc')
    return withDeadline(withStatementTimeout(query, ms).exec(), ms, 'execute intents lookup')
  }

  /** The executor's clock. */
  now(): DateTime {
    return this.options.now()
  }

  /** The replay window's rule: the intent's key is younger than the window less the margin. */
  insideWindow(intent: ExecutionIntent, now: DateTime): boolean {
    const deadline = this.options.idempotencyWindowMs - this.options.safetyMarginMs
    return now.diff(intent.createdAt).toMillis() <= deadline
  }

  /**
   * The pass of `PayoutExecutor.recover`: the intents left pending or unknown, older than
   * `olderThanMs`, each one sent again through `send` inside the window, flagged past it.
   */
  async recover(
    options: { olderThanMs?: number; limit?: number },
    send: (intent: ExecutionIntent) => Promise<unknown>
  ): Promise<RecoverySummary> {
    const now = this.options.now()
    const olderThan = now.minus({ milliseconds: options.olderThanMs ?? 60_000 })
    const summary: RecoverySummary = { resent: 0, succeeded: 0, failed: 0, unknown: 0, flagged: 0 }
    const intents = await ExecutionIntent.query({ connection: this.options.connection })
      .where('account', this.options.account)
      .whereIn('state', ['pending', 'unknown'])
      .where(
        'updated_at',
        '<=',
        dbDate(this.options.db.connection(this.options.connection), olderThan)
      )
      .orderBy('id', 'asc')
      .limit(options.limit ?? 100)
    for (const intent of intents) {
      if (this.isSending(intent)) continue
      // A pending intent with no attempt (written by an older version, whose attempt came in
      // a second write) never left: sending it can only make its one payout.
      if (mayHaveLeft(intent) && !this.insideWindow(intent, now)) {
        if (await this.transition(intent, { state: 'needs_attention' })) summary.flagged++
        continue
      }
      summary.resent++
      try {
        await this.#resend(intent, send)
        summary.succeeded++
      } catch {
        if (intent.state === 'needs_attention') summary.flagged++
        else if (intent.state === 'unknown') summary.unknown++
        else summary.failed++
      }
    }
    return summary
  }

  /**
   * One intent sent again, traced on `svc-payouts.recover` with the traceparent of the execute
   * that made it (its span links to that trace) and the state the attempt left it in.
   */
  #resend(intent: ExecutionIntent, send: (intent: ExecutionIntent) => Promise<unknown>) {
    return traced(
      channels.recover,
      () => ({
        intentId: intent.id,
        keyOrigin: intent.keyOrigin ?? ('app' as const),
        traceParent: intent.traceParent ?? null,
      }),
      async (trace) => {
        try {
          await send(intent)
        } finally {
          if (trace) trace.outcome = intent.state
        }
      }
    )
  }

  /**
   * Counts an attempt before its request is sent, only if the intent is still in the state
   * and at the attempt it was read with (a conditional UPDATE, bounded). False: another caller
   * moved it meanwhile (another process counted its own attempt and is sending it, or a
   * stopped batch refused it as not sent), and this one must not send it.
   */
  async countAttempt(intent: ExecutionIntent, at: DateTime): Promise<boolean> {
    const changed = await this.#guarded(intent, 'execute attempt', (trx) => ({
      attempts: intent.attempts + 1,
      last_attempt_at: dbDate(trx, at),
    }))
    if (changed !== 1) return false
    intent.attempts += 1
    intent.lastAttemptAt = at
    // As stored: a later save() of the model writes only what changes after this.
    intent.$original.attempts = intent.attempts
    intent.$original.lastAttemptAt = at
    return true
  }

  /**
   * Moves an intent to a new state only if it is still in the state and at the attempt it
   * was read with (a conditional UPDATE, bounded): a caller that moved it meanwhile wins.
   */
  async transition(
    intent: ExecutionIntent,
    to: { state: IntentState; error?: Record<string, unknown> }
  ): Promise<boolean> {
    const changed = await this.#guarded(intent, `intent ${to.state}`, () => ({
      state: to.state,
      ...(to.error && { error: JSON.stringify(to.error) }),
    }))
    if (changed !== 1) return false
    intent.state = to.state
    if (to.error) intent.error = to.error
    return true
  }

  /**
   * One conditional UPDATE of the intent, bounded: applied only if it is still in the state
   * and at the attempt it was read with. The rows it changed (1, or 0 when a caller moved it).
   */
  #guarded(
    intent: ExecutionIntent,
    what: string,
    changes: (trx: TransactionClientContract) => Record<string, unknown>
  ): Promise<number> {
    return this.write(what, async (trx) =>
      affectedRows(
        await trx
          .from(ExecutionIntent.table)
          .where('account', this.options.account)
          .where('id', intent.id)
          .where('state', intent.state)
          .where('attempts', intent.attempts)
          .update({ ...changes(trx), updated_at: dbDate(trx, this.options.now()) })
      )
    )
  }
}
