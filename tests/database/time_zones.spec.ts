import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import type { Database } from '@adonisjs/lucid/database'
import { DateTime } from 'luxon'
import { dbDate, fromDbDate } from '../../src/database/dates.ts'
import { tableNames } from '../../src/database/schema.ts'
import ExecutionIntent from '../../src/models/execution_intent.ts'
import { connectionConfig, setupDatabase, TEST_DB } from '../helpers/database.ts'
import { TS_HOOKS } from '../helpers/ts_hooks.ts'

const HOUR = 3_600_000
/** UTC+14 and UTC-11: a wall clock 25 hours apart, on the same day only for an hour. */
const KIRITIMATI = 'Pacific/Kiritimati'
const PAGO_PAGO = 'Pacific/Pago_Pago'

/** Runs the fixture under `zone` against the parent's database and tables; its JSON line. */
async function child(zone: string, role: 'peer' | 'prune', prefix: string, sqlite?: string) {
  const running = spawn(
    process.execPath,
    [TS_HOOKS, 'tests/database/fixtures/time_zone_child.ts'],
    {
      env: {
        ...process.env,
        TZ: zone,
        TZ_TEST_ROLE: role,
        TZ_TEST_PREFIX: prefix,
        ...(sqlite && { SVC_TEST_SQLITE: sqlite }),
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    }
  )
  let out = ''
  running.stdout.setEncoding('utf8')
  running.stdout.on('data', (chunk) => (out += chunk))
  const [code] = await once(running, 'exit')
  if (code !== 0) throw new Error(`the ${zone} ${role} child exited ${code}: ${out}`)
  return JSON.parse(out.trim().split('\n').at(-1)!)
}

/** Row counts of the inbox (by state), intents and payouts. */
async function counts(db: Database, prefix: string) {
  const t = tableNames(prefix)
  const client = db.connection()
  const rows = await client.from(t.webhookDeliveries).select('delivery_id', 'state')
  return {
    deliveries: rows.map((row: any) => `${row.delivery_id} ${row.state}`).sort(),
    intents: (await client.from(t.executionIntents).select('id')).length,
    payouts: (await client.from(t.payouts).select('id')).length,
  }
}

test.group(`Time zones (${TEST_DB})`, () => {
  test('dates are written and read in UTC whatever the process zone', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'time-zones')
    const client = db.connection()
    const at = DateTime.fromISO('2026-03-01T23:30:00+14:00', { setZone: true })
    assert.equal(dbDate(client, at).slice(0, 19).replace('T', ' '), '2026-03-01 09:30:00')
    assert.equal(dbDate(client, at.toJSDate()), dbDate(client, at.toUTC()))
    assert.equal(fromDbDate(client, '2026-03-01 09:30:00')!.toISO(), '2026-03-01T09:30:00.000Z')
    assert.isNull(fromDbDate(client, null))

    const intent = await ExecutionIntent.create({
      idempotencyKey: randomUUID(),
      flow: 'fiat',
      requestBody: {},
      bodyHash: 'x'.repeat(64),
      state: 'succeeded',
      attempts: 1,
      lastAttemptAt: at,
    })
    const row = await client
      .from(ExecutionIntent.table)
      .where('id', intent.id)
      .select('last_attempt_at')
      .first()
    assert.equal(fromDbDate(client, row.last_attempt_at)!.toMillis(), at.toMillis())
    const read = await ExecutionIntent.findOrFail(intent.id)
    assert.equal(read.lastAttemptAt!.toMillis(), at.toMillis())
    assert.equal(read.lastAttemptAt!.zoneName, 'UTC')
  })

  test("the host connection's mysql2 timezone and dateStrings settings read the same instant", async ({
    assert,
    cleanup,
  }) => {
    const { prefix } = await setupDatabase(cleanup, 'time-zones')
    const at = DateTime.utc(2026, 7, 4, 12, 34, 56)
    const intent = await ExecutionIntent.create({
      idempotencyKey: randomUUID(),
      flow: 'fiat',
      requestBody: {},
      bodyHash: 'x'.repeat(64),
      state: 'failed',
      attempts: 1,
      lastAttemptAt: at,
    })
    const base = connectionConfig('time-zones') as any
    const settings = [{ timezone: 'Z' }, { timezone: '+05:30' }, { dateStrings: true }, {}]
    for (const setting of settings) {
      const connection = { ...base, connection: { ...base.connection, ...setting } }
      const other = await setupDatabase(cleanup, 'time-zones', {
        prefix,
        createTables: false,
        connection,
      })
      const read = await ExecutionIntent.findOrFail(intent.id)
      assert.equal(read.lastAttemptAt!.toMillis(), at.toMillis(), JSON.stringify(setting))
      const raw = await other.db
        .connection()
        .from(ExecutionIntent.table)
        .where('id', intent.id)
        .first()
      const fromRaw = fromDbDate(other.db.connection(), raw.last_attempt_at)
      assert.equal(fromRaw!.toMillis(), at.toMillis(), JSON.stringify(setting))
    }
  })

  test('two processes at UTC+14 and UTC-11 on one database agree on every age', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'time-zones')
    const sqlite = (connectionConfig('time-zones').connection as { filename?: string }).filename
    const [east, west] = await Promise.all([
      child(KIRITIMATI, 'peer', prefix, sqlite),
      child(PAGO_PAGO, 'peer', prefix, sqlite),
    ])
    assert.deepEqual([east.offset, west.offset], [-14 * 60, 11 * 60], 'the zones took effect')

    for (const report of [east, west]) {
      const ages = Object.values(report.ages) as number[]
      assert.lengthOf(ages, 6, `${report.zone} read both peers' rows`)
      for (const [what, age] of Object.entries(report.ages) as Array<[string, number]>) {
        assert.isAtLeast(age, -2000, `${report.zone}: ${what} is ${age} ms old`)
        assert.isBelow(age, 30_000, `${report.zone}: ${what} is ${age} ms old`)
      }
      assert.isBelow(report.oldestPendingMs, 30_000, `${report.zone}: oldest pending age`)
      assert.isBelow(report.sinceLastEventMs, 30_000, `${report.zone}: last event age`)
      assert.equal(report.stuckPayouts, 0, `${report.zone}: stuck payouts`)
      assert.deepEqual(
        report.pruned,
        { dryRun: false, processedDeliveries: 0, deadLetters: 0, finishedIntents: 0 },
        `${report.zone} pruned nothing`
      )
    }
    for (const what of Object.keys(east.ages)) {
      assert.isBelow(Math.abs(east.ages[what] - west.ages[what]), 15_000, `ages of ${what}`)
    }
    assert.deepEqual(await counts(db, prefix), {
      deliveries: [
        `dead-${KIRITIMATI} dead`,
        `dead-${PAGO_PAGO} dead`,
        `pending-${KIRITIMATI} pending`,
        `pending-${PAGO_PAGO} pending`,
      ],
      intents: 2,
      payouts: 2,
    })
  }).timeout(90_000)

  test('payouts:prune --dead-letters at UTC+14 keeps a dead letter received 12 hours ago', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'time-zones')
    const client = db.connection()
    const t = tableNames(prefix)
    const ago = (ms: number) => dbDate(client, new Date(Date.now() - ms))
    const letter = (id: string, at: string) => ({
      delivery_id: id,
      event_type: 'payout.created',
      raw_body: 'e30=',
      source: 'webhook',
      state: 'dead',
      attempts: 1,
      received_at: at,
    })
    const intent = (state: string, at: string) => ({
      idempotency_key: randomUUID(),
      flow: 'fiat',
      request_body: '{}',
      body_hash: 'x'.repeat(64),
      state,
      attempts: 1,
      created_at: at,
      updated_at: at,
    })
    await client
      .table(t.webhookDeliveries)
      .multiInsert([letter('dead-12h', ago(12 * HOUR)), letter('dead-25h', ago(25 * HOUR))])
    await client
      .table(t.executionIntents)
      .multiInsert([intent('failed', ago(12 * HOUR)), intent('failed', ago(25 * HOUR))])

    const sqlite = (connectionConfig('time-zones').connection as { filename?: string }).filename
    const run = await child(KIRITIMATI, 'prune', prefix, sqlite)

    assert.equal(run.exitCode, 0)
    assert.deepEqual(run.summary, {
      dryRun: false,
      processedDeliveries: 0,
      deadLetters: 1,
      finishedIntents: 1,
    })
    const left = await counts(db, prefix)
    assert.deepEqual(left.deliveries, ['dead-12h dead'])
    const intents = await client.from(t.executionIntents).select('state')
    assert.deepEqual(
      intents.map((row: any) => row.state),
      ['failed']
    )
  }).timeout(60_000)
})
