import type { DateTime } from 'luxon'
import type { PayoutStatus, PayoutStep } from '../schemas/common.ts'
import type { ProviderMetadata } from '../schemas/resources.ts'
import type { EscrowEvent, ObservationSource, PayoutChangedEvent } from '../types/events.ts'
import type { ReduceReason } from './state_machine.ts'

/*
 * The words the ledger and its callers share: what an observation says, what applying it
 * did, and the public event a change becomes. Plain types and pure functions: no database,
 * no model, so the event mapper and the jobs can use them without loading Lucid.
 */

/** Descriptive fields an observation may carry; they fill gaps, they never move state. */
export interface PayoutFields {
  ownerId?: string | null
  flow?: string | null
  transactionType?: string | null
  quoteId?: string | null
  sourceAmount?: number | string | null
  sourceCurrency?: string | null
  payoutAmount?: number | string | null
  payoutCurrency?: string | null
  toAmount?: number | string | null
  fees?: Record<string, unknown> | null
  partnerFxRate?: number | string | null
  effectiveRate?: number | string | null
  recipientId?: string | null
  recipientPaymentMethodId?: string | null
  paymentMethod?: string | null
  paymentPurpose?: string | null
  reference?: string | null
  /** Not a gap filler: the latest wins (see `PayoutObservation.providerMetadataAt`). */
  providerMetadata?: ProviderMetadata | null
  instructions?: Record<string, unknown> | null
}

/**
 * Every descriptive field, as a merged placeholder hands its own on. A record, so a field
 * added to PayoutFields and not here fails to compile.
 */
export const FIELD_KEYS = Object.keys({
  ownerId: true,
  flow: true,
  transactionType: true,
  quoteId: true,
  sourceAmount: true,
  sourceCurrency: true,
  payoutAmount: true,
  payoutCurrency: true,
  toAmount: true,
  fees: true,
  partnerFxRate: true,
  effectiveRate: true,
  recipientId: true,
  recipientPaymentMethodId: true,
  paymentMethod: true,
  paymentPurpose: true,
  reference: true,
  providerMetadata: true,
  instructions: true,
} satisfies Record<keyof PayoutFields, true>) as Array<keyof PayoutFields>

/** One sighting of a payout, from any source. */
export interface PayoutObservation {
  /** The execute UUID, or a prefixed read id when that is all the source gives. */
  payoutId: string
  readId?: string | null
  status?: string | null
  step?: string | null
  completedAt?: string | null
  source: ObservationSource
  eventType?: string
  deliveryId?: string
  observedAt?: DateTime
  fields?: PayoutFields
  /**
   * When `fields.providerMetadata` was observed, when not at `observedAt` (a merged
   * placeholder hands on its own). A payout keeps the metadata observed last, never that of
   * an observation behind its position.
   */
  providerMetadataAt?: DateTime
}

/**
 * The fields of a stored payout that a change's event is built from. The ledger hands out
 * its Lucid rows, which have these and more; code that only reads a change needs no more.
 */
export interface PayoutRecord {
  /** The account the payout belongs to (every row of the ledger has one). */
  account?: string
  payoutUuid: string
  readId: string | null
  ownerId: string | null
  flow: string | null
  status: PayoutStatus
  step: PayoutStep | null
  payoutAmount: string | null
  payoutCurrency: string | null
  completedAt: DateTime | null
}

/** A committed change of a payout's position. */
export interface PayoutChange<Payout extends PayoutRecord = PayoutRecord> {
  payout: Payout
  previous: { status: PayoutStatus; step: PayoutStep | null } | null
  current: { status: PayoutStatus; step: PayoutStep | null }
  source: ObservationSource
  created: boolean
  /** The payout_events row that records the change (the outbox entry). */
  eventId: number
  observedAt: DateTime
  /**
   * The escrow deposit this change showed detected (set by the `inTransaction` hook); null
   * when the hook found none; absent when not known (a change rebuilt after a crash).
   */
  escrowConfirmed?: EscrowEvent | null
}

/** What applying one observation did to its payout. */
export interface ApplyResult<Payout extends PayoutRecord = PayoutRecord> {
  payout: Payout
  changed: boolean
  reason: ReduceReason
  /** This observation gave an owner to a payout whose earlier changes went out without one. */
  ownerAttached: boolean
}

/** One observation applied: its result, and its change when it moved the payout. */
export interface AppliedOutcome<Payout extends PayoutRecord = PayoutRecord> {
  result: ApplyResult<Payout>
  change: PayoutChange<Payout> | null
}

/** A batch applied in a transaction: changes in apply order, results in input order. */
export interface AppliedBatch<Payout extends PayoutRecord = PayoutRecord> {
  outcomes: Array<AppliedOutcome<Payout>>
  results: Array<ApplyResult<Payout>>
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** Whether an id is an execute UUID (otherwise it is a prefixed read id such as `po_...`). */
export function isUuid(id: string): boolean {
  return UUID.test(id)
}

/**
 * A payout's two ids as a read gave them: the execute UUID (when any id is one, the local
 * one first) to apply on, and the prefixed read id beside it.
 */
export function readIds(
  local: string,
  remote: { id: string; payoutId?: string }
): { payoutId: string; readId: string | null } {
  const payoutId = [local, remote.payoutId, remote.id].find((id) => id && isUuid(id)) ?? local
  const readId = [remote.id, local].find((id) => id !== payoutId && !isUuid(id)) ?? null
  return { payoutId, readId }
}

/** Projects a change onto the public event payload (no instructions, no secrets). */
export function toChangedEvent(change: PayoutChange): PayoutChangedEvent {
  const p = change.payout
  return {
    eventId: String(change.eventId),
    payoutId: p.payoutUuid,
    readId: p.readId,
    ownerId: p.ownerId,
    flow: p.flow,
    status: change.current.status,
    step: change.current.step,
    previousStatus: change.previous?.status ?? null,
    previousStep: change.previous?.step ?? null,
    source: change.source,
    payoutAmount: p.payoutAmount,
    payoutCurrency: p.payoutCurrency,
    completedAt: change.current.status === 'completed' ? (p.completedAt?.toISO() ?? null) : null,
    changedAt: change.observedAt.toISO()!,
  }
}
