import { randomUUID } from 'node:crypto'
import { tracingChannel } from 'node:diagnostics_channel'
import { test } from '@japa/runner'
import { request } from 'undici'
import type { Database } from '@adonisjs/lucid/database'
import { CHANNEL_NAMES } from '../../src/tracing/channels.ts'
import { signPayload } from '../../src/signature/main.ts'
import { isDatabaseError, safeError } from '../../src/safe_error.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startAppOnEmulator, startHttpApp } from '../helpers/http_app.ts'
import { fiatBody } from '../emulator/helpers.ts'

/**
 * A trigger that fails the statements `when` matches with "database is locked", as a busy or
 * timed-out database would; knex then writes the statement with its values into the error.
 */
async function failingTrigger(
  db: Database,
  table: string,
  event: 'INSERT' | 'UPDATE',
  cleanup: (fn: () => Promise<void>) => void
) {
  const name = `boom_${randomUUID().slice(0, 8)}`
  if (TEST_DB === 'pg') {
    await db.rawQuery(
      `CREATE FUNCTION ${name}() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'database is locked'; END $$ LANGUAGE plpgsql`
    )
    await db.rawQuery(
      `CREATE TRIGGER ${name} BEFORE ${event} ON ${table} FOR EACH ROW EXECUTE FUNCTION ${name}()`
    )
    cleanup(async () => {
      await db.rawQuery(`DROP TRIGGER IF EXISTS ${name} ON ${table}`)
      await db.rawQuery(`DROP FUNCTION IF EXISTS ${name}()`)
    })
  } else if (TEST_DB === 'mysql') {
    await db.rawQuery(
      `CREATE TRIGGER ${name} BEFORE ${event} ON ${table} FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'database is locked'`
    )
    cleanup(async () => void (await db.rawQuery(`DROP TRIGGER IF EXISTS ${name}`)))
  } else {
    await db.rawQuery(
      `CREATE TRIGGER ${name} BEFORE ${event} ON ${table} BEGIN SELECT RAISE(ABORT, 'database is locked'); END`
    )
    cleanup(async () => void (await db.rawQuery(`DROP TRIGGER IF EXISTS ${name}`)))
  }
}

test.group('Secrets | safeError', () => {
  test('a database error keeps its class and code, never its statement or its values', ({
    assert,
  }) => {
    const knexSqlite = Object.assign(
      new Error(
        "insert into `svc_webhook_deliveries` (`raw_body`, `signature_header`) values (X'7b7d', 't=1,v1=abcdef') - SQLITE_BUSY: database is locked"
      ),
      { code: 'SQLITE_BUSY' }
    )
    const mysql = Object.assign(new Error("Duplicate entry 'order-SECRET-1' for key 'x'"), {
      code: 'ER_DUP_ENTRY',
      sql: "insert into intents (key) values ('order-SECRET-1')",
      sqlMessage: "Duplicate entry 'order-SECRET-1' for key 'x'",
    })
    const pg = Object.assign(
      new Error(
        'update "intents" set "response" = $1 - canceling statement due to statement timeout'
      ),
      { code: '57014', severity: 'ERROR', routine: 'ProcessInterrupts', detail: 'order-SECRET-1' }
    )
    for (const error of [knexSqlite, mysql, pg]) {
      assert.isTrue(isDatabaseError(error))
      const safe = safeError(error)
      const printed = JSON.stringify(safe)
      assert.notInclude(printed, 'SECRET')
      assert.notInclude(printed, 'v1=')
      assert.notInclude(printed, 'insert into')
      assert.equal(safe.code, (error as { code: string }).code)
      assert.equal(safe.message, `database error ${safe.code}`)
      assert.notProperty(safe, 'stack')
    }
  })

  test('any other error keeps its message and stack; a thrown value that is no error says so', ({
    assert,
  }) => {
    const listener = new TypeError("Cannot read properties of undefined (reading 'id')")
    assert.isFalse(isDatabaseError(listener))
    assert.deepInclude(safeError(listener), {
      type: 'TypeError',
      message: "Cannot read properties of undefined (reading 'id')",
    })
    assert.isString(safeError(listener).stack)
    assert.deepEqual(safeError('boom'), {
      type: 'string',
      message: 'a value was thrown that is not an error',
    })
  })
})

test.group(`Secrets | database errors in messages and logs (${TEST_DB})`, () => {
  test('an execute whose answer cannot be stored: its error names no idempotency key, request or banking instructions', async ({
    assert,
    cleanup,
  }) => {
    const { emu, app } = await startAppOnEmulator(cleanup)
    const db = await app.app.container.make('lucid.db')
    await failingTrigger(db, `${app.prefix}execution_intents`, 'UPDATE', cleanup)
    const seen: unknown[] = []
    const channel = tracingChannel(CHANNEL_NAMES.execute)
    const subscriber = {
      start() {},
      end() {},
      asyncStart() {},
      asyncEnd() {},
      error: (context: { error?: unknown }) => void seen.push(context.error),
    }
    channel.subscribe(subscriber)
    cleanup(async () => void channel.unsubscribe(subscriber))

    const error = (await app.payouts
      .execute(fiatBody(emu) as never, { idempotencyKey: 'order-SECRET-777' })
      .then(
        () => null,
        (failure: Error) => failure
      )) as (Error & { code?: string }) | null
    assert.instanceOf(error, Error, 'the execute failed')
    if (!error) return
    assert.equal(error.code, 'E_PAYOUTS_EXECUTE_NOT_STORED')
    assert.strictEqual(seen[0], error, 'the error every subscriber of the channel gets')
    assert.include(error.message, 'database error')
    for (const secret of [
      'order-SECRET-777',
      'bankingInstructions',
      'accountNumber',
      'recipient',
    ]) {
      assert.notInclude(error.message, secret)
    }
  })

  test('a delivery that cannot be stored is logged without its signature or its body', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const logger = (await app.app.container.make('logger')) as unknown as Record<
      string,
      (...args: unknown[]) => unknown
    >
    const lines: string[] = []
    for (const level of ['error', 'warn']) {
      const original = logger[level].bind(logger)
      logger[level] = (...args: unknown[]) => {
        lines.push(JSON.stringify(args))
        return original(...args)
      }
    }
    const db = await app.app.container.make('lucid.db')
    await failingTrigger(db, `${app.prefix}webhook_deliveries`, 'INSERT', cleanup)
    const raw = JSON.stringify({
      type: 'payout.created',
      data: { payoutId: randomUUID(), marker: 'BODY-MARKER' },
    })
    const signature = signPayload('whsec_current_secret', Math.floor(Date.now() / 1000), raw)
    const response = await request(`${app.url}/webhooks/payouts`, {
      method: 'POST',
      body: raw,
      headers: {
        'content-type': 'application/json',
        'svc-signature': signature,
        'svc-delivery-id': `dlv_${randomUUID()}`,
        'svc-event-type': 'payout.created',
      },
    })
    await response.body.text()
    assert.equal(response.statusCode, 503)
    const logged = lines.join('\n')
    assert.include(logged, 'payouts webhook not stored')
    assert.include(logged, 'database error')
    assert.notInclude(logged, signature.split('v1=')[1], 'the signature')
    assert.notInclude(logged, 'BODY-MARKER', 'the body as text')
    assert.notInclude(
      logged,
      Buffer.from(raw).toString('base64').slice(0, 40),
      'the body as base64'
    )
    assert.notInclude(logged, Buffer.from(raw).toString('hex').slice(0, 40), 'the body as hex')
  })
})
