import { DateTime } from 'luxon'
import {
  payoutCreatedDataSchema,
  payoutStatusUpdatedDataSchema,
  type EventEnvelope,
} from '../schemas/events.ts'
import type { PayoutObservation } from '../ledger/vocabulary.ts'
import type { ObservationSource } from '../types/events.ts'

/** An event that can never be applied (no payout id): dead-lettered at once, not retried. */
export class PermanentEventError extends Error {}

/**
 * Turns an event envelope into a ledger observation, or explains why it carries none
 * (an unknown type such as the payout.delivered the spec mentions is kept, not applied).
 */
export function observationFromEvent(
  envelope: EventEnvelope,
  source: ObservationSource,
  deliveryId?: string
): { observation: PayoutObservation } | { skip: string } {
  const observedAt = (iso?: string) => {
    const parsed = iso ? DateTime.fromISO(iso) : null
    return parsed?.isValid ? parsed : DateTime.now()
  }
  if (envelope.type === 'payout.created') {
    const data = payoutCreatedDataSchema.safeParse(envelope.data)
    if (!data.success) throw new PermanentEventError('payout.created without a usable payoutId')
    return {
      observation: {
        payoutId: data.data.payoutId,
        status: data.data.status,
        step: 'initiated',
        source,
        eventType: envelope.type,
        deliveryId,
        observedAt: observedAt(data.data.createdAt ?? envelope.createdAt),
        fields: {
          transactionType: data.data.transactionType,
          payoutAmount: data.data.payoutAmount,
          payoutCurrency: data.data.payoutCurrency,
          sourceCurrency: data.data.sourceCurrency,
          recipientId: data.data.recipientId,
        },
      },
    }
  }
  if (envelope.type === 'payout.status.updated') {
    const data = payoutStatusUpdatedDataSchema.safeParse(envelope.data)
    if (!data.success)
      throw new PermanentEventError('payout.status.updated without payoutId or status')
    return {
      observation: {
        payoutId: data.data.payoutId,
        status: data.data.status,
        step: data.data.step,
        source,
        eventType: envelope.type,
        deliveryId,
        observedAt: observedAt(data.data.stepChangedAt ?? envelope.createdAt),
      },
    }
  }
  return { skip: `unknown event type ${envelope.type.slice(0, 64)}: stored, not applied` }
}
