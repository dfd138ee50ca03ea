/** A rate-limit family's allowance: its sustained rate per minute and its burst. */
export interface RateLimit {
  perMinute: number
  burst: number
}

/**
 * The service's Limits table: one token bucket per family (per API key, per account for
 * replay). The emulator enforces it; the client mirrors it so a burst waits locally.
 */
export const RATE_LIMITS = {
  default: { perMinute: 60, burst: 20 },
  quotes: { perMinute: 120, burst: 40 },
  execute: { perMinute: 30, burst: 10 },
  replay: { perMinute: 5, burst: 5 },
} as const satisfies Record<string, RateLimit>

export type RateFamily = keyof typeof RATE_LIMITS
