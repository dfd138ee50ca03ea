import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import type { PayoutLedger } from '../ledger/payout_ledger.ts'
import type { PayoutObservation } from '../ledger/vocabulary.ts'
import type { EventEnvelope } from '../schemas/events.ts'
import { observationFromEvent, PermanentEventError } from './event_mapper.ts'
import type { HandledRow, InboxApplier } from './inbox_processor.ts'
import type { InboxRow, InboxVerdict } from './inbox_store.ts'

/** What a stored delivery says about a payout (or why it says nothing). */
function observe(envelope: EventEnvelope, row: Pick<InboxRow, 'source' | 'deliveryId'>) {
  return observationFromEvent(envelope, row.source as 'webhook', row.deliveryId)
}

/**
 * The inbox's events applied to the ledger, inside the transaction that marks their rows:
 * each envelope mapped to an observation (`observationFromEvent`), the lot applied at once.
 * The ledger tells the changes after that transaction's COMMIT; `notified` lets the
 * processor return only once they were told.
 */
export class LedgerEventApplier implements InboxApplier {
  constructor(private ledger: Pick<PayoutLedger, 'applyBatchInTransaction'>) {}

  /** One row (the row-by-row path); a mapping error is permanent and dead-letters it. */
  async applyOne(
    envelope: EventEnvelope,
    row: InboxRow,
    trx: TransactionClientContract
  ): Promise<string | HandledRow> {
    const mapped = observe(envelope, row)
    if ('skip' in mapped) return mapped.skip
    const applied = await this.ledger.applyBatchInTransaction(trx, [mapped.observation])
    return { notified: applied.notified }
  }

  /** A claimed batch, one verdict per item; an event without a payout is a dead letter. */
  async applyBatch(
    trx: TransactionClientContract,
    items: Array<{ envelope: EventEnvelope; row: InboxRow }>
  ) {
    const verdicts: InboxVerdict[] = []
    const observations: PayoutObservation[] = []
    for (const { envelope, row } of items) {
      let mapped: ReturnType<typeof observe>
      try {
        mapped = observe(envelope, row)
      } catch (error) {
        if (!(error instanceof PermanentEventError)) throw error
        verdicts.push({ state: 'dead', note: error.message })
        continue
      }
      if ('skip' in mapped) verdicts.push({ state: 'processed', note: mapped.skip })
      else {
        verdicts.push({ state: 'processed', note: null })
        observations.push(mapped.observation)
      }
    }
    const applied = await this.ledger.applyBatchInTransaction(trx, observations)
    return { verdicts, notified: applied.notified }
  }
}
