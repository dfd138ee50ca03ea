import type { PayoutStatus, PayoutStep } from '../schemas/common.ts'

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
}
