import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { DateTime } from 'luxon'
import { dbDate } from '../database/dates.ts'
import Payout from '../models/payout.ts'
import { isTerminal } from './state_machine.ts'
import { isUuid, type PayoutObservation } from './vocabulary.ts'

/**
 * New payouts of `account` as pending rows, insert-or-ignore (another observer may win the
 * race). Used when applying and when a placeholder merges into a UUID that has no row yet.
 */
export async function insertPendingPayouts(
  trx: TransactionClientContract,
  observations: PayoutObservation[],
  account: string
) {
  await trx
    .knexQuery()
    .table(Payout.table)
    .insert(
      observations.map((observation) => {
        const now = dbDate(trx, observation.observedAt ?? DateTime.now())
        return {
          account,
          payout_uuid: observation.payoutId,
          read_id:
            observation.readId ?? (isUuid(observation.payoutId) ? null : observation.payoutId),
          status: 'pending',
          step: null,
          created_at: now,
          updated_at: now,
        }
      })
    )
    // Either key, each (account, id): a read id may belong, by the time this runs, to a row
    // a concurrent merge just gave it; the caller then finds that row. No target, so both.
    .onConflict()
    .ignore()
}

/**
 * A detached copy of a payout's attributes as they are now (never saved): what a change
 * reports while the row itself moves on, or when it goes out under a merged read id.
 */
export function snapshotOf(row: Payout): Payout {
  const copy = new Payout()
  Object.assign(copy.$attributes, row.$attributes)
  copy.$isPersisted = true
  copy.$hydrateOriginals()
  return copy
}

/**
 * What `provider_metadata_due_at` holds for a payout as it stands: the time it ended while
 * the routing detail of its end is not read (`provider_metadata_at` null or before
 * `status_changed_at`), null otherwise. `stored` gives a time as the database keeps it (whole
 * seconds on SQLite and MySQL), so the ledger decides as the stored values would.
 */
export function metadataDueOf(
  payout: Pick<Payout, 'status' | 'statusChangedAt' | 'providerMetadataAt'>,
  stored: (time: DateTime) => DateTime = (time) => time
): DateTime | null {
  if (!payout.statusChangedAt || !isTerminal(payout.status)) return null
  const ended = stored(payout.statusChangedAt)
  const read = payout.providerMetadataAt && stored(payout.providerMetadataAt) >= ended
  return read ? null : ended
}
