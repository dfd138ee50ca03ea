import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { request } from 'undici'
import PayoutsCoverage from '../../commands/payouts_coverage.ts'
import PayoutsDeliveries from '../../commands/payouts_deliveries.ts'
import PayoutsReplay from '../../commands/payouts_replay.ts'
import PayoutsWebhooksCreate from '../../commands/payouts_webhooks_create.ts'
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
