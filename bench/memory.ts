import { Pool } from 'undici'
import { deliveryId, signedHeaders, statusEvent } from './deliveries.ts'
import type { Child } from './ipc.ts'

export interface MemoryMark {
  deliveries: number
  elapsedS: number
  rssMB: number
  heapUsedMB: number
  heapTotalMB: number
  externalMB: number
  /** V8's young generation (grows under allocation pressure, shrinks rarely). */
  newSpaceMB: number
  oldSpaceMB: number
}

export interface MemoryResult {
  route: string
  target: number
  reached: number
  timedOut: boolean
  concurrency: number
  failures: number
  marks: MemoryMark[]
  /** RSS after the last mark minus RSS after the first (1,000), MB. */
  rssDeltaMB: number
  heapUsedDeltaMB: number
  heapTotalDeltaMB: number
  newSpaceDeltaMB: number
  /** RSS growth over the second half of the run (plateau check), MB. */
  rssDeltaSecondHalfMB: number
}

const MB = 1024 * 1024

/**
 * Posts signed deliveries to one route of a child started with --expose-gc, with
 * bounded concurrency and a time cap; at each mark the child runs gc() twice and reports
 * its memory.
 */
export async function measureMemory(options: {
  child: Child<{ url: string }>
  path: string
  marks: number[]
  concurrency: number
  budgetMs: number
}): Promise<MemoryResult> {
  const { child } = options
  const pool = new Pool(child.ready.url, { connections: options.concurrency })
  const marks: MemoryMark[] = []
  const started = Date.now()
  let sent = 0
  let failures = 0
  let timedOut = false
  try {
    for (const mark of options.marks) {
      await Promise.all(
        Array.from({ length: options.concurrency }, async () => {
          while (sent < mark) {
            if (Date.now() - started > options.budgetMs) {
              timedOut = true
              return
            }
            sent++
            const raw = statusEvent()
            const response = await pool.request({
              path: options.path,
              method: 'POST',
              body: raw,
              headers: signedHeaders(raw, deliveryId('mem')),
            })
            await response.body.dump()
            if (response.statusCode !== 200) failures++
          }
        })
      )
      const usage = await child.call<
        NodeJS.MemoryUsage & { gc: boolean; spaces: Record<string, number> }
      >('memory')
      if (!usage.gc) throw new Error('the memory child was not started with --expose-gc')
      marks.push({
        deliveries: sent,
        elapsedS: (Date.now() - started) / 1000,
        rssMB: usage.rss / MB,
        heapUsedMB: usage.heapUsed / MB,
        heapTotalMB: usage.heapTotal / MB,
        externalMB: usage.external / MB,
        newSpaceMB: (usage.spaces.new_space ?? 0) / MB,
        oldSpaceMB: (usage.spaces.old_space ?? 0) / MB,
      })
      if (timedOut) break
    }
  } finally {
    await pool.close()
  }
  const first = marks[0]
  const last = marks[marks.length - 1]
  const half = marks.find((m) => m.deliveries >= last.deliveries / 2) ?? first
  return {
    route: options.path,
    target: options.marks[options.marks.length - 1],
    reached: sent,
    timedOut,
    concurrency: options.concurrency,
    failures,
    marks,
    rssDeltaMB: last.rssMB - first.rssMB,
    heapUsedDeltaMB: last.heapUsedMB - first.heapUsedMB,
    heapTotalDeltaMB: last.heapTotalMB - first.heapTotalMB,
    newSpaceDeltaMB: last.newSpaceMB - first.newSpaceMB,
    rssDeltaSecondHalfMB: last.rssMB - half.rssMB,
  }
}
