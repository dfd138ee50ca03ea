import { z } from 'zod'

/** Stablecoin tickers the service understands; used to tell the three execute flows apart. */
export const STABLECOINS = ['USDC', 'USDT'] as const

/** Idempotency-Key: 8 to 255 url-safe characters (spec, Idempotency). */
export const idempotencyKeySchema = z
  .string()
  .regex(/^[A-Za-z0-9_-]{8,255}$/, 'must be 8 to 255 url-safe characters (A-Z a-z 0-9 _ -)')

export { API_KEY_PATTERN } from '../constants.ts'

export const uuidSchema = z.uuid()
export const currencySchema = z.string().min(2).max(12)
export const positiveAmountSchema = z.number().finite().positive()
export const isoTimestampSchema = z.string().min(1)

/** Payout read statuses, ranked by the ledger's state machine. */
export const PAYOUT_STATUSES = [
  'pending',
  'processing',
  'completed',
  'failed',
  'cancelled',
] as const
export type PayoutStatus = (typeof PAYOUT_STATUSES)[number]
export const TERMINAL_STATUSES: readonly PayoutStatus[] = ['completed', 'failed', 'cancelled']

/** Steps within processing, in their only allowed order. */
export const PAYOUT_STEPS = [
  'initiated',
  'compliance_cleared',
  'instructions_sent',
  'collected',
  'converting',
  'settling',
  'delivered',
] as const
export type PayoutStep = (typeof PAYOUT_STEPS)[number]

/** The steps of a payout while `processing`: after `initiated`, before `delivered`. */
export const PROCESSING_STEPS: readonly PayoutStep[] = PAYOUT_STEPS.slice(1, -1)

export const FLOWS = ['fiat_to_fiat', 'stablecoin_to_fiat', 'onramp'] as const
export type ExecuteFlow = (typeof FLOWS)[number]

/** Webhook event types on the subscription allow list. */
export const WEBHOOK_EVENT_TYPES = ['payout.created', 'payout.status.updated'] as const
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number]

export function isStablecoin(code: string): boolean {
  return (STABLECOINS as readonly string[]).includes(code.toUpperCase())
}

/**
 * Picks the execute flow from the currencies, as the service does (spec gap: the
 * selection rule is not shown; see docs/spec-gaps.md).
 */
export function detectFlow(body: { fromCurrency?: unknown; toCurrency?: unknown }): ExecuteFlow {
  const from = typeof body.fromCurrency === 'string' ? body.fromCurrency : ''
  const to = typeof body.toCurrency === 'string' ? body.toCurrency : ''
  if (isStablecoin(from)) return 'stablecoin_to_fiat'
  if (isStablecoin(to)) return 'onramp'
  return 'fiat_to_fiat'
}
