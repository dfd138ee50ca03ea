import { flags } from '@adonisjs/core/ace'
import { MAX_INT32, PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { IntentRef } from '../src/commands/intent_ref.ts'
import type { BatchView, IntentView } from '../src/service/intents_desk.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'
import type { IntentRow, IntentsBatch, IntentState } from '../src/types/commands.ts'

/** Every `--state` value, each once (a state missing or unknown here does not compile). */
const STATES = Object.keys({
  pending: true,
  unknown: true,
  needs_attention: true,
  refused: true,
  failed: true,
  succeeded: true,
} satisfies Record<IntentState, true>) as IntentState[]
const RESOLUTIONS = ['sent', 'not-sent'] as const

type Result = IntentRow[] | IntentRow | IntentsBatch

/** What `--resolve` and `--retry` take, for their help and their refusal. */
const REF_FORMS = `an intent id (the listing's Id, 1 to ${MAX_INT32}), its payout id (a UUID) or the app's idempotency key`

/**
 * Execution intents for an operator: the ones whose outcome is unknown, that wait for a
 * human or were refused; `--resolve` records a human's check, `--retry` re-sends one with
 * its original key inside the service's replay window; `--batch <key>` lists a batch's chunks.
 */
export default class PayoutsIntents extends PayoutsCommand<Result> {
  static commandName = 'payouts:intents'
  static description =
    "List execution intents (unknown, needs attention, refused); --resolve <id> --as=sent|not-sent records a check, --retry <id> re-sends with the original key, --batch <key> lists a batch's chunks (state, rows, created, refused)"

  static help = [
    '--resolve and --retry take one intent, named by any id an operator has in hand:',
    "  its Id in the listing (42), its payout id (a UUID, once it made one), or the app's",
    '  idempotency key (the key given to execute; keys are unique within an account, and',
    '  --account picks the account). A value that names two intents (a key that is also',
    "  another intent's id) is refused, nothing done: say which with id:42, payout:<uuid>",
    '  or key:<key>. A value that names none exits 1 too.',
    '',
    'A batch (payouts.executeBatch, node ace payouts:batch) is one intent per chunk of up to 100 rows:',
    '  {{ binaryName }} payouts:intents --batch csv-3f1c9a0e5b7d2c4a8e6f1b3d5a7c9e0f',
    "lists its chunks from the ledger alone (no request): each chunk's intent id, state, attempts,",
    'rows, and how many were created, refused, or are still open. Exit code 1 when no chunk of the',
    'key is stored. With --json: {"key","complete","counts","chunks":[{"chunk","intentId","state",...}]}.',
    '',
    'With --json the listing is an array of intents (the IntentRow type of @svc/adonis-payouts/types,',
    'docs/production.md), --resolve and --retry print the one intent, --batch an IntentsBatch.',
  ]

  @flags.array({
    description: `States to list: ${STATES.join(', ')} (default: unknown, needs_attention, refused)`,
  })
  declare state?: string[]

  @flags.number({ description: 'At most this many intents, newest first', default: 50 })
  declare limit: number

  @flags.string({
    description:
      "Intent to settle after checking at the service (needs --as): its Id, payout id or the app's idempotency key",
  })
  declare resolve?: string

  @flags.string({ description: 'sent or not-sent: what the check at the service found' })
  declare as?: string

  @flags.string({
    description:
      "Intent to re-send with its original Idempotency-Key: its Id, payout id or the app's idempotency key",
  })
  declare retry?: string

  @flags.string({
    description: "A batch's key: list its chunks (state, rows, created, refused) from the ledger",
  })
  declare batch?: string

  protected failure = 'Could not list intents'

  protected async accepted() {
    if (this.resolve !== undefined && this.retry !== undefined) {
      return this.refuse('Give --resolve or --retry, not both')
    }
    if (this.batch !== undefined) {
      if (this.resolve !== undefined || this.retry !== undefined || this.state !== undefined) {
        return this.refuse(
          '--batch lists one batch: give it alone (then --retry or --resolve a chunk by its id)'
        )
      }
      if (!/^[\w-]{1,240}$/.test(this.batch)) {
        return this.refuse(`--batch takes a batch key (A-Z a-z 0-9 _ -), not "${this.batch}"`)
      }
    }
    const { readIntentRef } = await import('../src/commands/intent_ref.ts')
    for (const [flag, value] of [
      ['--resolve', this.resolve],
      ['--retry', this.retry],
    ] as const) {
      if (value !== undefined && !readIntentRef(value)) {
        return this.refuse(`${flag} takes ${REF_FORMS}, not "${value}". Nothing done`)
      }
    }
    if (this.resolve !== undefined && !RESOLUTIONS.includes(this.as as 'sent')) {
      return this.refuse('--resolve needs --as=sent or --as=not-sent (what the service shows)')
    }
    if (this.as !== undefined && this.resolve === undefined) {
      return this.refuse('--as goes with --resolve <id>')
    }
    return this.acceptListing(this.state, STATES, this.limit)
  }

  protected async perform(payouts: PayoutsService): Promise<Result> {
    if (this.batch !== undefined) {
      this.failure = 'Could not list the batch'
      const batch = await payouts.findBatch(this.batch)
      if (!batch) {
        throw new Error(
          `No batch with key "${this.batch}" in the ledger${this.account ? ` of account ${this.account}` : ''}: ` +
            'none of its chunks is stored (never sent under this key, or pruned)'
        )
      }
      const { batchViewOf } = await import('../src/service/intents_desk.ts')
      return batchOf(batchViewOf(batch))
    }
    if (this.resolve !== undefined) {
      this.failure = 'Resolve failed'
      const id = await this.#intentId(payouts, this.resolve, 'resolved')
      return rowOf(await payouts.intents.resolve(id, this.as as 'sent' | 'not-sent'))
    }
    if (this.retry !== undefined) {
      this.failure = 'Retry failed'
      return rowOf(
        await payouts.intents.retry(await this.#intentId(payouts, this.retry, 're-sent'))
      )
    }
    const views = await payouts.intents.list({
      states: this.state as IntentState[] | undefined,
      limit: this.limit,
    })
    return views.map(rowOf)
  }

  /** The id of the one intent of the account that `text` names (see `intentIdOf`). */
  async #intentId(payouts: PayoutsService, text: string, verb: string): Promise<number> {
    const { intentIdOf, readIntentRef } = await import('../src/commands/intent_ref.ts')
    const ref = readIntentRef(text) as IntentRef
    if (!payouts.config.ledger.enabled) {
      const { E_PAYOUTS_FEATURE_DISABLED } = await import('../src/errors.ts')
      throw new E_PAYOUTS_FEATURE_DISABLED(['ledger'])
    }
    const db = await this.app.container.make('lucid.db')
    return intentIdOf(db, payouts.config, ref, verb)
  }

  protected print(result: Result) {
    if (!Array.isArray(result) && 'chunks' in result) return this.#printBatch(result)
    if (!Array.isArray(result)) {
      const outcome = result.payoutUuid ? ` (payout ${result.payoutUuid})` : ''
      this.logger.success(`Intent ${result.id} is now ${result.state}${outcome}`)
      return
    }
    if (result.length === 0) {
      this.logger.info('No execution intent in these states')
      return
    }
    const table = this.table()
    table.head(['Id', 'State', 'Flow', 'Amount', 'Attempts', 'Created', 'Retry?', 'Note'])
    for (const intent of result) {
      table.row([
        String(intent.id),
        intent.state,
        intent.flow,
        intent.batch
          ? `${intent.batch.rows} rows (chunk ${intent.batch.chunk + 1} of ${intent.batch.chunks})`
          : `${intent.amount ?? ''} ${intent.fromCurrency ?? ''} → ${intent.toCurrency ?? ''}`,
        String(intent.attempts),
        intent.createdAt,
        intent.retryable ? 'yes' : 'no',
        intent.note ?? '',
      ])
    }
    table.render()
    // What would settle a needs_attention intent: the ledger's payouts that match it.
    for (const intent of result.filter((view) => view.candidates)) {
      const found = intent.candidates!.map((p) => `${p.payoutUuid} (${p.status}, ${p.createdAt})`)
      this.logger.info(
        `Intent ${intent.id}: ${found.length ? `ledger payouts that match: ${found.join(', ')}` : 'no ledger payout matches it'}`
      )
    }
  }

  #printBatch(batch: IntentsBatch) {
    const table = this.table()
    table.head([
      'Chunk',
      'Intent',
      'State',
      'Rows',
      'Created',
      'Refused',
      'Open',
      'Attempts',
      'Note',
    ])
    for (const chunk of batch.chunks) {
      table.row([
        `${chunk.chunk + 1}`,
        String(chunk.intentId),
        chunk.state,
        String(chunk.rows),
        String(chunk.created),
        String(chunk.refused),
        String(chunk.open),
        String(chunk.attempts),
        chunk.note ?? '',
      ])
    }
    table.render()
    const { created, refused } = batch.counts
    const open = batch.chunks.reduce((sum, chunk) => sum + chunk.open, 0)
    const summary = `Batch ${batch.key}: ${batch.chunks.length} chunk(s) stored, ${created} created, ${refused} refused, ${open} open`
    if (batch.complete) this.logger.success(`${summary}: complete`)
    else this.logger.warning(`${summary}: not complete (run it again, or see the chunks above)`)
  }
}

/** An intent as `--json` prints it: the documented keys (`IntentRow`), each always present. */
function rowOf(view: IntentView): IntentRow {
  return {
    id: view.id,
    state: view.state,
    flow: view.flow,
    amount: typeof view.amount === 'number' ? view.amount : null,
    fromCurrency: typeof view.fromCurrency === 'string' ? view.fromCurrency : null,
    toCurrency: typeof view.toCurrency === 'string' ? view.toCurrency : null,
    recipientId: typeof view.recipientId === 'string' ? view.recipientId : null,
    ownerId: view.ownerId,
    attempts: view.attempts,
    payoutUuid: view.payoutUuid,
    note: view.note,
    createdAt: view.createdAt,
    lastAttemptAt: view.lastAttemptAt,
    retryable: view.retryable,
    batch: view.batch
      ? { chunk: view.batch.chunk, chunks: view.batch.chunks, rows: view.batch.rows }
      : null,
    candidates:
      view.candidates?.map((payout) => ({
        payoutUuid: payout.payoutUuid,
        status: payout.status,
        amount: payout.amount,
        fromCurrency: payout.fromCurrency,
        toCurrency: payout.toCurrency,
        createdAt: payout.createdAt,
      })) ?? null,
  }
}

/** A batch as `--batch --json` prints it (`IntentsBatch`). */
function batchOf(view: BatchView): IntentsBatch {
  return {
    key: view.key,
    complete: view.complete,
    counts: { ...view.counts },
    chunks: view.chunks.map((chunk) => ({
      chunk: chunk.chunk,
      intentId: chunk.intentId,
      state: chunk.state,
      attempts: chunk.attempts,
      rows: chunk.rows,
      created: chunk.created,
      refused: chunk.refused,
      open: chunk.open,
      note: chunk.note,
    })),
  }
}
