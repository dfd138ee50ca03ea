import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import { dbDate } from '../database/dates.ts'
import { affectedRows } from '../database/dialects.ts'
import EscrowDeposit from '../models/escrow_deposit.ts'
import type { EscrowEvent } from '../types/events.ts'
import type { PayoutChange } from './vocabulary.ts'

/** A stablecoin payout moving out of pending: the service has the deposit. */
function showsDetection(change: PayoutChange): boolean {
  return (
    change.payout.flow === 'stablecoin_to_fiat' &&
    (change.previous === null || change.previous.status === 'pending') &&
    (change.current.status === 'processing' || change.current.status === 'completed')
  )
}

/**
 * Part of applying, inside the ledger's transaction: a stablecoin payout that leaves pending
 * for processing or completed had its deposit detected by the service. Its deposit row (of
 * the same account: a quote id is unique within one), unless a fallback run holds it or is
 * done with it, is confirmed by that change, which carries the event to fire after COMMIT
 * (and through `renotify` after a crash).
 */
export async function confirmDetectedDeposits(
  trx: TransactionClientContract,
  changes: PayoutChange[],
  account: string
) {
  for (const change of changes) {
    if (!showsDetection(change)) continue
    const updated = await trx
      .from(EscrowDeposit.table)
      .where('account', account)
      .where('payout_uuid', change.payout.payoutUuid)
      // A deposit the fallback gave up on too: the service has it after all.
      .whereIn('state', ['awaiting_deposit', 'deposit_recorded', 'confirm_failed'])
      .update({
        state: 'confirmed',
        confirmed_by_event_id: change.eventId,
        last_error: null,
        updated_at: dbDate(trx),
      })
    change.escrowConfirmed = null
    if (affectedRows(updated) === 0) continue
    const row = await EscrowDeposit.query({ client: trx })
      .where('account', account)
      .where('confirmed_by_event_id', change.eventId)
      .firstOrFail()
    change.escrowConfirmed = {
      quoteId: row.quoteId,
      payoutId: change.payout.payoutUuid,
      txHash: row.txHash,
    }
  }
}

/**
 * The deposit a change of `account` confirmed, after its COMMIT: its own annotation, else (a
 * change the outbox sweep replays) the stored mark.
 */
export async function depositConfirmedBy(
  change: PayoutChange,
  connection?: string,
  account: string = DEFAULT_ACCOUNT
): Promise<EscrowEvent | null> {
  if (change.escrowConfirmed !== undefined) return change.escrowConfirmed
  if (!showsDetection(change)) return null
  const row = await EscrowDeposit.query({ connection })
    .where('account', account)
    .where('confirmed_by_event_id', change.eventId)
    .first()
  return row ? { quoteId: row.quoteId, payoutId: row.payoutUuid, txHash: row.txHash } : null
}
