import type { Logger } from '@adonisjs/core/logger'
import { eventEnvelopeSchema, type EventEnvelope } from '../schemas/events.ts'
import type { InboxRow, InboxStore } from './inbox_store.ts'
import { PermanentEventError } from './event_mapper.ts'

/** Applies one stored event; throwing leaves the row to be retried. */
export type InboxHandler = (envelope: EventEnvelope, row: InboxRow) => Promise<string | void>

/**
 * Applies a batch of stored events at once (one transaction), returning each row's note.
 * Throwing means none was applied: the rows are then handed to `handler` one by one.
 */
export type InboxBatchHandler = (
  items: Array<{ envelope: EventEnvelope; row: InboxRow }>
) => Promise<Array<string | void>>

export interface InboxProcessorOptions {
  store: Pick<InboxStore, 'claimDue' | 'markProcessed' | 'markFailed'>
  handler: InboxHandler
  batchHandler?: InboxBatchHandler
  logger: Logger
  /** Attempts before a row is dead-lettered. */
  maxAttempts?: number
  /** First backoff; doubles per attempt. */
  baseBackoffMs?: number
  /** How long a claimed row is held before another process may take it over. */
  leaseMs?: number
  batchSize?: number
  now?: () => Date
}

/**
 * Drains the inbox after acknowledgements: claims due rows, parses them, hands them to
 * the handler. Failures back off exponentially and end in the dead-letter state, where
 * `payouts:replay` finds them. Unknown event types are kept and marked processed.
 */
export class InboxProcessor {
  #running?: Promise<number>
  #again = false
  #options: Required<Omit<InboxProcessorOptions, 'now' | 'batchHandler'>> &
    Pick<InboxProcessorOptions, 'batchHandler'> & { now: () => Date }

  constructor(options: InboxProcessorOptions) {
    this.#options = {
      maxAttempts: 8,
      baseBackoffMs: 1000,
      leaseMs: 60_000,
      batchSize: 100,
      now: () => new Date(),
      ...options,
    }
  }

  /** Starts a drain unless one is running; a kick during a drain runs one more pass. */
  kick(): void {
    if (this.#running) {
      this.#again = true
      return
    }
    this.#running = this.drain().finally(() => {
      this.#running = undefined
      if (this.#again) {
        this.#again = false
        this.kick()
      }
    })
    this.#running.catch((error) =>
      this.#options.logger.error({ err: error }, 'payouts inbox drain failed')
    )
  }

  /** Waits for the drain in progress, if any (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.#running) await this.#running.catch(() => {})
  }

  /** Processes every due row; returns how many were handled. */
  async drain(): Promise<number> {
    let handled = 0
    for (;;) {
      const rows = await this.#options.store.claimDue(
        this.#options.now(),
        this.#options.batchSize,
        this.#options.leaseMs
      )
      if (rows.length === 0) return handled
      handled += rows.length
      const parsed: Array<{ envelope: EventEnvelope; row: InboxRow }> = []
      for (const row of rows) {
        const envelope = await this.#parse(row)
        if (envelope) parsed.push({ envelope, row })
      }
      // Rows applied without a note are marked together after the batch: one commit, not
      // one per row. A crash before it leaves them to be applied again when their lease
      // expires, which the ledger ignores (it has seen those observations).
      const done: number[] = []
      try {
        if (!(await this.#applyBatch(parsed, done))) {
          for (const { envelope, row } of parsed) {
            if (await this.#process(envelope, row)) done.push(row.id)
          }
        }
      } finally {
        await this.#options.store.markProcessed(done)
      }
    }
  }

  /** The batch in one go when a batch handler is set; false when it must go row by row. */
  async #applyBatch(
    items: Array<{ envelope: EventEnvelope; row: InboxRow }>,
    done: number[]
  ): Promise<boolean> {
    const { batchHandler, store, logger } = this.#options
    if (!batchHandler || items.length < 2) return false
    let notes: Array<string | void>
    try {
      notes = await batchHandler(items)
    } catch (error) {
      logger.debug({ err: (error as Error).message }, 'payouts inbox: batch applied row by row')
      return false
    }
    for (const [index, { row }] of items.entries()) {
      const note = notes[index]
      if (note) await store.markProcessed([row.id], note)
      else done.push(row.id)
    }
    return true
  }

  /** The row's envelope, or null when it is unusable (then kept as a dead letter). */
  async #parse(row: InboxRow): Promise<EventEnvelope | null> {
    try {
      return eventEnvelopeSchema.parse(JSON.parse(row.rawBody.toString('utf8')))
    } catch {
      // Authentic (it was verified) but unusable: keep it, never retry it.
      this.#options.logger.warn(
        { deliveryId: row.deliveryId },
        'payouts inbox: unparsable event kept'
      )
      await this.#options.store.markFailed(row.id, 'unparsable event body', null)
      return null
    }
  }

  /** True when the row was applied and only needs marking. */
  async #process(envelope: EventEnvelope, row: InboxRow): Promise<boolean> {
    const { store, logger } = this.#options
    try {
      const note = await this.#options.handler(envelope, row)
      if (!note) return true
      await store.markProcessed([row.id], note)
      return false
    } catch (error) {
      const message = (error as Error).message ?? String(error)
      const retryAt =
        error instanceof PermanentEventError || row.attempts >= this.#options.maxAttempts
          ? null
          : new Date(
              this.#options.now().getTime() + this.#options.baseBackoffMs * 2 ** (row.attempts - 1)
            )
      logger.warn(
        { deliveryId: row.deliveryId, attempts: row.attempts, dead: retryAt === null },
        'payouts inbox: event processing failed'
      )
      await store.markFailed(row.id, message, retryAt)
      return false
    }
  }
}
