import type { z } from 'zod'
import type { PayoutStatus, PayoutStep } from '../schemas/common.ts'
import type { payoutCreatedDataSchema, payoutStatusUpdatedDataSchema } from '../schemas/events.ts'

/** Where an observation of a payout came from. */
export type ObservationSource = 'execute' | 'webhook' | 'websocket' | 'poll' | 'recovery'

/**
 * A committed change of a payout, as its app events and Transmit broadcasts tell it. Public
 * fields only: banking instructions, payment URLs and secrets never leave the ledger through
 * events or broadcasts.
 */
export interface PayoutChangedEvent {
  /**
   * The change's id (its payout_events row), shared by every event one change fires: for
   * correlation. Deduplicate on `eventKey` (app events) instead.
   */
  eventId: string
  payoutId: string
  readId: string | null
  ownerId: string | null
  flow: string | null
  status: PayoutStatus
  step: PayoutStep | null
  previousStatus: PayoutStatus | null
  previousStep: PayoutStep | null
  source: ObservationSource
  payoutAmount: string | null
  payoutCurrency: string | null
  completedAt: string | null
  changedAt: string
}

/** Payload of the escrow events (confirmed: once per quote; failed: once per quote and txHash). */
export interface EscrowEvent {
  quoteId: string
  payoutId: string | null
  txHash: string | null
  /** payouts:escrow_confirmation_failed: confirmations sent before giving up. */
  attempts?: number
  /** payouts:escrow_confirmation_failed: the last failure's code (never its text). */
  code?: string
}

/** Payload of payouts:stuck, raised once per payout by reconciliation past the SLA. */
export interface PayoutStuckEvent {
  payoutId: string
  status: PayoutStatus
  step: PayoutStep | null
  since: string
}

/** Where a stored delivery came from: the signed webhook route, or the WebSocket stream. */
export type DeliverySource = 'webhook' | 'websocket'

/**
 * The `data` of each delivery type the plugin knows, as the service sends it: the plugin
 * checks it before telling (a delivery that fails the check is dead-lettered, and fires no
 * `payouts:webhook_received`). An app declares the types it handles itself the same way, and
 * `payouts.onWebhook(type, ...)` gives their `data` that type (an app's declaration, unchecked):
 *
 * ```ts
 * declare module '@svc/adonis-payouts/types' {
 *   interface PayoutsWebhookTypes {
 *     'payout.delivered': { payoutId: string; deliveredAt: string }
 *   }
 * }
 * ```
 */
export interface PayoutsWebhookTypes {
  'payout.created': z.input<typeof payoutCreatedDataSchema>
  'payout.status.updated': z.input<typeof payoutStatusUpdatedDataSchema>
}

/** A delivery's type: one of `PayoutsWebhookTypes` (suggested), or any other the service sends. */
export type WebhookType = keyof PayoutsWebhookTypes | (string & {})

/** The `data` of a delivery of `Type`: declared in `PayoutsWebhookTypes`, or a JSON object. */
export type WebhookData<Type extends string = string> = Type extends keyof PayoutsWebhookTypes
  ? PayoutsWebhookTypes[Type]
  : Record<string, unknown>

/**
 * Payload of payouts:webhook_received: a delivery of any type, mapped or not, once it is
 * stored, as the service sent it (never its signature, headers or the secret). Fired once per
 * delivery id, in the process that stored it; a redelivery of a stored id fires nothing.
 */
export interface WebhookReceivedEvent<Type extends string = string> {
  /** `Svc-Delivery-Id`; a stream message's is `ws_` and the SHA-256 of its bytes. */
  deliveryId: string
  /** The envelope's `type` (from the signed bytes, not the `Svc-Event-Type` header). */
  type: Type
  source: DeliverySource
  /** The envelope's `createdAt` (or its `created_at` spelling), null without one. */
  createdAt: string | null
  /** The envelope's `data` object, as the service sent it. */
  data: WebhookData<Type>
}

/**
 * The payload of an app event as a listener receives it: the event's fields, its account
 * (the name in `config/payouts.ts`; `main` in a one-account app) and its key. `eventKey` is
 * unique per event fired and the same when a crash makes the plugin fire that event again,
 * so it is the key a listener with side effects deduplicates on.
 */
export type WithEventKey<Payload> = Payload & { account: string; eventKey: string }

/** The plugin's entries of the AdonisJS `EventsList`. */
export interface PayoutsEventsList {
  'payouts:created': WithEventKey<PayoutChangedEvent>
  'payouts:status_updated': WithEventKey<PayoutChangedEvent>
  'payouts:completed': WithEventKey<PayoutChangedEvent>
  'payouts:failed': WithEventKey<PayoutChangedEvent>
  'payouts:cancelled': WithEventKey<PayoutChangedEvent>
  'payouts:escrow_confirmed': WithEventKey<EscrowEvent>
  'payouts:escrow_confirmation_failed': WithEventKey<EscrowEvent>
  'payouts:stuck': WithEventKey<PayoutStuckEvent>
  'payouts:webhook_received': WithEventKey<WebhookReceivedEvent>
}
