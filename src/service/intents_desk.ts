import { DateTime } from 'luxon'
import type { ExecutedBatch } from '../ledger/payout_batches.ts'
import type { PayoutExecutor } from '../ledger/payout_executor.ts'
import ExecutionIntent, { type IntentState } from '../models/execution_intent.ts'
import Payout from '../models/payout.ts'
import type { IntentsBatchChunk } from '../types/commands.ts'

/** States an operator looks at by default: outcome unknown, waiting for a human, refused. */
export const OPEN_INTENT_STATES: IntentState[] = ['unknown', 'needs_attention', 'refused']

/** States in which a human may still re-send or settle an intent. */
const UNSETTLED: IntentState[] = ['pending', 'unknown', 'needs_attention']

/** One execution intent as `payouts:intents` shows it (never its key or its response). */
export interface IntentView {
  id: number
  state: IntentState
  flow: string
  amount: unknown
  fromCurrency: unknown
  toCurrency: unknown
  recipientId: unknown
  ownerId: string | null
  attempts: number
  payoutUuid: string | null
  /** The last error's message, or the operator's resolution. */
  note: string | null
  createdAt: string
  lastAttemptAt: string | null
  /** Whether `--retry` may still re-send it with its key. */
  retryable: boolean
  /** For a chunk of a batch (flow `batch`): which chunk, and how many rows it holds. */
  batch?: { chunk: number; chunks: number; rows: number }
  /**
   * For a `needs_attention` intent: the ledger's payouts that could be its lost answer (same
   * recipient, amount and currencies, made around its attempts, held by no other intent).
   * One says `--resolve <id> --as=sent`; none, once the webhooks and reconciliation have
   * caught up, points to `--as=not-sent`. Check at the service before deciding either way.
   */
  candidates?: PayoutCandidate[]
}

/** A payout of the ledger that may be what a `needs_attention` intent made. */
export interface PayoutCandidate {
  payoutUuid: string
  status: string
  amount: string | null
  fromCurrency: string | null
  toCurrency: string | null
  createdAt: string
}

/** Ledger payouts of the intent's recipient looked at per intent (most recent first). */
const CANDIDATES_SCANNED = 200

/**
 * What an operator does with execution intents (`payouts:intents`): list them by state,
 * record a human's check (`sent` settles it as succeeded, `not-sent` as failed), or re-send
 * one with its original key while the service still remembers that key.
 */
export class IntentsDesk {
  constructor(
    private executor: PayoutExecutor,
    private connection?: string
  ) {}

  /** The account whose intents and payouts the desk shows: its executor's, which re-sends. */
  get account(): string {
    return this.executor.account
  }

  #intents() {
    return ExecutionIntent.query({ connection: this.connection }).where('account', this.account)
  }

  async list(states: string[], limit: number): Promise<IntentView[]> {
    const rows = await this.#intents().whereIn('state', states).orderBy('id', 'desc').limit(limit)
    const views: IntentView[] = []
    for (const intent of rows) {
      const view = this.#view(intent)
      if (intent.state === 'needs_attention') view.candidates = await this.candidates(intent)
      views.push(view)
    }
    return views
  }

  /**
   * The ledger's payouts that match a needs_attention intent: its recipient, amount and
   * currencies, created from its first attempt to a day after its last (a payout the
   * service made reaches the ledger through a webhook or reconciliation, maybe late).
   * The ledger, not the service: the spec shows no way to list the service's payouts by
   * recipient or time ("Listing payouts: not shown"; the client's `listPayouts` is a guess
   * that pages the whole account with a status filter only), so what settles the intent
   * is what the webhooks and reconciliation brought here, checked at the service.
   */
  async candidates(intent: ExecutionIntent): Promise<PayoutCandidate[]> {
    const body = (intent.requestBody ?? {}) as Record<string, unknown>
    // A batch's chunk: each of its rows is matched as a single execute's body is.
    const items = Array.isArray(body.items)
      ? (body.items as Array<Record<string, unknown>>)
      : [body]
    const from = intent.createdAt.minus({ minutes: 5 })
    const until = (intent.lastAttemptAt ?? intent.createdAt).plus({ hours: 24 })
    const matching: Payout[] = []
    const seen = new Set<string>()
    for (const item of items) {
      if (typeof item.recipientId !== 'string') continue
      const payouts = await Payout.query({ connection: this.connection })
        .where('account', this.account)
        .where('recipient_id', item.recipientId)
        .orderBy('id', 'desc')
        .limit(CANDIDATES_SCANNED)
      for (const payout of payouts) {
        const matches =
          payout.sourceAmount !== null &&
          Number(payout.sourceAmount) === Number(item.amount) &&
          (payout.sourceCurrency ?? item.fromCurrency) === item.fromCurrency &&
          (payout.payoutCurrency ?? item.toCurrency) === item.toCurrency &&
          payout.createdAt >= from &&
          payout.createdAt <= until
        if (matches && !seen.has(payout.payoutUuid)) {
          seen.add(payout.payoutUuid)
          matching.push(payout)
        }
      }
    }
    if (matching.length === 0) return []
    // A payout another intent holds is that intent's, not this one's.
    const held = await this.#intents()
      .whereIn(
        'payout_uuid',
        matching.map((payout) => payout.payoutUuid)
      )
      .whereNot('id', intent.id)
      .select('payout_uuid')
    const taken = new Set(held.map((other) => other.payoutUuid))
    return matching
      .filter((payout) => !taken.has(payout.payoutUuid))
      .map((payout) => ({
        payoutUuid: payout.payoutUuid,
        status: payout.status,
        amount: payout.sourceAmount,
        fromCurrency: payout.sourceCurrency,
        toCurrency: payout.payoutCurrency,
        createdAt: payout.createdAt.toISO()!,
      }))
  }

  async resolve(id: number, as: 'sent' | 'not-sent'): Promise<IntentView> {
    const intent = await this.#unsettled(id, 'resolved')
    intent.state = as === 'sent' ? 'succeeded' : 'failed'
    intent.error = {
      ...intent.error,
      resolution: { as, at: DateTime.now().toISO(), by: 'operator' },
    }
    await intent.save()
    return this.#view(intent)
  }

  async retry(id: number): Promise<IntentView> {
    const intent = await this.#unsettled(id, 're-sent')
    if (!this.executor.insideWindow(intent)) {
      throw new Error(
        `Intent ${id} is past the service's replay window: its key may be forgotten, so re-sending could pay twice. Check at the service, then --resolve ${id} --as=sent|not-sent`
      )
    }
    if (!(await this.executor.retry(intent))) {
      throw new Error(`Intent ${id} is being sent right now by this process; nothing re-sent`)
    }
    return this.#view(intent)
  }

  async #unsettled(id: number, verb: string) {
    const intent = await this.#intents().where('id', id).first()
    if (!intent) throw new Error(`No execution intent with id ${id}; nothing ${verb}`)
    if (!UNSETTLED.includes(intent.state)) {
      throw new Error(
        `Intent ${id} is ${intent.state}; only ${UNSETTLED.join(', ')} intents can be ${verb}`
      )
    }
    return intent
  }

  #view(intent: ExecutionIntent): IntentView {
    const body = intent.requestBody ?? {}
    const error = intent.error as { message?: string; resolution?: { as: string } } | null
    const batch = body.batch as { chunk: number; chunks: number } | undefined
    return {
      ...(batch && {
        batch: {
          chunk: batch.chunk,
          chunks: batch.chunks,
          rows: (body.items as unknown[] | undefined)?.length ?? 0,
        },
      }),
      id: intent.id,
      state: intent.state,
      flow: intent.flow,
      amount: body.amount,
      fromCurrency: body.fromCurrency,
      toCurrency: body.toCurrency,
      recipientId: body.recipientId,
      ownerId: intent.ownerId,
      attempts: intent.attempts,
      payoutUuid: intent.payoutUuid,
      note: error?.resolution
        ? `resolved by an operator as ${error.resolution.as}`
        : (error?.message ?? null),
      createdAt: intent.createdAt.toISO()!,
      lastAttemptAt: intent.lastAttemptAt?.toISO() ?? null,
      retryable: UNSETTLED.includes(intent.state) && this.executor.insideWindow(intent),
    }
  }
}

/** One chunk of a batch as `payouts:intents --batch` shows it (never its key). */
export type BatchChunkView = IntentsBatchChunk

/** A batch as `payouts:intents --batch <key>` shows it: its chunks, from the ledger alone. */
export interface BatchView {
  key: string
  complete: boolean
  chunks: BatchChunkView[]
  counts: ExecutedBatch['counts']
}

/** What `findBatch` answered, per chunk: its intent's state and its rows' outcomes. */
export function batchViewOf(batch: ExecutedBatch): BatchView {
  const chunks = batch.intents.map((intent): BatchChunkView => {
    const body = intent.requestBody as { batch: { chunk: number }; items: unknown[] }
    const meta = { chunk: body.batch.chunk, rows: body.items.length }
    const rows = batch.rows.filter((row) => row.chunk === meta.chunk)
    const created = rows.filter((row) => row.outcome === 'created').length
    const refused = rows.filter((row) => row.outcome === 'refused').length
    const error = intent.error as { message?: string; resolution?: { as: string } } | null
    return {
      chunk: meta.chunk,
      intentId: intent.id,
      state: intent.state,
      attempts: intent.attempts,
      rows: meta.rows,
      created,
      refused,
      open: meta.rows - created - refused,
      note: error?.resolution
        ? `resolved by an operator as ${error.resolution.as}`
        : (error?.message ?? null),
    }
  })
  return { key: batch.idempotencyKey, complete: batch.complete, chunks, counts: batch.counts }
}
