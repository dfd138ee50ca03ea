/** Summary of a set of samples (milliseconds, or any unit). */
export interface Summary {
  n: number
  mean: number
  p50: number
  p99: number
  max: number
}

/** Nearest-rank percentile of sorted samples. */
export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN
  const rank = Math.ceil((p / 100) * sorted.length)
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]
}

/** n, mean, p50, p99 and max of the samples. */
export function summarize(samples: number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b)
  const total = sorted.reduce((sum, value) => sum + value, 0)
  return {
    n: sorted.length,
    mean: sorted.length ? total / sorted.length : Number.NaN,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted.length ? sorted[sorted.length - 1] : Number.NaN,
  }
}

/** Rounds to `digits` decimals (NaN stays NaN, so JSON gets null). */
export function round(value: number, digits = 2): number {
  const factor = 10 ** digits
  return Math.round(value * factor) / factor
}

/** Median of a few values (repeated rounds of the same measurement). */
export function median(values: number[]): number {
  return percentile(
    [...values].sort((a, b) => a - b),
    50
  )
}

/** Resolves after `ms`. */
export function sleep(ms: number) {
  return new Promise<void>((resolve) => setTimeout(resolve, ms))
}
