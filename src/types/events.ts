import type { PayoutStatus, PayoutStep } from '../schemas/common.ts'

/** Where an observation of a payout came from. */
export type ObservationSource = 'execute' | 'webhook' | 'websocket' | 'poll' | 'recovery'

/**
 * Payload of every payout app event. Public fields only: banking instructions, payment
 * URLs and secrets never leave the ledger through events or broadcasts.
 */
export interface PayoutChangedEvent {
  /**
   * The change's id (its payout_events row). An event interrupted by a crash fires again
   * after the restart with the same id, so a listener with side effects can dedupe on it.
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

/** Payload of the escrow events; one per quote (a re-emission after a crash keeps quoteId). */
export interface EscrowEvent {
  quoteId: string
  payoutId: string | null
  txHash: string | null
  /** payouts:escrow_confirmation_failed: confirmations sent before giving up. */
  attempts?: number
  /** payouts:escrow_confirmation_failed: the last failure's code (never its text). */
  code?: string
}

/** Payload of payouts:stuck, raised by reconciliation past the SLA. */
export interface PayoutStuckEvent {
  payoutId: string
  status: PayoutStatus
  step: PayoutStep | null
  since: string
}

/** The plugin's entries of the AdonisJS `EventsList`. */
export interface PayoutsEventsList {
  'payouts:created': PayoutChangedEvent
  'payouts:status_updated': PayoutChangedEvent
  'payouts:completed': PayoutChangedEvent
  'payouts:failed': PayoutChangedEvent
  'payouts:cancelled': PayoutChangedEvent
  'payouts:escrow_confirmed': EscrowEvent
  'payouts:escrow_confirmation_failed': EscrowEvent
  'payouts:stuck': PayoutStuckEvent
}
