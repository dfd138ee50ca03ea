import type { ZodType } from 'zod'
import debug from '../debug.ts'
import {
  eventEnvelopeSchema,
  parseJsonBytes,
  payoutCreatedDataSchema,
  payoutStatusUpdatedDataSchema,
} from '../schemas/events.ts'
import type { DeliverySource, PayoutsWebhookTypes, WebhookReceivedEvent } from '../types/events.ts'
import { safeError } from '../safe_error.ts'

/**
 * Who hears of each delivery once it is stored (the notifier: `payouts:webhook_received`).
 * Given to the route and the stream when they are built. Never rejects: its listeners'
 * failures and timeouts are its own.
 */
export interface DeliveryListener {
  onDelivery(event: WebhookReceivedEvent): Promise<unknown>
}

/** The check of each type the plugin declares in `PayoutsWebhookTypes`. */
const CHECKS = new Map<string, ZodType>([
  ['payout.created', payoutCreatedDataSchema],
  ['payout.status.updated', payoutStatusUpdatedDataSchema],
] satisfies Array<[keyof PayoutsWebhookTypes, ZodType]>)

/**
 * The `payouts:webhook_received` payload of a stored delivery, from its bytes: its envelope's
 * type, createdAt and data object as sent. Null when the bytes are no event the processor can
 * read (not JSON, no type, no data object; a type of `PayoutsWebhookTypes` whose data fails
 * its check): such a row is dead-lettered, and its payload would not be what the type says.
 */
export function receivedEvent(
  raw: Buffer,
  deliveryId: string,
  source: DeliverySource
): WebhookReceivedEvent | null {
  let body: unknown
  try {
    body = parseJsonBytes(raw)
  } catch {
    return null
  }
  const envelope = eventEnvelopeSchema.safeParse(body)
  if (!envelope.success) return null
  const { type, createdAt } = envelope.data
  // The object as parsed from the bytes, not the schema's copy of it.
  const data = (body as { data: Record<string, unknown> }).data
  const check = CHECKS.get(type)
  if (check && !check.safeParse(data).success) return null
  return { deliveryId, type, source, createdAt: createdAt ?? null, data }
}

/**
 * Tells `listener` of a delivery just stored, unless its bytes are no event (`receivedEvent`).
 * Returns when its listeners are done or given up (the notifier bounds them); never rejects.
 */
export async function tellStored(
  listener: DeliveryListener,
  raw: Buffer,
  deliveryId: string,
  source: DeliverySource
): Promise<void> {
  try {
    const event = receivedEvent(raw, deliveryId, source)
    if (!event) {
      debug('delivery %s is no readable event: not told', deliveryId)
      return
    }
    await listener.onDelivery(event)
  } catch (error) {
    debug('delivery %s not told: %s', deliveryId, safeError(error).message)
  }
}
