/**
 * Issue #31's figure: 1,000 rows through `executeBatch` against the emulator versus 1,000
 * single `execute` calls (rate limits off on both sides), wall time and requests sent, on the
 * suite's database (`TEST_DB=pg` for PostgreSQL, SQLite otherwise). Each run on fresh tables,
 * through a recording proxy that counts the requests.
 *
 *   node scripts/node24.mjs --import=@poppinss/ts-exec bench/batch_vs_execute.ts [rows]
 */
import { PayoutExecutor } from '../src/ledger/payout_executor.ts'
import { PayoutLedger } from '../src/ledger/payout_ledger.ts'
import { executeBodies, startEmulator, testClient } from '../tests/emulator/helpers.ts'
import { removeSqliteFiles, setupDatabase, TEST_DB } from '../tests/helpers/database.ts'
import { startRecordingProxy } from '../tests/helpers/recording_proxy.ts'

const ROWS = Number(process.argv[2] ?? 1000)

async function measure(mode: 'batch' | 'single') {
  const cleanups: Array<() => Promise<void>> = []
  const cleanup = (fn: () => Promise<void>) => void cleanups.push(fn)
  try {
    const { db } = await setupDatabase(cleanup, `bench-${mode}`)
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const proxy = await startRecordingProxy(cleanup, emu.baseUrl)
    const client = testClient(
      cleanup,
      { apiKey: emu.apiKey, baseUrl: proxy.baseUrl },
      { rateLimiter: false }
    )
    let created = 0
    const ledger = new PayoutLedger(db, {
      onChange: (change) => void (change.created && created++),
    })
    const executor = new PayoutExecutor({ db, ledger, client })
    const { fiat } = executeBodies(emu)
    const rows = Array.from({ length: ROWS }, (_, i) => ({
      ...fiat,
      amount: 100 + i,
      reference: `bench-${i}`,
    }))
    const before = proxy.requests.length
    const started = performance.now()
    if (mode === 'batch') {
      const batch = await executor.executeBatch(rows, { idempotencyKey: `bench-${Date.now()}` })
      if (batch.counts.created !== ROWS) throw new Error(`batch: ${JSON.stringify(batch.counts)}`)
    } else {
      for (const [i, row] of rows.entries()) {
        await executor.execute(row, { idempotencyKey: `bench-single-${Date.now()}-${i}` })
      }
    }
    const ms = performance.now() - started
    const requests = proxy.requests.slice(before).filter((r) => r.method === 'POST')
    if (emu.admin.payouts().length !== ROWS || created !== ROWS) {
      throw new Error(`${mode}: ${emu.admin.payouts().length} payouts, ${created} created`)
    }
    return { store: TEST_DB, mode, rows: ROWS, ms: Math.round(ms), requests: requests.length }
  } finally {
    for (const fn of cleanups.reverse()) await fn()
  }
}

const results = []
for (const mode of ['batch', 'single'] as const) results.push(await measure(mode))
console.table(results)
console.log(JSON.stringify(results))
await removeSqliteFiles()
