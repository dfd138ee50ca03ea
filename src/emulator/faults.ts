import { seededRandom } from './random.ts'

/** Faults switched on through `emu.admin.setFaults` or POST /__emulator/faults. */
export interface FaultConfig {
  /** Share of API requests answered with a 500/502/503. */
  errorRate?: number
  /** Share of API requests held, then dropped without an answer. */
  timeoutRate?: number
  timeoutHoldMs?: number
  /** Share of API requests whose connection is reset. */
  resetRate?: number
  /** Added latency on every API request (real milliseconds). */
  latencyMs?: number
  /** Real milliseconds an idempotent POST is held after it is recorded as in flight. */
  processingDelayMs?: number
  /** While set, this share of requests gets 429 with Retry-After. */
  rateLimitStormRate?: number
  webhookDuplicateRate?: number
  webhookReorderRate?: number
  webhookReorderMaxDelayMs?: number
  webhookDropRate?: number
  webhookDelayMs?: number
  /**
   * Share of payout.status.updated events that name the payout by its read id (po_...)
   * instead of its UUID: the spec types that payoutId only as a string.
   */
  readIdRate?: number
  /** Share of escrow deposits automatic detection misses. */
  missEscrowDetection?: number
  /** Faults apply only to API paths that start with one of these (all when empty). */
  pathPrefixes?: string[]
}

/** Counters of the faults actually injected. */
export interface FaultStats {
  errors: number
  timeouts: number
  resets: number
  /** 429s injected by a storm. */
  rateLimited: number
  /** 429s from the emulator's own rate limits (not injected: the caller went too fast). */
  throttled: number
  /** Status updates sent naming the payout by its read id (`readIdRate`). */
  readIds: number
}

/** Fault injection with a seedable PRNG, so a run can be reproduced. */
export class Faults {
  config: FaultConfig = {}
  stats: FaultStats = {
    errors: 0,
    timeouts: 0,
    resets: 0,
    rateLimited: 0,
    throttled: 0,
    readIds: 0,
  }
  random: () => number

  constructor(seed = 42) {
    this.random = seededRandom(seed)
  }

  set(config: FaultConfig, seed?: number) {
    this.config = { ...config }
    if (seed !== undefined) this.random = seededRandom(seed)
  }

  roll(name: keyof FaultConfig): boolean {
    const rate = this.config[name]
    return typeof rate === 'number' && rate > 0 && this.random() < rate
  }

  appliesTo(path: string): boolean {
    const prefixes = this.config.pathPrefixes
    return !prefixes || prefixes.length === 0 || prefixes.some((p) => path.startsWith(p))
  }
}
