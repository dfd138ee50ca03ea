import type Payout from '../models/payout.ts'
import type PayoutEvent from '../models/payout_event.ts'
import type { ObservationSource } from '../types/events.ts'
import { snapshotOf } from './payout_rows.ts'
import { reduce, type PayoutPosition } from './state_machine.ts'
import type { PayoutChange } from './vocabulary.ts'

/** The log rows a replay reads: the change's own fields and the position it moved to. */
export type ReplayedRow = Pick<
  PayoutEvent,
  'id' | 'mergedFrom' | 'applied' | 'status' | 'step' | 'source' | 'observedAt'
>

/**
 * The change a payout_events row applied, replayed from the payout's log up to it (as the
 * outbox rebuilds one after a crash and the relay sends one from another process): positions
 * as applying saw them, null until a first observation reached the payout, then moved by its
 * applied rows only. Only the rows of the same placeholder count (`mergedFrom`): a change of
 * a placeholder since merged goes out under its read id, without the UUID's owner. `history`
 * is the payout's rows in id order, up to `row` at least; null when `row` is not among them.
 * `from`: the position the rows of `history` start from (the relay's last relayed position,
 * `history` then holds only the rows after it); none by default (the payout's first row).
 */
export function replayChange(
  found: Payout,
  history: ReplayedRow[],
  row: Pick<PayoutEvent, 'id' | 'mergedFrom'>,
  from: PayoutPosition | null = null
): PayoutChange<Payout> | null {
  const mergedFrom = row.mergedFrom ?? null
  let position: PayoutPosition | null = from
  for (const event of history) {
    if ((event.mergedFrom ?? null) !== mergedFrom) continue
    const previous: PayoutPosition | null = position
    const current: PayoutPosition = event.applied
      ? reduce(previous, { status: event.status, step: event.step }).next
      : (previous ?? { status: 'pending', step: null })
    position = current
    if (event.id !== row.id) continue
    const payout = mergedFrom ? snapshotOf(found) : found
    if (mergedFrom) Object.assign(payout, { payoutUuid: mergedFrom, ownerId: null })
    return {
      payout,
      previous,
      current,
      source: event.source as ObservationSource,
      created: previous === null,
      eventId: event.id,
      observedAt: event.observedAt,
    }
  }
  return null
}
