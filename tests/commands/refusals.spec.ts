import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { request } from 'undici'
import PayoutsCoverage from '../../commands/payouts_coverage.ts'
import PayoutsDeliveries from '../../commands/payouts_deliveries.ts'
import PayoutsIntents from '../../commands/payouts_intents.ts'
import PayoutsPrune from '../../commands/payouts_prune.ts'
import PayoutsReplay from '../../commands/payouts_replay.ts'
import PayoutsWebhooksCreate from '../../commands/payouts_webhooks_create.ts'
import PayoutsWebhooksDelete from '../../commands/payouts_webhooks_delete.ts'
import PayoutsWebhooksRotateSecret from '../../commands/payouts_webhooks_rotate_secret.ts'
import PayoutsWork from '../../commands/payouts_work.ts'
import { dbDate } from '../../src/database/dates.ts'
import { signPayload } from '../../src/signature/main.ts'
import { TEST_DB } from '../helpers/database.ts'
import { jsonOf, setup } from './helpers.ts'

/** Stores one authentic delivery under `deliveryId` and processes the inbox. */
async function storeDelivery(
  app: { url: string; payouts: any },
  deliveryId: string,
  raw = JSON.stringify({ type: 'payout.created', data: { payoutId: randomUUID() } })
) {
  const response = await request(`${app.url}/webhooks/payouts`, {
    method: 'POST',
    body: raw,
    headers: {
      'content-type': 'application/json',
      'svc-signature': signPayload('whsec_current_secret', Math.floor(Date.now() / 1000), raw),
      'svc-delivery-id': deliveryId,
    },
  })
  await response.body.dump()
  await app.payouts.drainInbox()
}

test.group(`Commands refuse bad input (${TEST_DB})`, () => {
  test('payouts:replay refuses an unknown --id, an unparsable date and processed rows without --force', async ({
    assert,
    cleanup,
  }) => {
    const { app, run } = await setup(cleanup)
    await storeDelivery(app, 'dlv_stored')

    const unknown = await run(PayoutsReplay, ['--id=dlv_stored', '--id=dlv_nope'])
    unknown.assertFailed()
    unknown.assertLogMatches(/No stored delivery with id dlv_nope; nothing replayed/)

    for (const flag of ['--since', '--until']) {
      const badDate = await run(PayoutsReplay, [`${flag}=yesterday`])
      badDate.assertFailed()
      badDate.assertLogMatches(new RegExp(`${flag} "yesterday" is not a date`))
    }

    const processed = await run(PayoutsReplay, ['--state=processed'])
    processed.assertFailed()
    processed.assertLogMatches(/only with --force; nothing replayed/)

    const json = await run(PayoutsReplay, ['--id=dlv_nope', '--json'])
    json.assertFailed()
    assert.match(jsonOf(json).error.message, /No stored delivery with id dlv_nope/)

    const forced = await run(PayoutsReplay, ['--state=processed', '--force', '--json'])
    forced.assertSucceeded()
    assert.deepInclude(jsonOf(forced), { requeued: 1, failing: 0 })
  })

  test('payouts:webhooks:create refuses a second active subscription to one URL unless --force', async ({
    assert,
    cleanup,
  }) => {
    const { run, emu } = await setup(cleanup)
    const url = 'https://hooks.example.com/webhooks/payouts'
    ;(await run(PayoutsWebhooksCreate, [`--url=${url}`])).assertSucceeded()

    const again = await run(PayoutsWebhooksCreate, [`--url=${url}`])
    again.assertFailed()
    again.assertLogMatches(/already delivers to .*Nothing created \(--force subscribes anyway\)/)
    assert.equal(emu.webhooks.subscriptions.size, 1)

    const forced = await run(PayoutsWebhooksCreate, [`--url=${url}`, '--force'])
    forced.assertSucceeded()
    assert.equal(emu.webhooks.subscriptions.size, 2)
  })

  test('a command that cannot reach the service says it retries, then names its base URL, as JSON with --json', async ({
    assert,
    cleanup,
  }) => {
    // Port 1 on loopback refuses connections: the request never leaves this machine.
    const baseUrl = 'http://127.0.0.1:1'
    const { run } = await setup(cleanup, { baseUrl, retry: { maxRetries: 1, baseDelayMs: 1 } })
    const failed = await run(PayoutsCoverage, ['--json'])
    failed.assertFailed()
    // The retry is announced on stderr, before the error.
    const logs = failed.logger.getLogs() as Array<{ message: string; stream: string }>
    const retry = logs.find((log) => /Retrying GET \S+ after \S+ \(retry 1/.test(log.message))
    assert.equal(retry?.stream, 'stderr')
    const { error } = jsonOf(failed)
    assert.equal(error.baseUrl, baseUrl)
    assert.include(error.message, `could not reach the Payout Service at ${baseUrl}`)
  })

  test('payouts:deliveries lists stored deliveries by state with their last error; bad input is refused', async ({
    assert,
    cleanup,
  }) => {
    const { app, run } = await setup(cleanup)
    await storeDelivery(app, 'dlv_fine')
    // Authentic but unparsable: dead-lettered with the parse error as its last error.
    await storeDelivery(app, 'dlv_broken', '{"type":"payout.created",')

    const dead = await run(PayoutsDeliveries, ['--json'])
    dead.assertSucceeded()
    const [row, ...others] = jsonOf(dead)
    assert.lengthOf(others, 0, 'processed rows are left out by default')
    assert.deepInclude(row, { deliveryId: 'dlv_broken', eventType: 'unknown', state: 'dead' })
    assert.isNotEmpty(row.lastError)

    const processed = await run(PayoutsDeliveries, ['--state=processed'])
    processed.assertSucceeded()
    processed.assertLogMatches(/dlv_fine/)

    const unknown = await run(PayoutsDeliveries, ['--state=broken'])
    unknown.assertFailed()
    unknown.assertLogMatches(/Unknown state "broken"/)
    const limit = await run(PayoutsDeliveries, ['--limit=0'])
    limit.assertFailed()
    limit.assertLogMatches(/--limit must be a positive whole number/)
  })
})

/** The lines a command logged, without the raw-mode logger's `[ red(error) ] ` tag. */
function logsOf(command: any): string[] {
  return command.logger
    .getLogs()
    .map((log: { message: string }) => log.message.replace(/^\[ \w+\(\w+\) \] /, ''))
}

/** The command failed with exactly one line, matching `reason` (the log is emptied after). */
function assertRefused(assert: any, command: any, reason: RegExp) {
  command.assertFailed()
  const logs = logsOf(command)
  assert.lengthOf(logs, 1, `one line, got ${JSON.stringify(logs)}`)
  assert.match(logs[0], reason)
  assert.notInclude(logs[0], '\n')
  command.logger.flushLogs()
}

test.group(`Commands refuse what they do not understand (${TEST_DB})`, () => {
  test('payouts:prune reads --dry-run=1/yes/true as a dry run, =0/no/false as none, and refuses any other value or a forgotten dash', async ({
    assert,
    cleanup,
  }) => {
    const { app, run } = await setup(cleanup)
    await storeDelivery(app, 'dlv_old')
    const db = await app.app.container.make('lucid.db')
    const deliveries = `${app.prefix}webhook_deliveries`
    const longAgo = dbDate(db.connection(), new Date(Date.now() - 400 * 24 * 3600 * 1000))
    await db.from(deliveries).update({ processed_at: longAgo })
    const stored = async () => Number((await db.from(deliveries).count('* as n'))[0].n)

    for (const value of ['1', 'yes', 'true', 'YES']) {
      const dry = await run(PayoutsPrune, [`--dry-run=${value}`])
      dry.assertSucceeded()
      dry.assertLogMatches(/Would remove 1 processed deliveries/)
      dry.logger.flushLogs()
      assert.equal(await stored(), 1, `--dry-run=${value} removed nothing`)
    }
    for (const args of [['--dry-run=maybe'], ['--dry-run=2'], ['--dead-letters=oui']]) {
      const flag = args[0].slice(2, args[0].indexOf('='))
      assertRefused(assert, await run(PayoutsPrune, args), new RegExp(`^--${flag} takes no value`))
      assert.equal(await stored(), 1, `${args[0]} removed nothing`)
    }
    for (const args of [
      ['dry-run'],
      ['dry-run', '--json'],
      ['--dry-run', 'now'],
      ['--json', 'dry-run'],
    ]) {
      const refused = await run(PayoutsPrune, args)
      refused.assertFailed()
      refused.assertLogMatches(/Unknown argument \\?"(dry-run|now)\\?".*Nothing done/)
      refused.logger.flushLogs()
      assert.equal(await stored(), 1, `${args.join(' ')} removed nothing`)
    }
    for (const value of ['0', 'no', 'false']) {
      const none = await run(PayoutsPrune, [`--dry-run=${value}`, '--json'])
      none.assertSucceeded()
      assert.deepInclude(jsonOf(none), { dryRun: false })
    }
    assert.equal(await stored(), 0, 'an explicit --dry-run=0 prunes')
  })

  test('a switch before an argument takes no value from it: --force <id>, --json <id>; =1 and --no-force=no are read, =maybe refused', async ({
    assert,
    cleanup,
  }) => {
    const { app, run, emu } = await setup(cleanup)
    const ids: string[] = []
    for (const name of ['a', 'b', 'c', 'd', 'e']) {
      ids.push((await app.payouts.webhooks.create({ url: `https://hooks.example.com/${name}` })).id)
    }
    const [forced, json, one, noForceNo, kept] = ids

    const deleted = await run(PayoutsWebhooksDelete, ['--force', forced])
    deleted.assertSucceeded()
    deleted.assertLogMatches(new RegExp(`Deleted ${forced} at the service`))
    assert.isFalse(emu.webhooks.subscriptions.has(forced))

    const asJson = await run(PayoutsWebhooksDelete, ['--json', '--force', json])
    asJson.assertSucceeded()
    assert.deepInclude(jsonOf(asJson), { id: json, deletedAtService: true })
    const rotated = await run(PayoutsWebhooksRotateSecret, ['--json', kept])
    rotated.assertSucceeded()
    assert.equal(jsonOf(rotated).id, kept)

    ;(await run(PayoutsWebhooksDelete, ['--force=1', one])).assertSucceeded()
    ;(await run(PayoutsWebhooksDelete, ['--no-force=no', noForceNo])).assertSucceeded()
    assert.isFalse(emu.webhooks.subscriptions.has(one))
    assert.isFalse(emu.webhooks.subscriptions.has(noForceNo))

    rotated.logger.flushLogs()
    for (const args of [
      ['--force=maybe', kept],
      ['--no-force=maybe', kept],
      ['--force=1', '--force=0', kept],
    ]) {
      const refused = await run(PayoutsWebhooksDelete, args)
      assertRefused(assert, refused, /^--(no-)?force (takes no value|is given both).*Nothing done$/)
    }
    const stray = await run(PayoutsWebhooksDelete, ['--force', kept, 'true'])
    assertRefused(assert, stray, /^Unknown argument "true"/)
    assert.isTrue(emu.webhooks.subscriptions.has(kept), 'a refused delete deletes nothing')
  })

  test('payouts:work refuses a poll interval or a stop bound setTimeout cannot keep, and arguments it does not take', async ({
    assert,
    cleanup,
  }) => {
    const { run } = await setup(cleanup)
    for (const [flag, min] of [
      ['poll-interval-ms', 50],
      ['stop-timeout-ms', 1],
    ] as const) {
      const values = ['0', '-5', '-1', '2147483648', '1.5', ...(min > 1 ? ['1', '49'] : [])]
      for (const value of values) {
        const refused = await run(PayoutsWork, [`--${flag}=${value}`])
        cleanup(() => refused.stop())
        assertRefused(
          assert,
          refused,
          new RegExp(`^--${flag} must be a whole number from ${min} to 2147483647, not "${value}"`)
        )
      }
    }
    const extra = await run(PayoutsWork, ['now'])
    cleanup(() => extra.stop())
    assertRefused(assert, extra, /^Unknown argument "now"/)
  })

  test("payouts:intents refuses what names no intent before any SQL, never sends an id beyond the ledger's range; a database error is told without SQL", async ({
    assert,
    cleanup,
  }) => {
    const { app, run } = await setup(cleanup)
    ;(await app.app.container.make('ace')).ui.logger.flushLogs()
    const statements: string[] = []
    const db = await app.app.container.make('lucid.db')
    db.connection()
      .getWriteClient()
      .on('query', (query: { sql: string }) => void statements.push(query.sql))
    for (const args of [
      ['--retry', '0'],
      ['--retry=-3'],
      ['--resolve=1.5', '--as=sent'],
      ['--resolve=id:2147483648', '--as=sent'],
    ]) {
      const refused = await run(PayoutsIntents, args)
      assertRefused(
        assert,
        refused,
        /^--(retry|resolve) takes an intent id \(the listing's Id, 1 to 2147483647\)/
      )
    }
    assert.deepEqual(statements, [], 'no statement was sent')
    // A number past the ids may be an app's key: looked up as a key alone, no id in the SQL.
    for (const [args, verb] of [
      [['--retry', '99999999999999999999'], 'Retry failed'],
      [['--resolve=2147483648', '--as=sent'], 'Resolve failed'],
    ] as const) {
      const refused = await run(PayoutsIntents, [...args])
      assertRefused(
        assert,
        refused,
        new RegExp(
          `^${verb}: No execution intent with idempotency key "\\d+" \\(an intent id is at most 2147483647\\); nothing`
        )
      )
    }
    assert.lengthOf(statements, 2)
    for (const statement of statements) assert.notMatch(statement, /"?id"? *=/)
    statements.length = 0

    // A real database error, reported by a command: its message, never the statement.
    app.payouts.prune = (async () => db.from(`${app.prefix}no_such_table`).select('id')) as any
    const failed = await run(PayoutsPrune, [])
    assertRefused(assert, failed, /^Pruning failed: the database refused the request: /)
    assert.notMatch(logsOf(failed)[0], /select|no_such_table"? *$|from/i)
    const json = await run(PayoutsPrune, ['--json'])
    json.assertFailed()
    assert.notMatch(jsonOf(json).error.message, /select .* from/i)
  })
})
