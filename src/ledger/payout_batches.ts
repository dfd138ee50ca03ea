import { createHash, randomUUID } from 'node:crypto'
import type { Database } from '@adonisjs/lucid/database'
import { boundedTransaction } from '../database/deadline.ts'
import { PayoutsApiError, PayoutsConfigError, PayoutsValidationError } from '../client/errors.ts'
import type { PayoutsClient } from '../client/payouts_client.ts'
import type { BatchRow } from '../client/types.ts'
import { validateExecuteInput } from '../client/validation.ts'
import {
  E_PAYOUTS_EXECUTE_NOT_STORED,
  E_PAYOUTS_IDEMPOTENCY_KEY_REUSED,
  E_PAYOUTS_LEDGER_UNREADABLE,
} from '../errors.ts'
import ExecutionIntent, { type IntentState } from '../models/execution_intent.ts'
import PayoutModel from '../models/payout.ts'
import type Payout from '../models/payout.ts'
import { idempotencyKeySchema, type ExecuteFlow } from '../schemas/common.ts'
import { EXECUTE_BATCH_MAX_ITEMS } from '../schemas/requests.ts'
import { executeDataSchemaByFlow, type ExecuteResult } from '../schemas/resources.ts'
import { activeTraceParent } from '../tracing/trace_parent.ts'
import { batchKeyOf, chunkKey, MAX_BATCH_KEY_LENGTH } from './batch_keys.ts'
import { createEscrowDeposit } from './escrow_deposits.ts'
import {
  executeObservation,
  JSON_SAFE,
  parseStoredAnswer,
  storedAnswer,
} from './execute_answers.ts'
import { mayHaveLeft, storedWithRetries, type ExecutionIntents } from './execution_intents.ts'
import type { AppliedInTransaction, PayoutLedger } from './payout_ledger.ts'
import { safeCause, safeError } from '../safe_error.ts'

/** The `flow` of a chunk's intent: its rows may be of any flow each. */
export const BATCH_FLOW = 'batch'

/** Rows of one `executeBatch` call: its intents are committed in one transaction. */
export const MAX_BATCH_ROWS = 10_000

/** Options of `executeBatch`. */
export interface BatchOptions {
  /**
   * The batch's key (8 to 240 url-safe characters): each chunk is sent under
   * `<key>-c<chunk>`, so the same key and rows again never send a row twice. A fresh one when
   * absent.
   */
  idempotencyKey?: string
  /** The user or tenant of the host app whose channel hears about the payouts. */
  ownerId?: string | null
  /** Rows per request, 1 to 100 (the default): part of the batch's identity. */
  chunkSize?: number
  /**
   * Stops the batch before its next chunk (a Ctrl-C): the chunks not sent yet are refused
   * (`not_sent`), and the same key and rows again send them. A chunk in flight finishes.
   */
  signal?: AbortSignal
  /**
   * Called after each chunk (answered from the ledger, sent, or refused as not sent) with the
   * counts so far: a progress line. Not awaited; what it throws is ignored (a progress display
   * never stops a batch).
   */
  onChunk?: (progress: BatchProgress) => void
}

/** What `onChunk` is told after each chunk of a batch. */
export interface BatchProgress {
  /** The chunk just finished, from 0, and the batch's number of chunks. */
  chunk: number
  chunks: number
  /** The batch's rows, and how many have an outcome so far. */
  rows: number
  done: number
  /** The outcomes so far (rows not reached yet are in none). */
  counts: Record<BatchOutcomeName, number>
  /** Since `executeBatch` was called. */
  elapsedMs: number
}

/**
 * What became of one row of a batch:
 * - `created`: the service made the payout; `payout` is its ledger row.
 * - `refused`: the service refused the row (its `code`); final, never sent again.
 * - `failed`: the service refused the row's whole request (a 4xx); nothing was made, and the
 *   same key and rows again send it again.
 * - `unknown`: the request may have reached the service; recovery (or the same key and rows
 *   again) finishes it under its key.
 * - `not_sent`: never sent (the batch stopped before its chunk); the same key and rows again
 *   send it.
 * - `needs_attention`: its request may have reached the service past the replay window; a
 *   human decides (`payouts:intents`); never sent again by the plugin.
 */
export type BatchRowOutcome =
  | { index: number; chunk: number; outcome: 'created'; result: ExecuteResult; payout: Payout }
  | {
      index: number
      chunk: number
      outcome: 'refused' | 'failed' | 'unknown' | 'not_sent' | 'needs_attention'
      code: string
      message: string | null
    }

/** The outcome names, for counts. */
export type BatchOutcomeName = BatchRowOutcome['outcome']

/** What `executeBatch` (and `findBatch`) answers: every row with its outcome, in order. */
export interface ExecutedBatch {
  /** The batch's key (the app's, or the fresh one it was given). */
  idempotencyKey: string
  rows: BatchRowOutcome[]
  counts: Record<BatchOutcomeName, number>
  /** Every row is `created` or `refused`: nothing is left to send, recover or decide. */
  complete: boolean
  /** The chunks' intents, in chunk order. */
  intents: ExecutionIntent[]
}

/** What a chunk's intent stores beside its rows: where it sits in its batch. */
export interface BatchMeta {
  key: string
  chunk: number
  chunks: number
  firstRow: number
  rows: number
  chunkSize: number
  /** SHA-256 of the owner, the chunk size and every row: the batch's identity. */
  digest: string
}

/** A row as a chunk's intent stores it: the validated body, with its flow (never sent). */
type StoredRow = { flow: ExecuteFlow } & Record<string, unknown>

/** One row of a chunk's answer, checked against the row it answers. */
type ChunkRowAnswer =
  | { index: number; success: true; result: ExecuteResult }
  | { index: number; success: false; code: string; message: string | null }

/** A chunk planned: its key, what its intent stores, and the hash a repeat is compared by. */
interface PlannedChunk {
  key: string
  requestBody: { batch: BatchMeta; items: StoredRow[] }
  bodyHash: string
}

/** A batch checked and split, before anything is written. */
export interface BatchPlan {
  key: string
  keyOrigin: 'app' | 'plugin'
  ownerId: string | null
  chunks: PlannedChunk[]
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex')

/** Whether an intent is a chunk of a batch. */
export function isBatchIntent(intent: ExecutionIntent): boolean {
  return intent.flow === BATCH_FLOW
}

function metaOf(intent: ExecutionIntent): BatchMeta {
  return (intent.requestBody as { batch: BatchMeta }).batch
}

function itemsOf(intent: ExecutionIntent): StoredRow[] {
  return (intent.requestBody as { items: StoredRow[] }).items
}

/**
 * Checks a batch as `execute` checks one payout, before anything is written: the rows (each
 * by the single execute's own validation, the error naming the row: `rows.17.amount`), their
 * number, the chunk size and the key. Then splits it into chunks, each with the key it is sent
 * under and the hash that makes the same key with other rows a refusal.
 */
export function planBatch(rows: unknown, options: BatchOptions = {}): BatchPlan {
  if (!Array.isArray(rows)) {
    throw new PayoutsValidationError('rows', 'must be an array of execute inputs')
  }
  if (rows.length === 0) throw new PayoutsValidationError('rows', 'must hold at least one row')
  if (rows.length > MAX_BATCH_ROWS) {
    throw new PayoutsValidationError(
      'rows',
      `must hold at most ${MAX_BATCH_ROWS} rows (got ${rows.length}): split them into several batches, each with its own key`
    )
  }
  const chunkSize = options.chunkSize ?? EXECUTE_BATCH_MAX_ITEMS
  if (!Number.isInteger(chunkSize) || chunkSize < 1 || chunkSize > EXECUTE_BATCH_MAX_ITEMS) {
    throw new PayoutsValidationError(
      'chunkSize',
      `must be an integer from 1 to ${EXECUTE_BATCH_MAX_ITEMS}`
    )
  }
  if (options.idempotencyKey !== undefined) {
    const checked = idempotencyKeySchema.safeParse(options.idempotencyKey)
    if (!checked.success) {
      throw new PayoutsValidationError('idempotencyKey', checked.error.issues[0].message)
    }
    if (options.idempotencyKey.length > MAX_BATCH_KEY_LENGTH) {
      throw new PayoutsValidationError(
        'idempotencyKey',
        `must be at most ${MAX_BATCH_KEY_LENGTH} characters for a batch (its chunks add -c<n>)`
      )
    }
  }
  if (options.onChunk !== undefined && typeof options.onChunk !== 'function') {
    throw new PayoutsValidationError('onChunk', 'must be a function')
  }
  const ownerId = options.ownerId ?? null
  if (ownerId !== null && typeof ownerId !== 'string') {
    throw new PayoutsValidationError('ownerId', 'must be a string')
  }
  const items: StoredRow[] = rows.map((row, index) => {
    try {
      const { flow, payload } = validateExecuteInput(row)
      return { flow, ...payload }
    } catch (error) {
      if (!(error instanceof PayoutsValidationError)) throw error
      throw new PayoutsValidationError(
        `rows.${index}${error.field ? `.${error.field}` : ''}`,
        error.reason
      )
    }
  })
  const key = options.idempotencyKey ?? randomUUID()
  const digest = sha256(JSON.stringify({ ownerId, chunkSize, items }, JSON_SAFE))
  const count = Math.ceil(items.length / chunkSize)
  const chunks = Array.from({ length: count }, (_, chunk) => {
    const firstRow = chunk * chunkSize
    const requestBody = {
      batch: { key, chunk, chunks: count, firstRow, rows: items.length, chunkSize, digest },
      items: items.slice(firstRow, firstRow + chunkSize),
    }
    return { key: chunkKey(key, chunk), requestBody, bodyHash: sha256(JSON.stringify(requestBody)) }
  })
  return {
    key,
    keyOrigin: options.idempotencyKey === undefined ? 'plugin' : 'app',
    ownerId,
    chunks,
  }
}

/**
 * The rows of a chunk's answer, each checked against the row it answers: one result per
 * row, and a success in the shape of its flow's execute answer. Anything else is an answer
 * the service gave but this package cannot read: `INVALID_RESPONSE`, its outcome unknown
 * (the payouts may exist), so recovery asks again under the same key.
 */
function readChunkAnswer(items: StoredRow[], answer: BatchRow[]): ChunkRowAnswer[] {
  const invalid = (message: string) =>
    new PayoutsApiError({
      status: 200,
      code: 'INVALID_RESPONSE',
      message: `unexpected execute-batch answer: ${message}`,
      outcomeUnknown: true,
    })
  const byIndex = new Map<number, BatchRow>()
  for (const row of answer) {
    if (!Number.isInteger(row.index) || row.index < 0 || row.index >= items.length) {
      throw invalid(`a result for row ${row.index}, of ${items.length}`)
    }
    if (byIndex.has(row.index)) throw invalid(`two results for row ${row.index}`)
    byIndex.set(row.index, row)
  }
  return items.map((item, index) => {
    const row = byIndex.get(index)
    if (!row) throw invalid(`no result for row ${index}`)
    if (!row.success) {
      return {
        index,
        success: false,
        code: row.error?.code ?? 'REFUSED',
        message: row.error?.error ?? null,
      }
    }
    const parsed = executeDataSchemaByFlow[item.flow].safeParse(row.data)
    if (!parsed.success) throw invalid(`row ${index}: ${parsed.error.issues[0].message}`)
    return { index, success: true, result: { flow: item.flow, ...parsed.data } as ExecuteResult }
  })
}

/** A chunk's stored answer: per row, the payout's answer (JSON) or the service's refusal. */
type StoredChunkAnswer = {
  results: Array<
    | { index: number; success: true; data: Record<string, unknown> }
    | { index: number; success: false; code: string; message: string | null }
  >
}

/** What the batches need: the executor's options and its intents. */
export interface PayoutBatchesOptions {
  db: Database
  ledger: PayoutLedger
  client: Partial<Pick<PayoutsClient, 'executeBatch'>>
  connection?: string
  transactionTimeoutMs: number
  intents: ExecutionIntents
}

/**
 * The chunks of batches (see `PayoutExecutor.executeBatch`): their intents written together
 * before anything is sent, each chunk sent under its own key, its answer stored with its
 * payouts in one transaction, and every row's outcome read from the chunk's intent.
 */
export class PayoutBatches {
  constructor(private options: PayoutBatchesOptions) {}

  /**
   * The chunks' intents, committed in one transaction before any is sent: from the COMMIT on,
   * a crash leaves the batch to recovery, which sends each chunk under its key. Chunks whose
   * intents exist already (the same key again) are kept, and compared first: another owner,
   * chunk size or any other row under the key is refused, nothing sent.
   */
  async write(plan: BatchPlan): Promise<ExecutionIntent[]> {
    const { intents } = this.options
    const keys = plan.chunks.map((chunk) => chunk.key)
    let found = await intents.findByKeys(keys).catch((error: unknown) => {
      // Nothing was sent by this call; the statement's message holds the chunks' keys.
      throw new E_PAYOUTS_EXECUTE_NOT_STORED('its intents (they could not be read)', {
        outcomeUnknown: false,
        intentId: null,
        cause: error,
      })
    })
    this.#compare(plan, found)
    const missing = plan.chunks.filter((chunk) => !found.has(chunk.key))
    if (missing.length > 0) {
      const traceParent = activeTraceParent()
      const account = this.options.ledger.account
      let inserted = false
      try {
        const created = await intents.write('batch intents', async (trx) => {
          // Of this run (a deadlock's victim is run again): one rolled back never committed.
          inserted = false
          const rows = await ExecutionIntent.createMany(
            missing.map((chunk) => ({
              account,
              idempotencyKey: chunk.key,
              ownerId: plan.ownerId,
              flow: BATCH_FLOW,
              requestBody: chunk.requestBody,
              bodyHash: chunk.bodyHash,
              keyOrigin: plan.keyOrigin,
              state: 'pending' as const,
              // Counted when its chunk is sent: a pending chunk with none never left.
              attempts: 0,
              traceParent,
            })),
            { client: trx, connection: this.options.connection }
          )
          inserted = true
          return rows
        })
        for (const intent of created) found.set(intent.idempotencyKey, intent)
      } catch (error) {
        // A call under the same key wrote them meanwhile, or our COMMIT landed with its answer
        // lost: read them again. Still missing, ours never committed and nothing will be sent.
        const again = await intents.findByKeys(keys).catch(() => null)
        if (again) this.#compare(plan, again)
        if (!again || missing.some((chunk) => !again.has(chunk.key))) {
          throw new E_PAYOUTS_EXECUTE_NOT_STORED('its intents', {
            outcomeUnknown: again === null && inserted,
            intentId: null,
            cause: error,
          })
        }
        found = again
      }
    }
    return plan.chunks.map((chunk) => found.get(chunk.key)!)
  }

  /** The same key again: refused unless each chunk found is this batch's, for this owner. */
  #compare(plan: BatchPlan, found: Map<string, ExecutionIntent>) {
    for (const chunk of plan.chunks) {
      const intent = found.get(chunk.key)
      if (!intent) continue
      if (
        intent.flow !== BATCH_FLOW ||
        intent.bodyHash !== chunk.bodyHash ||
        intent.ownerId !== plan.ownerId
      ) {
        throw new E_PAYOUTS_IDEMPOTENCY_KEY_REUSED([plan.key])
      }
    }
  }

  /** Sends a chunk under its key and reads its answer (the executor counted the attempt). */
  async send(intent: ExecutionIntent): Promise<ChunkRowAnswer[]> {
    const { client } = this.options
    if (!client.executeBatch) {
      throw new PayoutsConfigError('this client cannot send batches (no executeBatch)')
    }
    const items = itemsOf(intent)
    const answer = await client.executeBatch(
      { items: items as Parameters<PayoutsClient['executeBatch']>[0]['items'] },
      { idempotencyKey: intent.idempotencyKey }
    )
    return readChunkAnswer(items, answer)
  }

  /**
   * Stores a chunk's answer in one bounded transaction: a ledger row per payout made (source
   * `execute`, `recovery` after more than one attempt), the escrow rows of stablecoin ones,
   * and the intent `succeeded` with every row's answer. Returns once the payouts' changes were
   * told (`payouts:created` for each). A deadlock's victim is run again (see the executor's
   * store); a store that fails leaves the chunk to recovery, which asks again under its key
   * and stores what the service answers again.
   */
  async store(intent: ExecutionIntent, answer: ChunkRowAnswer[]): Promise<BatchRowOutcome[]> {
    const { ledger } = this.options
    const items = itemsOf(intent)
    const made = answer.filter((row) => row.success)
    const source = intent.attempts > 1 ? 'recovery' : 'execute'
    const client = this.options.db.connection(this.options.connection)
    let stored: AppliedInTransaction | undefined
    await storedWithRetries(client, intent, 'execute batch store', () =>
      boundedTransaction(
        client,
        {
          timeoutMs: this.options.transactionTimeoutMs,
          what: 'execute batch store',
          writes: PayoutModel.table,
        },
        async (trx) => {
          stored = undefined
          if (made.length > 0) {
            stored = await ledger.applyBatchInTransaction(
              trx,
              made.map((row) =>
                executeObservation(items[row.index], row.result, intent.ownerId, source)
              )
            )
          }
          for (const row of made) {
            if (row.result.flow === 'stablecoin_to_fiat')
              await createEscrowDeposit(trx, row.result, ledger.account)
          }
          intent.useTransaction(trx)
          intent.state = 'succeeded'
          intent.response = {
            results: answer.map((row) =>
              row.success
                ? { index: row.index, success: true, data: storedAnswer(row.result) }
                : { index: row.index, success: false, code: row.code, message: row.message }
            ),
          } satisfies StoredChunkAnswer
          intent.error = null
          await intent.save()
        }
      )
    ).catch((error) => {
      throw new E_PAYOUTS_EXECUTE_NOT_STORED('the payouts the service made', {
        outcomeUnknown: true,
        intentId: intent.id,
        cause: error,
      })
    })
    await stored?.notified
    const payouts = new Map((stored?.results ?? []).map((r) => [r.payout.payoutUuid, r.payout]))
    return this.#outcomes(intent, answer, payouts)
  }

  /**
   * The rows of a chunk that needs no request: answered (its stored answer, the payouts read
   * from the ledger), or waiting for a human (past the window, it is flagged now). Null when
   * the chunk is to be sent.
   */
  async answered(intent: ExecutionIntent): Promise<BatchRowOutcome[] | null> {
    if (intent.state === 'succeeded') return this.#stored(intent)
    if (intent.state === 'needs_attention') return this.#rows(intent, 'needs_attention')
    // Sent before and maybe made, past the window the service would make it again.
    if (mayHaveLeft(intent) && !this.options.intents.insideWindow(intent, this.#now())) {
      await this.options.intents.transition(intent, { state: 'needs_attention' }).catch(() => {})
      return this.#rows(intent, 'needs_attention')
    }
    return null
  }

  /**
   * A chunk the batch did not send (it stopped): one never sent is refused (final; the same
   * key and rows again send it); any other keeps its state, read as it is.
   */
  async notSent(
    intent: ExecutionIntent,
    stop: { code: string; message: string }
  ): Promise<BatchRowOutcome[]> {
    const answered = await this.answered(intent)
    if (answered) return answered
    if (intent.state === 'pending' && intent.attempts === 0) {
      const refused = await this.options.intents
        .transition(intent, { state: 'refused', error: { ...stop, stopped: true } })
        .catch(() => null)
      // Not marked, it stays pending and recovery will send it; moved meanwhile, another
      // process is sending it.
      if (refused === null) return this.#rows(intent, 'unknown', 'E_PAYOUTS_EXECUTE_NOT_STORED')
      if (!refused) return this.#rows(intent, 'unknown', 'SENT_ELSEWHERE')
    }
    return this.read(intent)
  }

  /** The rows of a chunk whose attempt threw, by the state the attempt left it in. */
  afterError(intent: ExecutionIntent, error: unknown): BatchRowOutcome[] {
    const code = (error as { code?: string }).code ?? (error as Error).name ?? 'Error'
    const message = safeError(error).message
    // One of its own writes failed: the chunk is left pending, which recovery sends.
    if (error instanceof E_PAYOUTS_EXECUTE_NOT_STORED) {
      return this.#rows(intent, 'unknown', code, message)
    }
    return this.#rows(intent, outcomeOfState(intent.state), code, message)
  }

  /** The rows of a chunk as its intent says now, without sending or changing anything. */
  async read(intent: ExecutionIntent): Promise<BatchRowOutcome[]> {
    if (intent.state === 'succeeded') return this.#stored(intent)
    const error = intent.error as { code?: string; message?: string } | null
    return this.#rows(
      intent,
      outcomeOfState(intent.state),
      error?.code ?? intent.state,
      error?.message ?? null
    )
  }

  /**
   * A batch as the ledger holds it, found by its key: every chunk's rows with their outcome
   * (null when no chunk of it is stored). Nothing is sent.
   */
  async find(batchKey: string): Promise<ExecutedBatch | null> {
    const stored = await this.options.intents
      .findByKeyPrefix(`${batchKey}-c`, BATCH_FLOW)
      .catch((error: unknown) => {
        // The statement's message holds the batch's key.
        throw new E_PAYOUTS_LEDGER_UNREADABLE(['a batch', safeError(error).message], {
          cause: safeCause(error),
        })
      })
    const chunks = stored.filter((intent) => batchKeyOf(intent.idempotencyKey) === batchKey)
    if (chunks.length === 0) return null
    chunks.sort((a, b) => metaOf(a).chunk - metaOf(b).chunk)
    const rows: BatchRowOutcome[] = []
    for (const intent of chunks) rows.push(...(await this.read(intent)))
    const batch = summarize(batchKey, rows, chunks)
    // A chunk the pruner removed (refused, never sent) is no longer here to count.
    if (chunks.length < metaOf(chunks[0]).chunks) batch.complete = false
    return batch
  }

  #now() {
    return this.options.intents.now()
  }

  /** Every row of the chunk with one outcome. */
  #rows(
    intent: ExecutionIntent,
    outcome: Exclude<BatchOutcomeName, 'created'>,
    code?: string,
    message?: string | null
  ): BatchRowOutcome[] {
    const meta = metaOf(intent)
    const error = intent.error as { code?: string; message?: string } | null
    return itemsOf(intent).map((_, offset) => ({
      index: meta.firstRow + offset,
      chunk: meta.chunk,
      outcome,
      code: code ?? error?.code ?? outcome,
      message: message === undefined ? (error?.message ?? null) : message,
    }))
  }

  /** A succeeded chunk's rows from its stored answer, the payouts read from the ledger. */
  async #stored(intent: ExecutionIntent): Promise<BatchRowOutcome[]> {
    const stored = intent.response as StoredChunkAnswer | null
    if (!stored?.results) {
      // Settled as sent by an operator: the service made its payouts, whose ids we lack.
      return this.#rows(
        intent,
        'needs_attention',
        'SETTLED_BY_OPERATOR',
        'settled as sent by an operator; its payouts are not known here'
      )
    }
    const answer: ChunkRowAnswer[] = stored.results.map((row) =>
      row.success
        ? { index: row.index, success: true, result: parseStoredAnswer(row.data) }
        : { index: row.index, success: false, code: row.code, message: row.message }
    )
    const ids = answer.flatMap((row) => (row.success ? [row.result.payoutId] : []))
    const payouts = new Map<string, Payout>()
    if (ids.length > 0) {
      const rows = await PayoutModel.query({ connection: this.options.connection })
        .where('account', this.options.ledger.account)
        .whereIn('payout_uuid', ids)
      for (const row of rows) payouts.set(row.payoutUuid, row)
    }
    return this.#outcomes(intent, answer, payouts)
  }

  #outcomes(
    intent: ExecutionIntent,
    answer: ChunkRowAnswer[],
    payouts: Map<string, Payout>
  ): BatchRowOutcome[] {
    const meta = metaOf(intent)
    return answer.map((row) => {
      const index = meta.firstRow + row.index
      if (!row.success) {
        return {
          index,
          chunk: meta.chunk,
          outcome: 'refused',
          code: row.code,
          message: row.message,
        }
      }
      const payout = payouts.get(row.result.payoutId)
      if (!payout) throw new Error(`the ledger has no row for payout ${row.result.payoutId}`)
      return { index, chunk: meta.chunk, outcome: 'created', result: row.result, payout }
    })
  }
}

/** How a row reads a chunk's state when the chunk has no answer. */
function outcomeOfState(state: IntentState): Exclude<BatchOutcomeName, 'created'> {
  if (state === 'failed') return 'failed'
  if (state === 'refused') return 'not_sent'
  if (state === 'needs_attention' || state === 'succeeded') return 'needs_attention'
  return 'unknown'
}

/** The batch's answer: its rows in order, counted. */
export function summarize(
  idempotencyKey: string,
  rows: BatchRowOutcome[],
  intents: ExecutionIntent[]
): ExecutedBatch {
  const counts: Record<BatchOutcomeName, number> = {
    created: 0,
    refused: 0,
    failed: 0,
    unknown: 0,
    not_sent: 0,
    needs_attention: 0,
  }
  for (const row of rows) counts[row.outcome]++
  return {
    idempotencyKey,
    rows,
    counts,
    complete: counts.created + counts.refused === rows.length,
    intents,
  }
}
