import { DateTime } from 'luxon'
import type { PayoutExecutor } from '../ledger/payout_executor.ts'
import ExecutionIntent, { type IntentState } from '../models/execution_intent.ts'

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
}

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

  async list(states: string[], limit: number): Promise<IntentView[]> {
    const rows = await ExecutionIntent.query({ connection: this.connection })
      .whereIn('state', states)
      .orderBy('id', 'desc')
      .limit(limit)
    return rows.map((intent) => this.#view(intent))
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
    const intent = await ExecutionIntent.find(id, { connection: this.connection })
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
    return {
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
