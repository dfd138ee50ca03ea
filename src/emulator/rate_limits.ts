import { RATE_LIMITS, type RateFamily } from '../contract/rate_limits.ts'
import type { EmulatorClock } from './clock.ts'

/** One request's rate-limit verdict and the X-RateLimit-* values to answer with. */
export interface RateDecision {
  allowed: boolean
  limit: number
  remaining: number
  /** Unix seconds when the bucket is full again. */
  reset: number
  retryAfter: number
}

/** Token buckets per key (per account for replay) and family, on the emulated clock. */
export class RateLimits {
  #buckets = new Map<string, { tokens: number; at: number }>()

  constructor(
    private clock: EmulatorClock,
    private multiplier = 1
  ) {}

  take(subject: string, family: RateFamily): RateDecision {
    const spec = RATE_LIMITS[family]
    const burst = spec.burst * this.multiplier
    const perMs = (spec.perMinute * this.multiplier) / 60_000
    const now = this.clock.now()
    const key = `${family}:${subject}`
    const bucket = this.#buckets.get(key) ?? { tokens: burst, at: now }
    bucket.tokens = Math.min(burst, bucket.tokens + (now - bucket.at) * perMs)
    bucket.at = now
    const allowed = bucket.tokens >= 1
    if (allowed) bucket.tokens -= 1
    this.#buckets.set(key, bucket)
    if (this.#buckets.size > 100_000) this.#buckets.clear()
    return {
      allowed,
      limit: burst,
      remaining: Math.floor(bucket.tokens),
      reset: Math.ceil((now + (burst - bucket.tokens) / perMs) / 1000),
      retryAfter: allowed ? 0 : Math.max(1, Math.ceil((1 - bucket.tokens) / perMs / 1000)),
    }
  }
}
