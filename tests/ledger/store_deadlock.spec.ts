import { test } from '@japa/runner'
import { DateTime } from 'luxon'
import { boundedTransaction } from '../../src/database/deadline.ts'
import { tableNames } from '../../src/database/schema.ts'
import { ExecutionIntents, storedWithRetries } from '../../src/ledger/execution_intents.ts'
import { PayoutExecutor } from '../../src/ledger/payout_executor.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { insertPendingPayouts } from '../../src/ledger/payout_rows.ts'
import { ExecutionIntent, Payout } from '../../src/models/main.ts'
import { executeBodies, startEmulator, testClient } from '../emulator/helpers.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'
import { nextWaiter, ONE_WRITER, otherTransaction } from '../helpers/deadlocks.ts'

/**
 * The transaction that stores an execute's answer (the payout the service made, the intent
 * `succeeded`) chosen as a deadlock's victim, as InnoDB chose it between two instances of the
 * example app: it is run again, and the execute answers the payout. Before, the execute failed
 * with E_PAYOUTS_EXECUTE_NOT_STORED (503) for a payout the service had made.
 *
 * The deadlock is real (tests/helpers/deadlocks.ts): once the service has answered, another
 * instance's transaction holds the intent's row (a recovery pass reading it for update) and
 * has written more rows; the plugin's store inserts the payout, then waits for the intent;
 * the other transaction then inserts the same payout, waiting for the plugin's.
 */

/** Payout rows the other transaction writes first, so that it weighs more than the store. */
const FILLERS = Array.from({ length: 10 }, (_, index) => ({
  payoutId: `z-filler-${index}`,
  source: 'webhook' as const,
}))

/** The execute path's intents on `db`, unbounded, the window of a day. */
function intentsOn(db: Awaited<ReturnType<typeof setupDatabase>>['db']) {
  return new ExecutionIntents({
    db,
    account: 'main',
    transactionTimeoutMs: 0,
    idempotencyWindowMs: 24 * 3_600_000,
    safetyMarginMs: 3_600_000,
    now: () => DateTime.utc(),
  })
}

/** A deadlock's victim, as the driver reports it (MySQL's code; PostgreSQL's is 40P01). */
const deadlock = () =>
  Object.assign(new Error('Deadlock found when trying to get lock'), {
    code: 'ER_LOCK_DEADLOCK',
    errno: 1213,
  })

async function setup(cleanup: (fn: () => Promise<void>) => void) {
  const { db, prefix } = await setupDatabase(cleanup, 'store-deadlock')
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const client = testClient(cleanup, emu)
  const created: string[] = []
  const ledger = new PayoutLedger(db, {
    onChange: (change) => void (change.created && created.push(change.payout.payoutUuid)),
  })
  const executor = new PayoutExecutor({ db, ledger, client })
  const tables = tableNames(prefix)

  /**
   * Once the service has answered under `key`: the other transaction writes its fillers and
   * locks the intent's row. Resolves with it when the plugin's store waits for that row.
   */
  const holdIntent = async (key: string) => {
    const other = await otherTransaction(db, cleanup)
    await insertPendingPayouts(other.trx, FILLERS, ledger.account)
    await other.trx
      .knexQuery()
      .table(tables.executionIntents)
      .where('idempotency_key', key)
      .forUpdate()
    return other
  }
  return { db, emu, client, ledger, executor, created, holdIntent }
}

/**
 * Makes the other transaction ask for `payoutId`, which the plugin's store inserted: a
 * deadlock. Its insert goes through only once the store was rolled back as the victim (else
 * each waits for the other for ever); then it lets go of everything.
 */
async function closeTheCycle(
  db: Awaited<ReturnType<typeof setup>>['db'],
  other: Awaited<ReturnType<Awaited<ReturnType<typeof setup>>['holdIntent']>>,
  payoutId: string,
  account: string,
  settled: () => boolean
) {
  if (!(await nextWaiter(db, other, new Set(), settled))) {
    throw new Error('the store never waited for the intent: the scenario did not build')
  }
  await insertPendingPayouts(other.trx, [{ payoutId, source: 'webhook' }], account).catch(
    (error) => {
      throw new Error(`the other transaction was the victim, not the store: ${error.code}`)
    }
  )
  await other.trx.rollback()
}

test.group(`Ledger | the store of an execute as a deadlock's victim (${TEST_DB})`, () => {
  test('an execute whose store is rolled back as the victim is stored again and answered', async ({
    assert,
    cleanup,
  }) => {
    const { db, emu, client, ledger, executor, created, holdIntent } = await setup(cleanup)
    const key = `deadlock-${Date.now()}`
    let cycle: Promise<void> | undefined
    let done = false
    const execute = client.execute.bind(client)
    client.execute = async (input, options) => {
      const result = await execute(input, options)
      const other = await holdIntent(options!.idempotencyKey!)
      cycle = closeTheCycle(db, other, result.payoutId, ledger.account, () => done)
      return result
    }

    const executing = executor.execute(executeBodies(emu).fiat, {
      idempotencyKey: key,
      ownerId: 'tenant-1',
    })
    const outcome = await executing.finally(() => (done = true))
    await cycle

    assert.equal(outcome.intent.state, 'succeeded')
    assert.equal(outcome.payout.payoutUuid, outcome.result.payoutId)
    const intent = await ExecutionIntent.findByOrFail('idempotencyKey', key)
    assert.deepEqual([intent.state, intent.payoutUuid], ['succeeded', outcome.result.payoutId])
    const stored = await Payout.query().where('payout_uuid', outcome.result.payoutId)
    assert.lengthOf(stored, 1)
    assert.equal(stored[0].ownerId, 'tenant-1')
    assert.lengthOf(await Payout.query().where('payout_uuid', 'like', 'z-filler-%'), 0)
    assert.lengthOf(emu.admin.payouts(), 1, 'the service made one payout')
    assert.deepEqual(created, [outcome.result.payoutId], 'one created change')
  })
    .skip(TEST_DB === 'sqlite', ONE_WRITER)
    .timeout(30_000)

  test("a batch's chunk whose store is rolled back as the victim is stored again and answered", async ({
    assert,
    cleanup,
  }) => {
    const { db, emu, client, ledger, executor, created, holdIntent } = await setup(cleanup)
    const { fiat } = executeBodies(emu)
    let cycle: Promise<void> | undefined
    let done = false
    const executeBatch = client.executeBatch.bind(client)
    client.executeBatch = async (body, options) => {
      const answer = await executeBatch(body, options)
      const other = await holdIntent(options!.idempotencyKey!)
      const first = answer.find((row) => row.success)!
      const payoutId = String((first as { data: Record<string, unknown> }).data.payoutId)
      cycle = closeTheCycle(db, other, payoutId, ledger.account, () => done)
      return answer
    }

    const batch = await executor
      .executeBatch([fiat, { ...fiat, amount: 101 }], { ownerId: 'tenant-1' })
      .finally(() => (done = true))
    await cycle

    assert.isTrue(batch.complete)
    assert.equal(batch.counts.created, 2)
    const [intent] = batch.intents
    await intent.refresh()
    assert.equal(intent.state, 'succeeded')
    const made = emu.admin.payouts().map((payout) => payout.payoutId)
    assert.lengthOf(made, 2, 'the service made two payouts')
    const stored = await Payout.query().whereIn('payout_uuid', made)
    assert.lengthOf(stored, 2)
    assert.sameMembers(created, made, 'one created change each')
  })
    .skip(TEST_DB === 'sqlite', ONE_WRITER)
    .timeout(30_000)

  test('a store rolled back after it saved the intent saves it again on its next run', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setup(cleanup)
    const intent = await ExecutionIntent.create({
      idempotencyKey: `saved-then-rolled-back-${Date.now()}`,
      flow: 'fiat',
      requestBody: {},
      bodyHash: 'x'.repeat(64),
      state: 'pending',
      attempts: 1,
    } as Partial<ExecutionIntent>)
    const client = db.connection()
    let runs = 0
    await storedWithRetries(client, intent, 'test store', () =>
      boundedTransaction(
        client,
        { timeoutMs: 0, what: 'test store', writes: Payout.table },
        async (trx) => {
          runs++
          intent.useTransaction(trx)
          intent.state = 'succeeded'
          await intent.save()
          // This run is rolled back after the intent's UPDATE went through.
          if (runs === 1) throw deadlock()
        }
      )
    )
    assert.equal(runs, 2)
    const row = await ExecutionIntent.findOrFail(intent.id)
    assert.equal(row.state, 'succeeded', 'the second run wrote the intent')
  })

  test("the intents' writes (an insert, a conditional UPDATE as a claim makes, a save) rolled back as a deadlock's victim run again", async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setup(cleanup)
    const intents = intentsOn(db)
    // The insert: its first run is rolled back after its INSERT; the second stores one row.
    let runs = 0
    const intent = await intents.write('test intent', async (trx) => {
      runs++
      const created = await ExecutionIntent.create(
        {
          idempotencyKey: `deadlocked-insert-${Date.now()}`,
          flow: 'fiat',
          requestBody: {},
          bodyHash: 'x'.repeat(64),
          state: 'pending',
          attempts: 1,
        } as Partial<ExecutionIntent>,
        { client: trx }
      )
      if (runs === 1) throw deadlock()
      return created
    })
    assert.equal(runs, 2)
    assert.lengthOf(await ExecutionIntent.all(), 1, 'the rolled-back run stored nothing')

    // The save: its first run is rolled back after the UPDATE went through.
    const save = intent.save.bind(intent)
    let saves = 0
    intent.save = async () => {
      await save()
      if (++saves === 1) throw deadlock()
      return intent
    }
    intent.state = 'unknown'
    await intents.save(intent, 'test save')
    assert.equal(saves, 2)
    assert.equal((await ExecutionIntent.findOrFail(intent.id)).state, 'unknown')
    intent.save = save

    // A conditional UPDATE through the same write, as a claim of an attempt makes: counted
    // once, by the run that committed.
    const client = db.connection()
    const update = client.getWriteClient()
    let claims = 0
    const fail = (query: { sql: string }) => {
      if (/^update/i.test(query.sql) && query.sql.includes('attempts')) claims++
    }
    update.on('query', fail)
    runs = 0
    const claimed = await intents.write('test claim', async (trx) => {
      runs++
      const changed = await trx
        .from(ExecutionIntent.table)
        .where('id', intent.id)
        .where('attempts', 1)
        .update({ attempts: 2 })
      if (runs === 1) throw deadlock()
      return changed
    })
    update.off('query', fail)
    assert.equal(runs, 2)
    assert.equal(claims, 2, 'the UPDATE ran twice, the first rolled back')
    assert.equal((await ExecutionIntent.findOrFail(intent.id)).attempts, 2)
    assert.deepEqual([claimed].flat().map(Number), [1])
  })

  test("an attempt's claim (a batch chunk's, a resumed intent's) that the database rolls back as a deadlock's victim is counted once", async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'claim-deadlock')
    const intents = intentsOn(db)
    const intent = await ExecutionIntent.create({
      idempotencyKey: `claim-deadlock-${Date.now()}`,
      flow: 'fiat',
      requestBody: {},
      bodyHash: 'x'.repeat(64),
      state: 'pending',
      attempts: 0,
    } as Partial<ExecutionIntent>)
    const fired = await deadlockOnce(db, cleanup, ExecutionIntent.table)

    assert.isTrue(await intents.countAttempt(intent, DateTime.utc()), 'claimed')
    assert.equal(await fired(), 2, 'the claim ran twice: the first was the victim')
    assert.equal(intent.attempts, 1)
    assert.equal((await ExecutionIntent.findOrFail(intent.id)).attempts, 1, 'counted once')
  })
    .skip(TEST_DB === 'sqlite', ONE_WRITER)
    .timeout(30_000)
})

/**
 * Makes the database itself roll back the first UPDATE that counts an attempt on `table` as
 * a deadlock's victim, with its own error (PostgreSQL's 40P01, MySQL's 1213): a trigger
 * raises it once, counted where a rollback does not undo the count (a PostgreSQL sequence, a
 * MyISAM table). Returns how many times the trigger saw such an UPDATE.
 */
async function deadlockOnce(
  db: Awaited<ReturnType<typeof setup>>['db'],
  cleanup: (fn: () => Promise<void>) => void,
  table: string
): Promise<() => Promise<number>> {
  const client = db.connection()
  const name = `${table}_deadlock_once`
  if (TEST_DB === 'pg') {
    await client.rawQuery(`CREATE SEQUENCE ${name}`)
    await client.rawQuery(`
      CREATE FUNCTION ${name}() RETURNS trigger AS $$ BEGIN
        IF NEW.attempts <> OLD.attempts AND nextval('${name}') = 1 THEN
          RAISE EXCEPTION 'deadlock detected' USING ERRCODE = '40P01';
        END IF;
        RETURN NEW;
      END $$ LANGUAGE plpgsql`)
    await client.rawQuery(
      `CREATE TRIGGER ${name} BEFORE UPDATE ON ${table} FOR EACH ROW EXECUTE FUNCTION ${name}()`
    )
    cleanup(async () => {
      await client.rawQuery(`DROP TRIGGER IF EXISTS ${name} ON ${table}`)
      await client.rawQuery(`DROP FUNCTION IF EXISTS ${name}()`)
      await client.rawQuery(`DROP SEQUENCE IF EXISTS ${name}`)
    })
    return async () => {
      const { rows } = await client.rawQuery(`SELECT last_value, is_called FROM ${name}`)
      return rows[0].is_called ? Number(rows[0].last_value) : 0
    }
  }
  await client.rawQuery(`CREATE TABLE ${name} (n INT NOT NULL) ENGINE = MyISAM`)
  await client.rawQuery(`INSERT INTO ${name} (n) VALUES (0)`)
  await client.rawQuery(`
    CREATE TRIGGER ${name} BEFORE UPDATE ON ${table} FOR EACH ROW
    BEGIN
      IF NEW.attempts <> OLD.attempts THEN
        UPDATE ${name} SET n = n + 1;
        IF (SELECT n FROM ${name}) = 1 THEN
          SIGNAL SQLSTATE '40001'
            SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found when trying to get lock';
        END IF;
      END IF;
    END`)
  cleanup(async () => {
    await client.rawQuery(`DROP TRIGGER IF EXISTS ${name}`)
    await client.rawQuery(`DROP TABLE IF EXISTS ${name}`)
  })
  return async () => {
    const [rows] = await client.rawQuery(`SELECT n FROM ${name}`)
    return Number(rows[0].n)
  }
}
