import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { DateTime } from 'luxon'
import { locksRows } from '../database/dialects.ts'
import Payout from '../models/payout.ts'
import PayoutEvent from '../models/payout_event.ts'
import type { ObservationSource } from '../types/events.ts'
import { insertPendingPayouts } from './payout_rows.ts'
import { FIELD_KEYS, isUuid, type PayoutFields, type PayoutObservation } from './vocabulary.ts'

/** The observations of a batch once its placeholders are merged. */
export interface MergedPlaceholders {
  /**
   * One observation per merged placeholder: its position and fields, as an observation of
   * the UUID it turned out to be. Applied before the batch's own observations.
   */
  merged: PayoutObservation[]
  /** The batch's observations, without the read ids the service gave to two UUIDs. */
  observations: PayoutObservation[]
}

/**
 * A payout first seen by its read id alone (`po_...`) has a placeholder row whose
 * `payout_uuid` is that read id. The first observation carrying both ids merges the
 * placeholder into the UUID's row (created if the UUID has none yet):
 * - the placeholder's payout_events rows move to the UUID, marked `merged_from` with the
 *   read id, so a change of the placeholder that `renotify` sends later still goes out with
 *   the read id as its payoutId, as it would have before the merge;
 * - the placeholder row is deleted;
 * - its position and fields come back as one more observation of the UUID, applied before
 *   the batch's own, so the UUID's listeners hear what only the read id's listeners heard.
 * A read id the service gives to two UUIDs is not filled in (the observation still
 * applies). Costs nothing when no observation carries a read id. Only `account`'s rows are
 * read or moved: another account's placeholder of the same read id is another payout.
 */
export async function mergePlaceholders(
  trx: TransactionClientContract,
  observations: PayoutObservation[],
  account: string
): Promise<MergedPlaceholders> {
  const links = new Map<string, string>()
  for (const o of observations) {
    if (o.readId && o.readId !== o.payoutId && isUuid(o.payoutId) && !isUuid(o.readId))
      if (!links.has(o.readId)) links.set(o.readId, o.payoutId)
  }
  if (links.size === 0) return { merged: [], observations }
  // Every row the batch names, locked here in one statement in id order: the locks taken
  // later are then all held already, and two instances still never wait in a cycle.
  const named = observations.map((o) => o.payoutId)
  const query = Payout.query({ client: trx })
    .where('account', account)
    .where((where) => {
      where.whereIn('payout_uuid', [...new Set([...named, ...links.keys()])])
      where.orWhereIn('read_id', [
        ...new Set([...named.filter((id) => !isUuid(id)), ...links.keys()]),
      ])
    })
    .orderBy('id', 'asc')
  const rows = await (locksRows(trx) ? query.forUpdate() : query)
  const taken = new Set<string>()
  const merged: PayoutObservation[] = []
  for (const [readId, uuid] of links) {
    const holder = rows.find((r) => r.readId === readId)
    const target = rows.find((r) => r.payoutUuid === uuid)
    if (!holder || holder === target) continue
    if (holder.payoutUuid !== readId || (target?.readId && target.readId !== readId)) {
      // Another UUID's read id, or a UUID that has one already: the service contradicts
      // itself; neither row is touched.
      taken.add(readId)
      continue
    }
    const observation = await placeholderAsObservation(trx, holder, uuid)
    await trx
      .from(PayoutEvent.table)
      .where('account', account)
      .where('payout_uuid', readId)
      .update({ payout_uuid: uuid, merged_from: readId })
    const own = () => trx.from(Payout.table).where('account', account)
    await own().where('id', holder.id).delete()
    if (target) await own().where('id', target.id).update({ read_id: readId })
    else
      await insertPendingPayouts(
        trx,
        [{ payoutId: uuid, readId, source: 'poll', observedAt: holder.createdAt }],
        account
      )
    if (observation) merged.push(observation)
  }
  return {
    merged,
    observations:
      taken.size === 0
        ? observations
        : observations.map((o) => (o.readId && taken.has(o.readId) ? { ...o, readId: null } : o)),
  }
}

/**
 * A placeholder's position and fields, as an observation of the UUID it turned out to be;
 * null when no observation has reached the placeholder yet (it has no position to pass on).
 */
async function placeholderAsObservation(
  trx: TransactionClientContract,
  placeholder: Payout,
  uuid: string
): Promise<PayoutObservation | null> {
  if (placeholder.lastObservedAt === null) return null
  const last = await PayoutEvent.query({ client: trx })
    .where('account', placeholder.account)
    .where('payout_uuid', placeholder.payoutUuid)
    .where('applied', true)
    .orderBy('id', 'desc')
    .first()
  const fields: PayoutFields = {}
  for (const key of FIELD_KEYS) {
    const value = (placeholder as any)[key]
    if (value !== null && value !== undefined) (fields as any)[key] = value
  }
  return {
    payoutId: uuid,
    readId: placeholder.payoutUuid,
    status: placeholder.status,
    step: placeholder.step,
    completedAt: placeholder.completedAt?.toISO() ?? null,
    source: (last?.source as ObservationSource | undefined) ?? 'poll',
    eventType: 'merge',
    observedAt: placeholder.statusChangedAt ?? DateTime.now(),
    fields,
    // Its routing detail as old as it is, not as old as its position.
    ...(placeholder.providerMetadataAt && { providerMetadataAt: placeholder.providerMetadataAt }),
  }
}
