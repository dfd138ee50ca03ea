import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { test } from '@japa/runner'
import { DateTime } from 'luxon'
import type { Database } from '@adonisjs/lucid/database'
import { EscrowFallback } from '../../src/jobs/escrow_fallback.ts'
import { EscrowDeposits } from '../../src/ledger/escrow_deposits.ts'
import { PayoutExecutor } from '../../src/ledger/payout_executor.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { toChangedEvent, type PayoutChange } from '../../src/ledger/vocabulary.ts'
import { EscrowDeposit, ExecutionIntent, PayoutEvent } from '../../src/models/main.ts'
import type { EscrowEvent } from '../../src/types/events.ts'
import { testClient, executeBodies, startEmulator } from '../emulator/helpers.ts'
import { boundedConnection, connectionConfig, setupDatabase, TEST_DB } from '../helpers/database.ts'
import { TcpProxy } from '../helpers/tcp_proxy.ts'
import { leasesExpired, waitFor } from './helpers.ts'
import { dropIdleConnections } from '../../src/database/deadline.ts'

/** Regressions the chaos suite found: each one is a crash or an overlap at the wrong moment. */
async function setup(
  cleanup: (fn: () => Promise<void>) => void,
  database?: Awaited<ReturnType<typeof setupDatabase>>
) {
  const { db } = database ?? (await setupDatabase(cleanup, 'regressions'))
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const client = testClient(cleanup, emu)
  const { stable } = executeBodies(emu)
  const executor = new PayoutExecutor({ db, ledger: new PayoutLedger(db), client })
  /** Executes a stablecoin payout whose deposit lands on chain unseen by the service. */
  const executeWithUnseenDeposit = async (body: typeof stable = stable) => {
    const { result, intent } = await executor.execute(body)
    const { txHash } = emu.admin.simulateDeposit({ quoteId: result.quoteId, detect: false })
    return { result, intent, txHash }
  }
  return { db, emu, client, stable, executor, executeWithUnseenDeposit }
}

/** A ledger whose process "dies" in its change hook: the change commits, its events never fire. */
function dyingLedger(db: Database) {
  return new PayoutLedger(db, { onChange: () => new Promise(() => {}) })
}

/** Waits (5 s at most, looking every 10 ms) until `find` sees what another process did. */
function eventually<T>(
  what: string,
  find: () => T | undefined | null | false | Promise<T | undefined | null | false>
) {
  return waitFor(what, find, { timeoutMs: 5000, everyMs: 10 })
}

/** The ledger of a restarted process, recording the changes it fires. */
function restartedLedger(db: Database) {
  const fired: PayoutChange[] = []
  const ledger = new PayoutLedger(db, { onChange: (change) => void fired.push(change) })
  return { ledger, fired }
}

test.group(`Chaos regressions | outbox (${TEST_DB})`, () => {
  test('a change committed by a process that died before its events fires later, once, with its id', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'regressions')
    const payoutId = '0f4c3f6e-1111-4a4a-8b8b-000000000001'
    const live = new PayoutLedger(db, { onChange: () => {} })
    await live.apply({ payoutId, status: 'pending', step: 'initiated', source: 'execute' })
    // This process commits the next change, then "dies" in its hook: the events never fire.
    const dying = dyingLedger(db)
    void dying.apply({ payoutId, status: 'processing', step: 'collected', source: 'webhook' })
    const committed = await eventually('the change to commit', () =>
      PayoutEvent.query().where('payout_uuid', payoutId).where('step', 'collected').first()
    )
    // A stale observation in between changes nothing and has nothing to notify.
    await live.apply({ payoutId, status: 'processing', step: 'compliance_cleared', source: 'poll' })

    const { ledger: restarted, fired } = restartedLedger(db)
    assert.equal(await restarted.renotify(), 0, 'young rows are left to the process writing them')
    assert.equal(await restarted.renotify({ olderThanMs: 0 }), 0, 'leased by the dead process')
    await leasesExpired()
    assert.equal(await restarted.renotify({ olderThanMs: 0 }), 1)
    assert.lengthOf(fired, 1)
    assert.deepInclude(toChangedEvent(fired[0]), {
      eventId: String(committed.id),
      payoutId,
      status: 'processing',
      step: 'collected',
      previousStatus: 'pending',
      previousStep: 'initiated',
      source: 'webhook',
      completedAt: null,
    })
    assert.equal(await restarted.renotify({ olderThanMs: 0 }), 0, 'notified once')
    assert.lengthOf(await PayoutEvent.query().whereNull('notified_at'), 0)
  })

  test('a placeholder merge committed by a process that died fires later, moving from where the UUID row was', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'regressions')
    const payoutId = '0f4c3f6e-1111-4a4a-8b8b-000000000002'
    const readId = 'po_0f4c3f6e00000002'
    const live = new PayoutLedger(db, { onChange: () => {} })
    await live.apply({ payoutId, status: 'pending', step: 'initiated', source: 'execute' })
    await live.apply({
      payoutId: readId,
      status: 'processing',
      step: 'converting',
      source: 'websocket',
    })
    // The reconciliation read links the two ids; its process dies in the merge's hook.
    const dying = dyingLedger(db)
    void dying.apply({ payoutId, readId, status: 'processing', step: 'collected', source: 'poll' })
    const fold = await eventually('the merge to commit', () =>
      PayoutEvent.query().where('payout_uuid', payoutId).where('event_type', 'merge').first()
    )

    const { ledger: restarted, fired } = restartedLedger(db)
    await leasesExpired()
    assert.equal(await restarted.renotify({ olderThanMs: 0 }), 1)
    assert.deepInclude(toChangedEvent(fired[0]), {
      eventId: String(fold.id),
      payoutId,
      readId,
      status: 'processing',
      step: 'converting',
      previousStatus: 'pending',
      previousStep: 'initiated',
      source: 'websocket',
    })
    assert.isFalse(fired[0].created)
  })

  test('a change of a placeholder whose process died is told later under its read id, even once merged', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'regressions')
    const payoutId = '0f4c3f6e-1111-4a4a-8b8b-000000000003'
    const readId = 'po_0f4c3f6e00000003'
    const live = new PayoutLedger(db, { onChange: () => {} })
    await live.apply({
      payoutId,
      status: 'pending',
      step: 'initiated',
      source: 'execute',
      fields: { ownerId: 'owner-1' },
    })
    // The read id's first sighting commits; its process dies before the events.
    const dying = dyingLedger(db)
    void dying.apply({
      payoutId: readId,
      status: 'processing',
      step: 'converting',
      source: 'webhook',
    })
    const sighting = await eventually('the sighting to commit', () =>
      PayoutEvent.query().where('payout_uuid', readId).first()
    )
    // Another process links the ids before the sweep comes round.
    await live.apply({ payoutId, readId, status: 'processing', step: 'collected', source: 'poll' })

    const { ledger: restarted, fired } = restartedLedger(db)
    await leasesExpired()
    assert.equal(await restarted.renotify({ olderThanMs: 0 }), 1)
    assert.deepInclude(toChangedEvent(fired[0]), {
      eventId: String(sighting.id),
      payoutId: readId,
      ownerId: null,
      status: 'processing',
      step: 'converting',
      previousStatus: null,
      previousStep: null,
      source: 'webhook',
    })
  })
})

test.group(`Chaos regressions | escrow detection (${TEST_DB})`, () => {
  test('a detection committed by a process that died before its events fires payouts:escrow_confirmed later, once', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setup(cleanup)
    const payoutId = '0f4c3f6e-2222-4a4a-8b8b-000000000002'
    const quoteId = '0f4c3f6e-3333-4a4a-8b8b-000000000003'
    await new PayoutLedger(db, { onChange: () => {} }).apply({
      payoutId,
      status: 'pending',
      source: 'execute',
      fields: { flow: 'stablecoin_to_fiat' },
    })
    await EscrowDeposit.create({ quoteId, payoutUuid: payoutId, state: 'awaiting_deposit' })
    // The detecting change commits with the deposit, then its process "dies" in the hook.
    const dying = dyingLedger(db)
    void dying.apply({ payoutId, status: 'processing', step: 'collected', source: 'webhook' })
    const deposit = await eventually('the detection to commit', () =>
      EscrowDeposit.query().where('quote_id', quoteId).where('state', 'confirmed').first()
    )
    // The restarted ledger tells each change with the deposit it confirmed.
    const fired: Array<EscrowEvent | null> = []
    const restarted = new PayoutLedger(db, {
      onChange: (_change, confirmed) => void fired.push(confirmed),
    })
    await leasesExpired()
    assert.equal(await restarted.renotify({ olderThanMs: 0 }), 1)
    assert.deepEqual(fired, [{ quoteId, payoutId, txHash: null }])
    assert.isNotNull(deposit.confirmedByEventId)
    // A later change of the same payout is no detection: nothing more to fire.
    await restarted.apply({ payoutId, status: 'completed', step: 'delivered', source: 'poll' })
    assert.deepEqual(fired, [{ quoteId, payoutId, txHash: null }, null])
  })
})

test.group(`Chaos regressions | executor (${TEST_DB})`, () => {
  test('storing the same stablecoin response twice keeps the recorded deposit', async ({
    assert,
    cleanup,
  }) => {
    const { db, emu, client, executor, executeWithUnseenDeposit } = await setup(cleanup)
    const { result, intent, txHash } = await executeWithUnseenDeposit()
    await new EscrowDeposits({ db, client }).record({ quoteId: result.quoteId, txHash })
    // The outcome is re-sent and stored again (as after a lost answer): the service replays it.
    intent.state = 'unknown'
    await intent.save()
    assert.deepInclude(await executor.recover({ olderThanMs: 0 }), { resent: 1, succeeded: 1 })
    const deposit = await EscrowDeposit.findByOrFail('quoteId', result.quoteId)
    assert.deepEqual([deposit.state, deposit.txHash], ['deposit_recorded', txHash])
    assert.lengthOf(emu.admin.payouts(), 1)
  })

  test('recovery leaves an intent this process is still sending alone', async ({
    assert,
    cleanup,
  }) => {
    const { emu, executor, stable } = await setup(cleanup)
    emu.admin.setFaults({ processingDelayMs: 500 })
    const sending = executor.execute(stable)
    await eventually('the request to reach the service', () => emu.state.idempotency.size > 0)
    assert.deepInclude(await executor.recover({ olderThanMs: 0 }), { resent: 0 })
    await sending
    const intent = await ExecutionIntent.firstOrFail()
    assert.deepEqual([intent.state, intent.attempts], ['succeeded', 1])
  })
})

test.group(`Chaos regressions | escrow fallback (${TEST_DB})`, () => {
  test('a confirmation a dead process left half-done is resumed after the wait', async ({
    assert,
    cleanup,
  }) => {
    const { db, emu, client, executeWithUnseenDeposit } = await setup(cleanup)
    const { result, txHash } = await executeWithUnseenDeposit()
    const confirmed: string[] = []
    const deposits = new EscrowDeposits({
      db,
      client,
      onConfirmed: (event) => void confirmed.push(event.quoteId),
    })
    const escrow = new EscrowFallback({ db, deposits })
    await deposits.record({
      quoteId: result.quoteId,
      txHash,
      confirmedAt: DateTime.now().minus({ minutes: 30 }),
    })
    const deposit = await EscrowDeposit.findByOrFail('quoteId', result.quoteId)
    deposit.merge({
      state: 'confirm_requested',
      confirmAttemptedAt: DateTime.now().minus({ minutes: 5 }),
    })
    await deposit.save()
    assert.deepInclude(await escrow.run(), { checked: 0 }, 'not before the wait')
    deposit.confirmAttemptedAt = DateTime.now().minus({ minutes: 11 })
    await deposit.save()
    assert.deepInclude(await escrow.run(), { checked: 1, confirmed: 1 })
    assert.equal(emu.admin.quote(result.quoteId)!.status, 'deposit_confirmed')
    assert.deepEqual(confirmed, [result.quoteId])
    assert.equal((await deposit.refresh()).state, 'confirmed')
  })

  test('overlapping runs (two instances, a run longer than its interval) confirm once', async ({
    assert,
    cleanup,
  }) => {
    const { db, client, stable, executeWithUnseenDeposit } = await setup(cleanup)
    const quotes: string[] = []
    for (let i = 0; i < 3; i++) {
      const { result, txHash } = await executeWithUnseenDeposit({ ...stable, amount: 100 + i })
      await new EscrowDeposits({ db, client }).record({
        quoteId: result.quoteId,
        txHash,
        confirmedAt: DateTime.now().minus({ minutes: 30 }),
      })
      quotes.push(result.quoteId)
    }
    // A slow read keeps both runs inside the same deposits at the same time.
    const slow = {
      getQuoteStatus: async (quoteId: string) => {
        await new Promise((resolve) => setTimeout(resolve, 50))
        return client.getQuoteStatus(quoteId)
      },
      confirmEscrowDeposit: client.confirmEscrowDeposit.bind(client),
    }
    const confirmed: string[] = []
    const instance = () =>
      new EscrowFallback({
        db,
        deposits: new EscrowDeposits({
          db,
          client: slow,
          onConfirmed: (e) => void confirmed.push(e.quoteId),
        }),
      })
    const runs = await Promise.all([instance().run(), instance().run(), instance().run()])
    const total = (key: 'checked' | 'confirmed') => runs.reduce((sum, run) => sum + run[key], 0)
    assert.deepEqual([total('checked'), total('confirmed')], [3, 3])
    assert.lengthOf(confirmed, 3)
    assert.sameMembers(confirmed, quotes)
  })
})

/**
 * The suite's database with a way to lose it for a moment, as the chaos suite's stall did:
 * PostgreSQL behind a TCP proxy that resets every connection and refuses new ones until
 * `back()`; SQLite write-locked by another process until `back()` (a write fails once the
 * driver's 5 s busy timeout has passed).
 */
async function losableDatabase(cleanup: (fn: () => Promise<void>) => void) {
  const base = connectionConfig('regressions') as any
  if (TEST_DB !== 'sqlite') {
    const proxy = new TcpProxy({ host: base.connection.host, port: base.connection.port })
    await proxy.start()
    cleanup(() => proxy.close())
    const connection = boundedConnection(base, { port: proxy.port, connectMs: 500 })
    const database = await setupDatabase(cleanup, 'regressions', { connection })
    return {
      ...database,
      lose: () => proxy.refuse(),
      // Back, as after a server restart: the pool's idle connections were reset with the
      // others, and a reset may reach an idle socket only after its next checkout. They are
      // replaced, as the plugin replaces them after a statement times out.
      back: async () => {
        await proxy.heal()
        dropIdleConnections(database.db.connection(), new Error('the database restarted'))
      },
    }
  }
  const database = await setupDatabase(cleanup, 'regressions')
  let holder: ReturnType<typeof spawn> | undefined
  cleanup(async () => void holder?.kill('SIGKILL'))
  return {
    ...database,
    async lose() {
      holder = spawn(
        process.execPath,
        [
          '-e',
          `const db = new (require('better-sqlite3'))(process.argv[1]);
           db.exec('BEGIN IMMEDIATE'); console.log('locked');
           process.stdin.once('data', () => { db.exec('COMMIT'); db.close(); process.exit(0) })`,
          base.connection.filename,
        ],
        { stdio: ['pipe', 'pipe', 'inherit'] }
      )
      holder.stdout!.setEncoding('utf8')
      const [said] = await once(holder.stdout!, 'data')
      if (!String(said).includes('locked')) throw new Error(`lock holder said ${said}`)
    },
    async back() {
      const exited = once(holder!, 'exit')
      holder!.stdin!.write('commit\n')
      await exited
    },
  }
}

test.group(`Chaos regressions | the database lost right after an event fired (${TEST_DB})`, () => {
  test('a change whose notified mark was lost is marked later, not fired again by its process', async ({
    assert,
    cleanup,
  }) => {
    const database = await losableDatabase(cleanup)
    const payoutId = '0f4c3f6e-1111-4a4a-8b8b-000000000009'
    const fired: number[] = []
    const ledger = new PayoutLedger(database.db, {
      onChange: async (change) => {
        fired.push(change.eventId)
        // The listeners ran; the database goes away before the change is marked notified.
        if (fired.length === 1) await database.lose()
      },
    })
    await ledger.apply({ payoutId, status: 'pending', step: 'initiated', source: 'execute' })
    await database.back()
    assert.lengthOf(await PayoutEvent.query().whereNull('notified_at'), 1, 'the mark was lost')

    assert.equal(await ledger.renotify({ olderThanMs: 0 }), 0, 'nothing left to fire')
    assert.lengthOf(fired, 1, 'fired once')
    assert.lengthOf(await PayoutEvent.query().whereNull('notified_at'), 0, 'marked')
  }).timeout(30_000)

  test('a confirmation whose mark was lost is marked later, not announced again by its process', async ({
    assert,
    cleanup,
  }) => {
    const database = await losableDatabase(cleanup)
    const { db, client, executeWithUnseenDeposit } = await setup(cleanup, database)
    const { result, txHash } = await executeWithUnseenDeposit()
    const confirmed: string[] = []
    const deposits = new EscrowDeposits({
      db,
      client,
      onConfirmed: async (event) => {
        confirmed.push(event.quoteId)
        // Announced; the database goes away before the deposit is marked confirmed.
        if (confirmed.length === 1) await database.lose()
      },
    })
    // An interrupted attempt is resumed at once.
    const escrow = new EscrowFallback({ db, deposits, confirmAfterMinutes: 0 })
    await deposits.record({ quoteId: result.quoteId, txHash })
    const error = await escrow.run().then(
      () => null,
      (caught) => caught
    )
    assert.instanceOf(error, Error, 'the run failed to mark the deposit')
    await database.back()
    const deposit = await EscrowDeposit.findByOrFail('quoteId', result.quoteId)
    assert.equal(deposit.state, 'confirm_requested')

    // Resumed: the service has the deposit now.
    assert.deepInclude(await escrow.run(), { checked: 1, detected: 1 })
    assert.deepEqual(confirmed, [result.quoteId], 'announced once')
    assert.equal((await deposit.refresh()).state, 'confirmed')
  }).timeout(30_000)
})
