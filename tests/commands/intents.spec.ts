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
      [['--retry=abc'], /--retry takes an intent id/],
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
})
