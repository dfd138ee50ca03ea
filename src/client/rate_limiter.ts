import { RATE_LIMITS, type RateFamily, type RateLimit } from '../contract/rate_limits.ts'

export type { RateFamily } from '../contract/rate_limits.ts'

/** A documented rate-limit family: sustained rate per minute and burst. */
export type BucketSpec = RateLimit

/** The families of the spec's Limits table, the client's default buckets. */
export const DEFAULT_BUCKETS = RATE_LIMITS

/**
 * Client-side token buckets mirroring the service's families, so a burst from this
 * process waits locally instead of earning 429s. Waiters are served in order.
 */
export class RateLimiter {
  #buckets = new Map<RateFamily, { tokens: number; updatedAt: number; spec: BucketSpec }>()
  #queue: Promise<void> = Promise.resolve()

  constructor(
    specs: Partial<Record<RateFamily, BucketSpec>> = {},
    private now: () => number = Date.now,
    private sleep: (ms: number) => Promise<void> = (ms) =>
      new Promise((resolve) => setTimeout(resolve, ms))
  ) {
    for (const [family, spec] of Object.entries({ ...DEFAULT_BUCKETS, ...specs })) {
      this.#buckets.set(family as RateFamily, { tokens: spec.burst, updatedAt: now(), spec })
    }
  }

  /** Takes one token of the family, waiting for a refill when the bucket is empty. */
  acquire(family: RateFamily): Promise<void> {
    const turn = this.#queue.then(() => this.#take(family))
    this.#queue = turn.catch(() => {})
    return turn
  }

  async #take(family: RateFamily) {
    const bucket = this.#buckets.get(family)!
    for (;;) {
      const now = this.now()
      const refill = ((now - bucket.updatedAt) / 60_000) * bucket.spec.perMinute
      bucket.tokens = Math.min(bucket.spec.burst, bucket.tokens + refill)
      bucket.updatedAt = now
      if (bucket.tokens >= 1) {
        bucket.tokens -= 1
        return
      }
      await this.sleep(Math.ceil(((1 - bucket.tokens) * 60_000) / bucket.spec.perMinute))
    }
  }
}

/**
 * The service's own account of each family, read from its answers: after
 * `X-RateLimit-Remaining: 0` the family is held until `X-RateLimit-Reset`, after a 429 until
 * its Retry-After. Times are on this process's clock; the caller converts the service's.
 */
export class ServiceLimits {
  #heldUntil = new Map<RateFamily, number>()

  constructor(private now: () => number) {}

  /**
   * Records one answer of the family. `resetInMs` is how far ahead the reset was when the
   * service answered, `retryAfterMs` the 429's usable Retry-After.
   */
  observe(
    family: RateFamily,
    answer: {
      status: number
      remaining: number | null
      resetInMs: number | null
      retryAfterMs: number | null
    }
  ) {
    if (answer.status === 429 && answer.retryAfterMs !== null) {
      this.#heldUntil.set(family, this.now() + answer.retryAfterMs)
    } else if (answer.remaining === 0 && answer.resetInMs !== null && answer.resetInMs > 0) {
      this.#heldUntil.set(family, this.now() + answer.resetInMs)
    } else if (answer.remaining !== null && answer.remaining > 0) {
      this.#heldUntil.delete(family)
    }
  }

  /** How long a request of the family must wait before it is sent (0: go). */
  waitFor(family: RateFamily): number {
    const until = this.#heldUntil.get(family)
    if (until === undefined) return 0
    const wait = until - this.now()
    if (wait > 0) return wait
    this.#heldUntil.delete(family)
    return 0
  }
}
