import { Pool } from 'undici'
import { deliveryId, signedHeaders, statusEvent } from './deliveries.ts'
import { ROUTES } from './app.ts'
import type { Child } from './ipc.ts'
import { QUICK, elapsed, log, withApp, type Check, type DbConfig } from './setup.ts'
import { round } from './stats.ts'

/** The memory settings of this run. */
export const MEMORY = {
  marks: QUICK ? [1000, 5000, 10_000] : [1000, 10_000, 50_000, 100_000],
  concurrency: 16,
  budgetMs: QUICK ? 30_000 : 120_000,
}

/** The stores the memory target is measured on (keys of CONFIGS). */
export const MEMORY_DBS = ['sqlite-wal', 'pg']

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

/** The memory measure on one store: the plugin route and its two baselines. */
export interface MemoryRuns {
  plugin: MemoryResult | { error: string }
  insert: MemoryResult | { error: string }
  bare: MemoryResult | { error: string }
  /** SQLite's page cache limit for one connection, MB; null on PostgreSQL. */
  sqlitePageCacheMB: number | null
}

/** PRAGMA cache_size as the app opens SQLite: negative is KiB, positive is pages. */
async function sqlitePageCacheLimitMB(child: Child<{ url: string }>): Promise<number> {
  const pragmas = await child.call<{ cacheSize: number; pageSize: number }>('sqlitePragmas')
  const bytes =
    pragmas.cacheSize < 0 ? -pragmas.cacheSize * 1024 : pragmas.cacheSize * pragmas.pageSize
  return bytes / (1024 * 1024)
}

/**
 * The memory measure on `config`'s store: the plugin route, then the insert-only and the
 * bare routes, each in a fresh app started with --expose-gc. A failed run is a result.
 */
export async function runMemory(config: DbConfig): Promise<MemoryRuns> {
  let sqlitePageCacheMB: number | null = null
  const memoryOf = async (path: string): Promise<MemoryResult | { error: string }> => {
    try {
      return await withApp(
        config,
        async (child) => {
          const result = await measureMemory({ child, path, ...MEMORY })
          // Read once the marks are taken, in the same app: nothing to start for it.
          if (config.db === 'sqlite') sqlitePageCacheMB ??= await sqlitePageCacheLimitMB(child)
          return result
        },
        ['--expose-gc']
      )
    } catch (error) {
      return { error: (error as Error).message }
    }
  }
  log(`[${elapsed()}] memory: ${MEMORY.marks.at(-1)} deliveries, ${config.label}`)
  const plugin = await memoryOf(ROUTES.plugin)
  log(`[${elapsed()}] memory: the same on the insert-only route, in a fresh app (baseline)`)
  const insert = await memoryOf(ROUTES.insert)
  log(`[${elapsed()}] memory: the same on the bare route, in a fresh app (the framework alone)`)
  const bare = await memoryOf(ROUTES.bare)
  return { plugin, insert, bare, sqlitePageCacheMB }
}

/** The memory rows of the results table for store `key`. */
export function memoryChecks(key: string, runs: MemoryRuns): Check[] {
  const { plugin: m, insert: baseline, bare } = runs
  if ('error' in m) {
    return [
      {
        id: `${key}.memory.rss_delta`,
        measure: 'memory',
        db: key,
        value: null,
        unit: '',
        target: `failed: ${m.error}`,
        pass: false,
      },
    ]
  }
  const first = m.marks[0]
  const last = m.marks[m.marks.length - 1]
  const reached = m.timedOut ? ` (time cap hit: ${m.reached} of ${m.target})` : ''
  const clean = !m.timedOut && m.failures === 0
  const half = m.marks.find((x) => x.deliveries >= last.deliveries / 2)?.deliveries
  const plugin = (value: number, limit: number) => clean && value < limit
  return [
    {
      id: `${key}.memory.heap_used_delta`,
      measure: `heapUsed after ${last.deliveries} minus after ${first.deliveries} deliveries (after gc)${reached}`,
      db: key,
      value: round(m.heapUsedDeltaMB, 1),
      unit: 'MB',
      target: '< 5',
      pass: plugin(m.heapUsedDeltaMB, 5),
    },
    {
      id: `${key}.memory.rss_second_half`,
      measure: `RSS growth over the second half (${half} -> ${last.deliveries})`,
      db: key,
      value: round(m.rssDeltaSecondHalfMB, 1),
      unit: 'MB',
      target: '< 5',
      pass: plugin(m.rssDeltaSecondHalfMB, 5),
    },
    {
      id: `${key}.memory.plugin_minus_bare`,
      measure:
        'RSS growth of the plugin route minus the bare route, same marks, this run' +
        ('error' in bare ? `: bare failed, ${bare.error}` : ''),
      db: key,
      value: 'error' in bare ? null : round(m.rssDeltaMB - bare.rssDeltaMB, 1),
      unit: 'MB',
      target: '< 10',
      pass: 'error' in bare ? false : plugin(m.rssDeltaMB - bare.rssDeltaMB, 10),
    },
    {
      id: `${key}.memory.rss_delta`,
      measure: `RSS after ${last.deliveries} minus after ${first.deliveries} deliveries (mostly V8's young generation and, on SQLite, its page cache)`,
      db: key,
      value: round(m.rssDeltaMB, 1),
      unit: 'MB',
      target: '',
      pass: null,
    },
    {
      id: `${key}.memory.insert_rss_delta`,
      measure:
        'same RSS delta on the insert-only route, fresh app (same DB work, no verify)' +
        ('error' in baseline
          ? `: failed, ${baseline.error}`
          : baseline.timedOut
            ? ` (time cap hit: ${baseline.reached})`
            : ''),
      db: key,
      value: 'error' in baseline ? null : round(baseline.rssDeltaMB, 1),
      unit: 'MB',
      target: '',
      pass: null,
    },
    {
      id: `${key}.memory.bare_rss_delta`,
      measure:
        'same RSS delta on the bare route, fresh app (the framework and V8 alone)' +
        ('error' in bare ? `: failed, ${bare.error}` : ''),
      db: key,
      value: 'error' in bare ? null : round(bare.rssDeltaMB, 1),
      unit: 'MB',
      target: '',
      pass: null,
    },
    {
      id: `${key}.memory.heap_total_delta`,
      measure: 'heapTotal delta, same marks (V8 reserved heap)',
      db: key,
      value: round(m.heapTotalDeltaMB, 1),
      unit: 'MB',
      target: '',
      pass: null,
    },
    {
      id: `${key}.memory.new_space_delta`,
      measure: "of which V8's young generation (new space) grew",
      db: key,
      value: round(m.newSpaceDeltaMB, 1),
      unit: 'MB',
      target: '',
      pass: null,
    },
    ...(runs.sqlitePageCacheMB === null
      ? []
      : [
          {
            id: `${key}.memory.sqlite_page_cache_limit`,
            measure:
              "SQLite page cache limit per connection (better-sqlite3's cache_size), held in the app process",
            db: key,
            value: round(runs.sqlitePageCacheMB, 1),
            unit: 'MB',
            target: '',
            pass: null,
          },
        ]),
  ]
}
