import { isDeadlineError } from '../time_bounds.ts'
import { safeError } from '../safe_error.ts'
import { channels, traced } from '../tracing/channels.ts'
import { activeTraceParent } from '../tracing/trace_parent.ts'
import { boundedTransaction } from '../database/deadline.ts'
import { createHash, randomUUID } from 'node:crypto'
import type { Database } from '@adonisjs/lucid/database'
import { DateTime } from 'luxon'
import {
  PayoutsApiError,
  PayoutsConfigError,
  PayoutsNetworkError,
  PayoutsValidationError,
} from '../client/errors.ts'
import {
  validateExecuteInput,
  type ExecuteInput,
  type PayoutsClient,
} from '../client/payouts_client.ts'
import type { ExecuteResult } from '../schemas/resources.ts'
import ExecutionIntent, { type IntentState } from '../models/execution_intent.ts'
import PayoutModel from '../models/payout.ts'
import type Payout from '../models/payout.ts'
import {
  E_PAYOUTS_COMMIT_UNCONFIRMED,
  E_PAYOUTS_EXECUTE_NOT_STORED,
  E_PAYOUTS_IDEMPOTENCY_KEY_REUSED,
  E_PAYOUTS_INTENT_NEEDS_ATTENTION,
} from '../errors.ts'
import { idempotencyKeySchema } from '../schemas/common.ts'
import { createEscrowDeposit } from './escrow_deposits.ts'
import { sharedAccount } from './accounts.ts'
import {
  executeObservation,
  JSON_SAFE,
  parseStoredAnswer,
  storedAnswer,
} from './execute_answers.ts'
import {
  ExecutionIntents,
  mayHaveLeft,
  storedWithRetries,
  type RecoverySummary,
} from './execution_intents.ts'
import {
  isBatchIntent,
  planBatch,
  PayoutBatches,
  summarize,
  type BatchOptions,
  type BatchRowOutcome,
  type ExecutedBatch,
} from './payout_batches.ts'
import type { AppliedInTransaction, PayoutLedger } from './payout_ledger.ts'

export { mayHaveLeft, type RecoverySummary } from './execution_intents.ts'
export type {
  BatchOptions,
  BatchOutcomeName,
  BatchProgress,
  BatchRowOutcome,
  ExecutedBatch,
} from './payout_batches.ts'

/**
 * Errors of a claim that found the intent moved by another caller since it was read (see
 * `#repeat`), and how many times a repeated key reads its intent before it gives up.
 */
const MOVED_MEANWHILE = new WeakSet<Error>()
const REPEAT_READS = 4

/** What `execute` returns: the typed API result, the local row and the intent. */
export interface ExecutedPayout {
  result: ExecuteResult
  payout: Payout
  intent: ExecutionIntent
}

/** What the executor needs: the ledger to store responses, and the client to send. */
export interface PayoutExecutorOptions {
  db: Database
  ledger: PayoutLedger
  /** `executeBatch` is needed only to send batches. */
  client: Pick<PayoutsClient, 'execute'> & Partial<Pick<PayoutsClient, 'executeBatch'>>
  /** Its ledger's (naming another is refused): an idempotency key is unique per account. */
  account?: string
  connection?: string
  /** Bound of the transaction that stores a response (see `boundedTransaction`). */
  transactionTimeoutMs?: number
  /** The service's replay window (24 h). */
  idempotencyWindowMs?: number
  /** Recovery stops re-sending this long before the window closes. */
  safetyMarginMs?: number
  now?: () => DateTime
}

/**
 * Whether a write that failed may still have committed: one given up at its deadline (ours
 * or the driver's), or whose COMMIT failed, which may have reached the server with its
 * answer lost.
 */
function mayHaveCommitted(error: unknown): boolean {
  return (
    isDeadlineError(error) ||
    error instanceof E_PAYOUTS_COMMIT_UNCONFIRMED ||
    (error as Error | undefined)?.name === 'KnexTimeoutError'
  )
}

/**
 * What a failed attempt says about the intent. `unknown` only when a request may have
 * reached the service; `refused` when none left this process or took effect there; `failed`
 * when the service answered a definitive no.
 */
function stateAfter(error: unknown, sentBefore: boolean): IntentState {
  // Nothing left this process, or the service refused it unprocessed (a 429, spec Errors;
  // also the client's own hold past the ceiling). `outcomeUnknown` covers earlier retries.
  const tookNoEffect =
    error instanceof PayoutsValidationError ||
    error instanceof PayoutsConfigError ||
    (error instanceof PayoutsNetworkError && !error.outcomeUnknown) ||
    (error instanceof PayoutsApiError && error.status === 429 && !error.outcomeUnknown)
  if (tookNoEffect) {
    if (!sentBefore) return 'refused'
    // An earlier attempt may have gone out; a body that cannot be sent again needs a human.
    return error instanceof PayoutsApiError ? 'unknown' : 'needs_attention'
  }
  const definitive =
    error instanceof PayoutsApiError &&
    !error.outcomeUnknown &&
    error.status >= 400 &&
    error.status < 500 &&
    error.status !== 429 &&
    error.code !== 'IDEMPOTENCY_REQUEST_IN_FLIGHT'
  return definitive ? 'failed' : 'unknown'
}

/**
 * Sends payouts so that none is ever sent twice: the input is validated, then the intent,
 * with a fresh Idempotency-Key, is committed before the request leaves; a crash or an
 * unknown outcome leaves it `unknown`, and recovery re-sends the same body with the same
 * key while the service still remembers it. Past that window a human decides; a new key
 * is never used. A request that never left is `refused`, and nothing re-sends it.
 */
export class PayoutExecutor {
  #options: Required<Omit<PayoutExecutorOptions, 'connection'>> & { connection?: string }
  /** The intents' writes, the window's rule, the ones being sent, and recovery. */
  #intents: ExecutionIntents
  /** The chunks of batches: their intents, requests, answers and rows. */
  #batches: PayoutBatches

  constructor(options: PayoutExecutorOptions) {
    this.#options = {
      idempotencyWindowMs: 24 * 3600 * 1000,
      safetyMarginMs: 3600 * 1000,
      transactionTimeoutMs: 0,
      now: () => DateTime.now(),
      ...options,
      account: sharedAccount(options.account, options.ledger, 'an executor'),
    }
    this.#intents = new ExecutionIntents(this.#options)
    this.#batches = new PayoutBatches({ ...this.#options, intents: this.#intents })
  }

  /** The account whose payouts it sends (its ledger's). */
  get account(): string {
    return this.#options.account
  }

  /**
   * Executes a payout for `ownerId` (a user or tenant id of the host app). With an
   * `idempotencyKey` of the app's (a request's `Idempotency-Key` header, `payout-order-42`; 8 to 255 url-safe characters), a
   * repeated call never sends a second payout: after a success it answers the stored
   * result without a request; otherwise it sends again with that same key, which the
   * service answers with the original payout. The same key with another body or another
   * owner is refused (E_PAYOUTS_IDEMPOTENCY_KEY_REUSED).
   */
  execute(
    input: ExecuteInput,
    options: { ownerId?: string | null; idempotencyKey?: string } = {}
  ): Promise<ExecutedPayout> {
    return traced(
      channels.execute,
      () => ({
        keyOrigin: options.idempotencyKey === undefined ? ('plugin' as const) : ('app' as const),
      }),
      async (trace) => {
        const executed = await this.#execute(input, options)
        if (trace) {
          trace.intentId = executed.intent.id
          trace.payoutId = executed.payout.payoutUuid
          trace.flow = executed.result.flow
          trace.outcome = executed.intent.state
        }
        return executed
      }
    )
  }

  async #execute(
    input: ExecuteInput,
    options: { ownerId?: string | null; idempotencyKey?: string }
  ): Promise<ExecutedPayout> {
    // Refused before the intent exists: nothing is recorded that could be re-sent.
    const { flow } = validateExecuteInput(input)
    if (options.idempotencyKey !== undefined) {
      const checked = idempotencyKeySchema.safeParse(options.idempotencyKey)
      if (!checked.success) {
        throw new PayoutsValidationError('idempotencyKey', checked.error.issues[0].message)
      }
    }
    const body: Record<string, unknown> = { ...input }
    delete body.flow
    const serialized = JSON.stringify(body, JSON_SAFE)
    const fields = {
      account: this.#options.account,
      idempotencyKey: options.idempotencyKey ?? randomUUID(),
      ownerId: options.ownerId ?? null,
      flow,
      requestBody: { flow, ...body },
      bodyHash: createHash('sha256').update(serialized).digest('hex'),
      // An app's key is kept as long as the payout it made (see `Pruner`); ours may go.
      keyOrigin: options.idempotencyKey === undefined ? ('plugin' as const) : ('app' as const),
      state: 'pending' as const,
      // Committed with its first attempt counted: from its COMMIT on, recovery sends it under
      // its key if this process dies before recording the outcome.
      attempts: 1,
      lastAttemptAt: this.#options.now(),
      // The execute's trace: a recovery run that sends it again links to it.
      traceParent: activeTraceParent(),
    }
    let intent: ExecutionIntent
    // Whether the insert reached the server: past it, a COMMIT given up at its deadline may
    // have landed all the same.
    let inserted = false
    try {
      intent = await this.#intents.write('execute intent', async (trx) => {
        // Of this run (a deadlock's victim is run again): one rolled back never committed.
        inserted = false
        const created = await ExecutionIntent.create(fields, {
          client: trx,
          connection: this.#options.connection,
        })
        inserted = true
        return created
      })
    } catch (error) {
      // The key's unique index: this key was used before (or is being used right now).
      const existing =
        options.idempotencyKey === undefined
          ? null
          : await this.#intents.findByKey(fields.idempotencyKey).catch(() => null)
      // No intent found: nothing was sent by this call. Failed before its INSERT was done, the
      // transaction never committed and nothing will be sent (call again). Failed after it
      // (the COMMIT given up at its deadline), the intent may exist with its attempt, and
      // recovery would send it under its key: the caller must not send it under another.
      if (!existing) {
        throw new E_PAYOUTS_EXECUTE_NOT_STORED('its intent', {
          outcomeUnknown: inserted,
          intentId: null,
          cause: error,
        })
      }
      return this.#repeat(existing, fields)
    }
    return this.#sendOne(intent, { counted: true })
  }

  /**
   * Executes many payouts for `ownerId` as one batch, none ever twice. The rows are checked
   * as `execute` checks one (an error names the row, `rows.17.amount`), then split into
   * chunks of at most `chunkSize` (100) rows, each sent as one execute-batch request under
   * its own key derived from the batch's (`<key>-c<chunk>`). Every chunk's intent, with its
   * rows, is committed before the first request: a crash leaves the batch to recovery, which
   * sends each chunk under its key. A lost answer is recovered as an execute's is: the same
   * key, inside the window; `needs_attention` past it. Chunks go out one after the other;
   * the first one the service does not answer row by row (a lost answer, a 4xx, no
   * connection) stops the batch, and the chunks after it are refused, never sent (`not_sent`).
   *
   * The same key and rows again answer every chunk that succeeded from the ledger, without a
   * request, and send the others under their keys; the same key with other rows (or another
   * owner, or chunk size) is refused (E_PAYOUTS_IDEMPOTENCY_KEY_REUSED) before anything is
   * sent. The answer lists every row with its outcome (see `BatchRowOutcome`); it throws only
   * for bad input, a reused key, or intents that could not be stored
   * (E_PAYOUTS_EXECUTE_NOT_STORED).
   */
  async executeBatch(rows: ExecuteInput[], options: BatchOptions = {}): Promise<ExecutedBatch> {
    const started = Date.now()
    const plan = planBatch(rows, options)
    const intents = await this.#batches.write(plan)
    // Held as being sent until the call ends: this process's recovery leaves them alone.
    return this.#intents.holding(intents, async () => {
      const outcomes: BatchRowOutcome[] = []
      const progress = (chunk: number) => {
        if (!options.onChunk) return
        const { counts } = summarize(plan.key, outcomes, intents)
        const done = outcomes.length
        const elapsedMs = Date.now() - started
        try {
          options.onChunk({
            chunk,
            chunks: intents.length,
            rows: rows.length,
            done,
            counts,
            elapsedMs,
          })
        } catch {}
      }
      let stop: { code: string; message: string } | null = null
      for (const [chunk, intent] of intents.entries()) {
        if (!stop && options.signal?.aborted) {
          stop = { code: 'ABORTED', message: `the batch was aborted before chunk ${chunk}` }
        }
        if (stop) {
          outcomes.push(...(await this.#batches.notSent(intent, stop)))
          progress(chunk)
          continue
        }
        const answered = await this.#batches.answered(intent)
        if (answered) {
          outcomes.push(...answered)
          progress(chunk)
          continue
        }
        try {
          outcomes.push(...(await this.#sendChunk(intent)))
        } catch (error) {
          outcomes.push(...this.#batches.afterError(intent, error))
          const code = (error as { code?: string }).code ?? (error as Error).name
          stop = {
            code: 'BATCH_STOPPED',
            message: `not sent: the batch stopped at chunk ${chunk} (${code})`,
          }
        }
        progress(chunk)
      }
      return summarize(plan.key, outcomes, intents)
    })
  }

  /**
   * A batch as the ledger holds it, by its key: every stored chunk's rows with their outcome,
   * the payouts made with their ledger rows. Nothing is sent; null when no chunk is stored.
   */
  findBatch(idempotencyKey: string): Promise<ExecutedBatch | null> {
    return this.#batches.find(idempotencyKey)
  }

  /** The same key again: the stored result, or the same request sent again with it. */
  async #repeat(
    intent: ExecutionIntent,
    asked: { bodyHash: string; ownerId: string | null }
  ): Promise<ExecutedPayout> {
    // A caller that moved the intent between its read and the claim of an attempt (the first
    // call with the key, finishing) is read again: a settled intent answers what it stored,
    // one still pending is sent again under its key. Bounded: callers that keep moving it win.
    for (let reads = 1; ; reads++) {
      try {
        return await this.#repeatOnce(intent, asked)
      } catch (error) {
        if (!MOVED_MEANWHILE.has(error as Error) || reads >= REPEAT_READS) throw error
        const fresh = await this.#intents.findByKey(intent.idempotencyKey).catch(() => null)
        if (!fresh) throw error
        intent = fresh
      }
    }
  }

  async #repeatOnce(
    intent: ExecutionIntent,
    asked: { bodyHash: string; ownerId: string | null }
  ): Promise<ExecutedPayout> {
    if (intent.bodyHash !== asked.bodyHash || intent.ownerId !== asked.ownerId) {
      throw new E_PAYOUTS_IDEMPOTENCY_KEY_REUSED([intent.idempotencyKey])
    }
    if (intent.state === 'succeeded' && intent.payoutUuid) {
      // Stored as JSON (the atomic amount as a string): parsed back to the API's types.
      const result = parseStoredAnswer(intent.response!)
      const payout = await PayoutModel.query({ connection: this.#options.connection })
        .where('account', this.#options.account)
        .where('payout_uuid', intent.payoutUuid)
        .firstOrFail()
      return { result, payout, intent }
    }
    // Succeeded without a stored answer (an operator settled it as sent): the payout exists
    // at the service, so a succeeded intent is never sent again.
    if (intent.state === 'needs_attention' || intent.state === 'succeeded') {
      throw new E_PAYOUTS_INTENT_NEEDS_ATTENTION([intent.idempotencyKey])
    }
    // A request that may have reached the service is re-sent only while the service
    // remembers its key, as recovery and --retry do: past the window the service would make
    // a second payout.
    if (mayHaveLeft(intent) && !this.insideWindow(intent)) {
      intent.state = 'needs_attention'
      await this.#intents.save(intent, 'execute intent flag').catch(() => {})
      throw new E_PAYOUTS_INTENT_NEEDS_ATTENTION([intent.idempotencyKey])
    }
    // Pending, unknown, refused or failed: the same key again can only ever answer the
    // one payout the service created for it, if any.
    return this.#sendOne(intent)
  }

  /** Sends an intent of either kind again (recovery, `retry`). */
  #send(intent: ExecutionIntent): Promise<ExecutedPayout | BatchRowOutcome[]> {
    return isBatchIntent(intent) ? this.#sendChunk(intent) : this.#sendOne(intent)
  }

  #sendOne(intent: ExecutionIntent, options: { counted?: boolean } = {}) {
    return this.#intents.sending(intent, () =>
      this.#attempt(
        intent,
        options.counted === true,
        () =>
          this.#options.client.execute(intent.requestBody as ExecuteInput, {
            idempotencyKey: intent.idempotencyKey,
          }),
        (result) => this.#store(intent, result)
      )
    )
  }

  /** Sends a chunk of a batch under its key and stores its answer (its attempt counted first). */
  #sendChunk(intent: ExecutionIntent): Promise<BatchRowOutcome[]> {
    return this.#intents.sending(intent, () =>
      this.#attempt(
        intent,
        false,
        () => this.#batches.send(intent),
        (answer) => this.#batches.store(intent, answer)
      )
    )
  }

  /**
   * Sends the intent (`call`), then stores its answer (`store`). Its attempt is counted and
   * saved first, unless it was committed with it (`counted`: a fresh single intent). An error
   * of the request sets the intent's state (`stateAfter`), saved before it is thrown.
   */
  async #attempt<Answer, Stored>(
    intent: ExecutionIntent,
    counted: boolean,
    call: () => Promise<Answer>,
    store: (answer: Answer) => Promise<Stored>
  ): Promise<Stored> {
    // A pending intent with attempts was left by a crash that may have come after sending.
    const sentBefore = counted ? intent.attempts > 1 : intent.attempts > 0
    const leftBefore = !counted && mayHaveLeft(intent)
    // Claimed, not just saved: a plain save beside another caller's (a recovery job, a second
    // call with the key, a stopped batch refusing the chunk) could send what it settled.
    let claimed = true
    try {
      if (!counted) claimed = await this.#intents.countAttempt(intent, this.#options.now())
    } catch (error) {
      // Not sent by this call. But an earlier attempt may have been, and a write given up at
      // its deadline may still have committed (its answer lost): then the intent holds an
      // attempt that recovery sends under its key, and a caller who called again under
      // another key would pay twice. Only a write that surely failed tells it to call again.
      throw new E_PAYOUTS_EXECUTE_NOT_STORED('its attempt', {
        outcomeUnknown: leftBefore || mayHaveCommitted(error),
        intentId: intent.id,
        cause: error,
      })
    }
    if (!claimed) {
      // Another caller moved the intent since it was read: it settled it, or it holds this
      // attempt and sends it under the same key.
      const held = new E_PAYOUTS_EXECUTE_NOT_STORED('its attempt: another caller is sending it', {
        outcomeUnknown: true,
        intentId: intent.id,
      })
      MOVED_MEANWHILE.add(held)
      throw held
    }
    let answer: Answer
    try {
      answer = await call()
    } catch (error) {
      const failure =
        error instanceof PayoutsApiError || error instanceof PayoutsValidationError
          ? (error.toJSON() as Record<string, unknown>)
          : { message: safeError(error).message }
      try {
        // Only over the attempt it counted: a caller that settled the intent since wins.
        await this.#intents.transition(intent, {
          state: stateAfter(error, sentBefore),
          error: failure,
        })
      } catch (storeError) {
        // The intent stays pending with its attempt counted: recovery sends it again with
        // its key, so the caller must not send it under another one.
        throw new E_PAYOUTS_EXECUTE_NOT_STORED('the outcome of its request', {
          outcomeUnknown: true,
          intentId: intent.id,
          cause: storeError,
        })
      }
      throw error
    }
    return store(answer)
  }

  /**
   * Stores the response, the payout and (stablecoin) the escrow row in one transaction, run
   * again when the database rolls it back as a deadlock's victim: the service made the
   * payout, and InnoDB may pick this transaction as the victim beside an instance applying
   * the payout's first webhook. Failing then would answer 503 for a payout that exists.
   */
  async #store(intent: ExecutionIntent, result: ExecuteResult): Promise<ExecutedPayout> {
    const { ledger } = this.#options
    const client = this.#options.db.connection(this.#options.connection)
    let stored: AppliedInTransaction | undefined
    const payout = await storedWithRetries(client, intent, 'execute store', () =>
      // Bounded: a store that stalls fails this call, and the intent stays for recovery to
      // re-send with its key (the service answers the original payout again).
      boundedTransaction(
        client,
        {
          timeoutMs: this.#options.transactionTimeoutMs,
          what: 'execute store',
          writes: PayoutModel.table,
        },
        async (trx) => {
          stored = await ledger.applyBatchInTransaction(trx, [
            executeObservation(
              intent.requestBody,
              result,
              intent.ownerId,
              intent.attempts > 1 ? 'recovery' : 'execute'
            ),
          ])
          if (result.flow === 'stablecoin_to_fiat')
            await createEscrowDeposit(trx, result, ledger.account)
          intent.useTransaction(trx)
          intent.state = 'succeeded'
          intent.payoutUuid = result.payoutId
          intent.response = storedAnswer(result)
          intent.error = null
          await intent.save()
          return stored.results[0].payout
        }
      )
    ).catch((error) => {
      throw new E_PAYOUTS_EXECUTE_NOT_STORED('the payout the service made', {
        outcomeUnknown: true,
        intentId: intent.id,
        cause: error,
      })
    })
    // The ledger tells the changes after the COMMIT: the caller returns once they were told.
    await stored!.notified
    return { result, payout, intent }
  }

  /**
   * Re-sends intents whose outcome is unknown (or that a crash left pending after an
   * attempt) with their original key, inside the replay window; flags the others for a
   * human. A pending intent with no attempt never left: refused, never sent.
   */
  async recover(options: { olderThanMs?: number; limit?: number } = {}): Promise<RecoverySummary> {
    return this.#intents.recover(options, (intent) => this.#send(intent))
  }

  /** Whether the service still remembers the intent's key (with the safety margin). */
  insideWindow(intent: ExecutionIntent, now = this.#options.now()): boolean {
    return this.#intents.insideWindow(intent, now)
  }

  /**
   * Re-sends one intent with its original key at an operator's request (`payouts:intents
   * --retry`). The caller checks its state and the window; one being sent is left alone.
   */
  async retry(intent: ExecutionIntent): Promise<ExecutedPayout | BatchRowOutcome[] | null> {
    if (this.#intents.isSending(intent)) return null
    return this.#send(intent)
  }
}
