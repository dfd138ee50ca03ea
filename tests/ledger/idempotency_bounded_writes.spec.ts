import { DateTime } from 'luxon'
import { test } from '@japa/runner'
import type { PayoutsClient } from '../../src/client/main.ts'
import { E_PAYOUTS_EXECUTE_NOT_STORED } from '../../src/errors.ts'
import { PayoutExecutor } from '../../src/ledger/payout_executor.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { ExecutionIntent } from '../../src/models/main.ts'
import { executeBodies, startEmulator, testClient } from '../emulator/helpers.ts'
import { boundedConnection, connectionConfig, setupDatabase, TEST_DB } from '../helpers/database.ts'
import { TcpProxy } from '../helpers/tcp_proxy.ts'

const SERVER_ONLY = 'needs PostgreSQL or MySQL (TEST_DB=pg, TEST_DB=mysql) behind a TCP proxy'
const BOUND_MS = 1000

/**
 * An executor whose database is reached through a proxy the test can stall, its writes
 * bounded by `transactionTimeoutMs` = BOUND_MS. `beforeStore` runs between the service's
 * answer and the store of it.
 */
async function executorBehindProxy(
  cleanup: (fn: () => Promise<void>) => void,
  beforeStore?: () => void
) {
  const base = connectionConfig('bounded_writes') as any
  const proxy = new TcpProxy({ host: base.connection.host, port: base.connection.port })
  await proxy.start()
  // Registered first, so it closes after the tables are dropped (through a healed proxy).
  cleanup(() => proxy.close())
  const { db } = await setupDatabase(cleanup, 'bounded_writes', {
    connection: boundedConnection(base, {
      port: proxy.port,
      connectMs: 500,
      idleInTransactionMs: 2000,
    }),
  })
  cleanup(() => proxy.heal())
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const client = testClient(cleanup, emu)
  const sending: Pick<PayoutsClient, 'execute'> = {
    execute: async (...args: Parameters<PayoutsClient['execute']>) => {
      const result = await client.execute(...args)
      beforeStore?.()
      return result
    },
  }
  const executor = new PayoutExecutor({
    db,
    ledger: new PayoutLedger(db, {}, { transactionTimeoutMs: BOUND_MS }),
    client: sending,
    transactionTimeoutMs: BOUND_MS,
  })
  /** Recovery as it runs five minutes later, past any live caller's bound. */
  const recoverLater = () =>
    new PayoutExecutor({
      db,
      ledger: new PayoutLedger(db, {}, { transactionTimeoutMs: BOUND_MS }),
      client: sending,
      transactionTimeoutMs: BOUND_MS,
      now: () => DateTime.now().plus({ minutes: 5 }),
    }).recover({ olderThanMs: 0 })
  return { db, proxy, emu, executor, recoverLater, body: executeBodies(emu).fiat }
}

/** The call's error and how long it took to come. */
async function timed(work: () => Promise<unknown>) {
  const started = Date.now()
  const error = await work().then(
    () => null,
    (e) => e
  )
  return { error, ms: Date.now() - started }
}

test.group(`Ledger | execute's own writes under a database stall (${TEST_DB})`, () => {
  test('the intent insert stalls: rejected within the bound, outcomeUnknown false, nothing sent', async ({
    assert,
    cleanup,
  }) => {
    const { proxy, emu, executor, body } = await executorBehindProxy(cleanup)
    proxy.stall()
    const { error, ms } = await timed(() =>
      executor.execute(body, { idempotencyKey: 'order-stalled-1' })
    )
    assert.instanceOf(error, E_PAYOUTS_EXECUTE_NOT_STORED)
    assert.isFalse(error.outcomeUnknown)
    assert.isNull(error.intentId)
    assert.equal(error.cause?.code, 'E_PAYOUTS_TIMEOUT')
    assert.isBelow(ms, BOUND_MS + 1500, `rejected after ${ms} ms`)
    assert.equal(emu.state.idempotency.size, 0, 'nothing reached the service')
    assert.lengthOf(emu.admin.payouts(), 0)
  })
    .skip(TEST_DB === 'sqlite', SERVER_ONLY)
    .timeout(30_000)

  test('the intent COMMIT stalls after its INSERT: outcomeUnknown true, nothing sent, never twice', async ({
    assert,
    cleanup,
  }) => {
    const { db, proxy, emu, executor, recoverLater, body } = await executorBehindProxy(cleanup)
    // The INSERT reaches the server; the flow stalls at the COMMIT that follows it.
    let inserted = false
    db.connection()
      .getWriteClient()
      .on('query', (query: { sql: string }) => {
        const sql = query.sql.trim().toLowerCase()
        if (sql.startsWith('insert') && sql.includes(ExecutionIntent.table)) inserted = true
        else if (inserted && sql.startsWith('commit')) proxy.stall()
      })
    const { error, ms } = await timed(() => executor.execute(body))
    assert.isTrue(inserted)
    assert.instanceOf(error, E_PAYOUTS_EXECUTE_NOT_STORED)
    // The COMMIT may have landed with its answer lost: then recovery sends the intent under
    // its key, so the caller must not send it again under another one.
    assert.isTrue(error.outcomeUnknown)
    assert.isNull(error.intentId)
    assert.isBelow(ms, BOUND_MS + 1500, `rejected after ${ms} ms`)
    assert.equal(emu.state.idempotency.size, 0, 'nothing reached the service')

    await proxy.heal()
    db.connection().getWriteClient().removeAllListeners('query')
    await recoverLater()
    // Whichever way the COMMIT went: at most the one payout, and an intent that exists is settled.
    assert.isAtMost(emu.admin.payouts().length, 1)
    for (const intent of await ExecutionIntent.all()) assert.equal(intent.state, 'succeeded')
  })
    .skip(TEST_DB === 'sqlite', SERVER_ONLY)
    .timeout(30_000)

  test('the store after sending stalls: outcomeUnknown true with the intent id, recovered once', async ({
    assert,
    cleanup,
  }) => {
    let stall = () => {}
    const { proxy, emu, executor, body } = await executorBehindProxy(cleanup, () => stall())
    stall = () => proxy.stall()
    const { error, ms } = await timed(() => executor.execute(body))
    assert.instanceOf(error, E_PAYOUTS_EXECUTE_NOT_STORED)
    assert.isTrue(error.outcomeUnknown)
    assert.isNumber(error.intentId)
    assert.isBelow(ms, BOUND_MS + 1500, `rejected after ${ms} ms`)
    assert.lengthOf(emu.admin.payouts(), 1)

    stall = () => {}
    await proxy.heal()
    assert.deepInclude(await executor.recover({ olderThanMs: 0 }), { resent: 1, succeeded: 1 })
    assert.lengthOf(emu.admin.payouts(), 1, 'the same key: the one payout again')
  })
    .skip(TEST_DB === 'sqlite', SERVER_ONLY)
    .timeout(30_000)
})
