import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import PayoutsIntents from '../../commands/payouts_intents.ts'
import { dbDate } from '../../src/database/dates.ts'
import { executeBodies } from '../emulator/helpers.ts'
import { TEST_DB } from '../helpers/database.ts'
import { jsonOf, setup } from './helpers.ts'

test.group(`payouts:intents (${TEST_DB})`, () => {
  test('lists unknown intents, re-sends one with its key, records a human check, refuses bad input', async ({
    assert,
    cleanup,
  }) => {
    // No client retries: one refused attempt leaves the intent unknown at once.
    const { app, run, emu } = await setup(cleanup, { retry: { maxRetries: 0 } })
    emu.admin.setFaults({ errorRate: 1, pathPrefixes: ['/rfq/execute'] })
    for (const amount of [20, 21, 22]) {
      await assert.rejects(() => app.payouts.execute({ ...executeBodies(emu).stable, amount }))
    }
    emu.admin.setFaults({})
    const db = await app.app.container.make('lucid.db')
    const intents = `${app.prefix}execution_intents`

    const listed = await run(PayoutsIntents, ['--json'])
    listed.assertSucceeded()
    const [third, second, first] = jsonOf(listed)
    assert.deepInclude(first, { state: 'unknown', amount: 20, retryable: true })

    const retried = await run(PayoutsIntents, [`--retry=${first.id}`, '--json'])
    retried.assertSucceeded()
    assert.equal(jsonOf(retried).state, 'succeeded')
    const [row] = await db.from(intents).where('id', first.id)
    assert.equal(row.state, 'succeeded')
    assert.isNotNull(row.payout_uuid)

    const again = await run(PayoutsIntents, [`--retry=${first.id}`])
    again.assertFailed()
    again.assertLogMatches(new RegExp(`Intent ${first.id} is succeeded; only`))

    const resolved = await run(PayoutsIntents, [`--resolve=${second.id}`, '--as=not-sent'])
    resolved.assertSucceeded()
    resolved.assertLogMatches(new RegExp(`Intent ${second.id} is now failed`))

    // Past the service's replay window a re-send could pay twice: a human decides.
    await db
      .from(intents)
      .where('id', third.id)
      .update({ created_at: dbDate(db.connection(), new Date(Date.now() - 2 * 24 * 3600 * 1000)) })
    const late = await run(PayoutsIntents, [`--retry=${third.id}`])
    late.assertFailed()
    late.assertLogMatches(/past the service's replay window/)

    const remaining = await run(PayoutsIntents, ['--json'])
    assert.deepEqual(
      jsonOf(remaining).map((intent: { id: number }) => intent.id),
      [third.id]
    )

    for (const [args, reason] of [
      [['--retry=99999'], /No execution intent with id 99999; nothing re-sent/],
      [
        ['--retry=abc'],
        /--retry takes an intent id .*, its payout id \(a UUID\) or the app's idempotency key, not "abc"/,
      ],
      [[`--resolve=${third.id}`], /--resolve needs --as=sent or --as=not-sent/],
      [[`--resolve=${third.id}`, '--as=maybe'], /--resolve needs --as=sent/],
      [['--as=sent'], /--as goes with --resolve/],
      [['--state=lost'], /Unknown state "lost"/],
    ] as const) {
      const bad = await run(PayoutsIntents, [...args])
      bad.assertFailed()
      bad.assertLogMatches(reason)
    }
  })

  test("--resolve and --retry take the listing's id, the payout id or the app's key; an unknown or ambiguous one exits 1 and changes nothing", async ({
    assert,
    cleanup,
  }) => {
    const { app, run, emu } = await setup(cleanup, { retry: { maxRetries: 0 } })
    const db = await app.app.container.make('lucid.db')
    const intents = `${app.prefix}execution_intents`
    // Unknown intents (the service errs), each under a key of the app's: a UUID is a key too.
    const keys = ['order-0001', 'order-0002', 'order-0003', randomUUID(), 'order-0005']
    emu.admin.setFaults({ errorRate: 1, pathPrefixes: ['/rfq/execute'] })
    for (const [index, idempotencyKey] of keys.entries()) {
      const body = { ...executeBodies(emu).stable, amount: 30 + index }
      await assert.rejects(() => app.payouts.execute(body, { idempotencyKey }))
    }
    emu.admin.setFaults({})
    const rows = await db.from(intents).orderBy('id').select('id', 'idempotency_key')
    const idOf = (key: string) => Number(rows.find((row) => row.idempotency_key === key).id)
    const stateOf = async (id: number) => (await db.from(intents).where('id', id).first()).state
    const states = async () =>
      (await db.from(intents).orderBy('id').select('id', 'state')).map((row) => ({ ...row }))
    // An intent that holds a payout id (as one does once the service answered), and another
    // whose key is that same payout id: the UUID alone names both.
    const payoutId = keys[3]
    const holder = idOf('order-0005')
    await db.from(intents).where('id', holder).update({ payout_uuid: payoutId })

    const byId = await run(PayoutsIntents, [`--resolve=${idOf('order-0001')}`, '--as=sent'])
    byId.assertSucceeded()
    assert.equal(await stateOf(idOf('order-0001')), 'succeeded')

    const byKey = await run(PayoutsIntents, ['--resolve', 'order-0002', '--as=not-sent', '--json'])
    byKey.assertSucceeded()
    assert.include(jsonOf(byKey), { id: idOf('order-0002'), state: 'failed' })
    assert.equal(await stateOf(idOf('order-0002')), 'failed')

    // A key matches as written: another case is another key.
    const before = await states()
    for (const [args, reason] of [
      [
        ['--resolve=ORDER-0003', '--as=sent'],
        /No execution intent with idempotency key "ORDER-0003"; nothing resolved/,
      ],
      [
        ['--resolve=order-9999', '--as=sent'],
        /No execution intent with idempotency key "order-9999"; nothing resolved/,
      ],
      [['--resolve=99999', '--as=sent'], /No execution intent with id 99999; nothing resolved/],
      [
        [`--resolve=${randomUUID()}`, '--as=sent'],
        /No execution intent with payout id .* or idempotency key/,
      ],
      [
        [`--resolve=${payoutId}`, '--as=sent'],
        new RegExp(
          `"${payoutId}" names 2 execution intents \\(intent ${idOf(payoutId)} by its idempotency key .*intent ${holder} by its payout id .*\\); nothing resolved\\. Say which: id:<id>, payout:<payout id> or key:<key>`
        ),
      ],
      [[`--retry=${payoutId}`], /names 2 execution intents .*; nothing re-sent/],
      [['--resolve=id:order-0003', '--as=sent'], /--resolve takes an intent id/],
      [['--resolve=order 3', '--as=sent'], /--resolve takes an intent id/],
    ] as const) {
      const refused = await run(PayoutsIntents, [...args])
      refused.assertFailed()
      assert.equal(refused.exitCode, 1)
      refused.assertLogMatches(reason)
    }
    assert.deepEqual(await states(), before, 'nothing changed')

    // A key is unique within its account only: another account's intent is never found.
    await db.from(intents).where('id', idOf('order-0003')).update({ account: 'eu' })
    const other = await run(PayoutsIntents, ['--resolve=order-0003', '--as=sent'])
    other.assertFailed()
    other.assertLogMatches(/No execution intent with idempotency key "order-0003"/)
    assert.equal(await stateOf(idOf('order-0003')), 'unknown')

    // Said which, each resolves its own.
    const byPayout = await run(PayoutsIntents, [
      `--resolve=payout:${payoutId.toUpperCase()}`,
      '--as=sent',
    ])
    byPayout.assertSucceeded()
    byPayout.assertLogMatches(
      new RegExp(`Intent ${holder} is now succeeded \\(payout ${payoutId}\\)`)
    )
    assert.equal(await stateOf(idOf(payoutId)), 'unknown')
    const byNamedKey = await run(PayoutsIntents, [`--retry=key:${payoutId}`, '--json'])
    byNamedKey.assertSucceeded()
    assert.include(jsonOf(byNamedKey), { id: idOf(payoutId), state: 'succeeded' })
  })

  test('--batch <key> lists the chunks of a batch from the ledger; an unknown key exits 1', async ({
    assert,
    cleanup,
  }) => {
    const { app, run, emu } = await setup(cleanup)
    const { fiat } = executeBodies(emu)
    // 150 rows, 2 of chunk 0 naming a recipient the service does not know: it refuses them.
    const unknown = (index: number) => `00000000-0000-4000-8000-${String(index).padStart(12, '0')}`
    const rows = Array.from({ length: 150 }, (_, index) => ({
      ...fiat,
      amount: 100 + index,
      ...(index === 3 || index === 40 ? { recipientId: unknown(index) } : {}),
    }))
    const key = 'friday-2026-11-27'
    const batch = await app.payouts.executeBatch(rows, { idempotencyKey: key })
    assert.isTrue(batch.complete)

    const listed = await run(PayoutsIntents, [`--batch=${key}`, '--json'])
    listed.assertSucceeded()
    const view = jsonOf(listed)
    assert.containsSubset(view, {
      key,
      complete: true,
      counts: { created: 148, refused: 2 },
      chunks: [
        { chunk: 0, state: 'succeeded', rows: 100, created: 98, refused: 2, open: 0, attempts: 1 },
        { chunk: 1, state: 'succeeded', rows: 50, created: 50, refused: 0, open: 0, attempts: 1 },
      ],
    })
    assert.deepEqual(
      view.chunks.map((chunk: { intentId: number }) => chunk.intentId),
      batch.intents.map((intent) => intent.id)
    )
    assert.notInclude(JSON.stringify(view), `${key}-c0`, "a chunk's key is never shown")

    const human = await run(PayoutsIntents, [`--batch=${key}`])
    human.assertSucceeded()
    human.assertLogMatches(
      /Batch friday-2026-11-27: 2 chunk\(s\) stored, 148 created, 2 refused, 0 open: complete/
    )

    const missing = await run(PayoutsIntents, ['--batch=no-such-batch'])
    missing.assertFailed()
    assert.equal(missing.exitCode, 1)
    missing.assertLogMatches(
      /Could not list the batch: No batch with key "no-such-batch" in the ledger: none of its chunks is stored/
    )
    const missingJson = await run(PayoutsIntents, ['--batch=no-such-batch', '--json'])
    missingJson.assertFailed()
    assert.match(jsonOf(missingJson).error.message, /No batch with key "no-such-batch"/)

    for (const [args, reason] of [
      [[`--batch=${key}`, '--retry=1'], /--batch lists one batch: give it alone/],
      [['--batch=a b'], /--batch takes a batch key/],
    ] as const) {
      const bad = await run(PayoutsIntents, [...args])
      bad.assertFailed()
      bad.assertLogMatches(reason)
    }
  })
})
