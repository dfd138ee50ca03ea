import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { request } from 'undici'
import PayoutsConfirmEscrow from '../../commands/payouts_confirm_escrow.ts'
import PayoutsCoverage from '../../commands/payouts_coverage.ts'
import PayoutsReconcile from '../../commands/payouts_reconcile.ts'
import PayoutsRecipientsSync from '../../commands/payouts_recipients_sync.ts'
import PayoutsRecover from '../../commands/payouts_recover.ts'
import PayoutsReplay from '../../commands/payouts_replay.ts'
import PayoutsStatus from '../../commands/payouts_status.ts'
import PayoutsWebhooksCreate from '../../commands/payouts_webhooks_create.ts'
import PayoutsWebhooksDelete from '../../commands/payouts_webhooks_delete.ts'
import PayoutsWebhooksRedeliver from '../../commands/payouts_webhooks_redeliver.ts'
import PayoutsWebhooksList from '../../commands/payouts_webhooks_list.ts'
import PayoutsWebhooksRotateSecret from '../../commands/payouts_webhooks_rotate_secret.ts'
import { DateTime } from 'luxon'
import { signPayload } from '../../src/signature/main.ts'
import { executeBodies } from '../emulator/helpers.ts'
import { TEST_DB } from '../helpers/database.ts'
import { jsonOf, setup } from './helpers.ts'

/** POSTs a signed delivery to the app's webhook route; answers the status. */
async function deliver(url: string, secret: string, raw?: string) {
  const body = raw ?? JSON.stringify({ type: 'payout.created', data: { payoutId: randomUUID() } })
  const response = await request(`${url}/webhooks/payouts`, {
    method: 'POST',
    body,
    headers: {
      'content-type': 'application/json',
      'svc-signature': signPayload(secret, Math.floor(Date.now() / 1000), body),
      'svc-delivery-id': `dlv_${randomUUID()}`,
    },
  })
  await response.body.dump()
  return response.statusCode
}

/** Runs `fn` as if standard input were (or were not) a terminal. */
async function withStdinTTY<T>(isTTY: boolean, fn: () => Promise<T>): Promise<T> {
  const before = Object.getOwnPropertyDescriptor(process.stdin, 'isTTY')
  Object.defineProperty(process.stdin, 'isTTY', { value: isTTY, configurable: true })
  try {
    return await fn()
  } finally {
    if (before) Object.defineProperty(process.stdin, 'isTTY', before)
    else delete (process.stdin as { isTTY?: boolean }).isTTY
  }
}

test.group(`Commands (${TEST_DB})`, () => {
  test('payouts:coverage prints a table, or JSON with --json', async ({ assert, cleanup }) => {
    const { run } = await setup(cleanup)
    const table = await run(PayoutsCoverage)
    table.assertSucceeded()
    table.assertLogMatches(/JPY/)
    table.assertLogMatches(/Tokens: USDC, USDT/)
    const json = await run(PayoutsCoverage, ['--json'])
    assert.isAbove(jsonOf(json).fiat.length, 3)
  })

  test('webhooks: create keeps the secret encrypted, list shows it, rotate refuses the old one at once', async ({
    assert,
    cleanup,
  }) => {
    const { app, run, emu } = await setup(cleanup)
    const created = await run(PayoutsWebhooksCreate, [
      `--url=https://hooks.example.com/webhooks/payouts`,
      '--json',
    ])
    created.assertSucceeded()
    const subscription = jsonOf(created)
    assert.notProperty(subscription, 'secret')
    const plaintext = emu.webhooks.subscriptions.get(subscription.id)!.secret
    const db = await app.app.container.make('lucid.db')
    const [row] = await db.from(`${app.prefix}webhook_secrets`)
    assert.notInclude(row.secret, plaintext, 'stored encrypted')
    assert.include(await app.payouts.webhookSecrets(), plaintext)

    const list = await run(PayoutsWebhooksList, ['--json'])
    assert.deepInclude(jsonOf(list)[0], { id: subscription.id, secretStored: true })

    const rotated = await run(PayoutsWebhooksRotateSecret, [subscription.id])
    rotated.assertSucceeded()
    const fresh = emu.webhooks.subscriptions.get(subscription.id)!.secret
    assert.notEqual(fresh, plaintext)
    rotated.assertLogMatches(/previous secret is refused from now on/)
    // The service stopped signing with the old secret: so does the route.
    assert.equal(await deliver(app.url, plaintext), 400)
    assert.equal(await deliver(app.url, fresh), 200)

    const failed = await run(PayoutsWebhooksRotateSecret, ['sub_unknown'])
    failed.assertFailed()
    failed.assertLogMatches(/sub_unknown.*not stored in this app/)
  })

  test('payouts:webhooks:delete asks first, deletes at the service then here, and fails when it did nothing', async ({
    assert,
    cleanup,
  }) => {
    const { app, run, emu } = await setup(cleanup)
    const { id } = await app.payouts.webhooks.create({ url: 'https://hooks.example.com/w' })
    const secret = emu.webhooks.subscriptions.get(id)!.secret
    const ace = await app.app.container.make('ace')

    // Run without a terminal (cron, CI, `</dev/null`): nothing to ask on, so nothing done.
    const unattended = await withStdinTTY(false, () => run(PayoutsWebhooksDelete, [id]))
    unattended.assertFailed()
    unattended.assertLogMatches(/Nothing deleted.*--force/)
    assert.isTrue(emu.webhooks.subscriptions.has(id))

    const declined = await ace.create(PayoutsWebhooksDelete, [id])
    declined.prompt.trap(`Delete subscription ${id}?`).reject()
    await withStdinTTY(true, () => declined.exec())
    declined.assertFailed()
    declined.assertLogMatches(/Nothing deleted/)
    assert.isTrue(emu.webhooks.subscriptions.has(id))
    assert.equal(await deliver(app.url, secret), 200)

    emu.admin.setFaults({ errorRate: 1, pathPrefixes: ['/webhooks/subscriptions'] })
    const refused = await run(PayoutsWebhooksDelete, [id, '--force'])
    emu.admin.setFaults({})
    refused.assertFailed()
    refused.assertLogMatches(/Delete failed/)
    assert.equal(await deliver(app.url, secret), 200, 'nothing was deleted')

    const accepted = await ace.create(PayoutsWebhooksDelete, [id])
    accepted.prompt.trap(`Delete subscription ${id}?`).accept()
    await withStdinTTY(true, () => accepted.exec())
    accepted.assertSucceeded()
    accepted.assertLogMatches(new RegExp(`Deleted ${id} at the service`))
    assert.isFalse(emu.webhooks.subscriptions.has(id))
    assert.equal(await deliver(app.url, secret), 400)

    const again = await run(PayoutsWebhooksDelete, [id, '--force'])
    again.assertFailed()
    again.assertLogMatches(/not found/)

    // Already gone at the service, still stored here: deleted here, and said so.
    const other = await app.payouts.webhooks.create({ url: 'https://hooks.example.com/x' })
    await app.payouts.client.webhooks.subscriptions.delete(other.id)
    const gone = await run(PayoutsWebhooksDelete, [other.id, '--force', '--json'])
    gone.assertSucceeded()
    assert.deepEqual(jsonOf(gone), { id: other.id, deletedAtService: false, removedLocally: true })
    assert.notInclude(
      (await app.payouts.webhooks.list()).map((s) => s.id),
      other.id
    )
  })

  test('an authentic delivery that cannot be parsed stays visible: payouts:status counts it, replay finds it', async ({
    assert,
    cleanup,
  }) => {
    const { app, run } = await setup(cleanup)
    assert.equal(await deliver(app.url, 'whsec_current_secret', '{"type":"payout.created",'), 200)
    await app.payouts.drainInbox()

    const status = await run(PayoutsStatus, ['--json'])
    status.assertFailed()
    assert.equal(jsonOf(status).checks.deadLetters.value, 1)

    const replay = await run(PayoutsReplay, ['--state=dead', '--json'])
    replay.assertFailed()
    assert.deepInclude(jsonOf(replay), { requeued: 1, failing: 1 })
    assert.equal(jsonOf(await run(PayoutsStatus, ['--json'])).checks.deadLetters.value, 1)
  })

  test('payouts:replay re-runs dead and processed deliveries; --force is needed for processed', async ({
    assert,
    cleanup,
  }) => {
    const { app, run } = await setup(cleanup)
    const post = async (body: object, id: string) => {
      const raw = JSON.stringify(body)
      await request(`${app.url}/webhooks/payouts`, {
        method: 'POST',
        body: raw,
        headers: {
          'content-type': 'application/json',
          'svc-signature': signPayload('whsec_current_secret', Math.floor(Date.now() / 1000), raw),
          'svc-delivery-id': id,
        },
      })
    }
    await post({ type: 'payout.status.updated', data: { status: 'processing' } }, 'dlv_dead')
    await post({ type: 'payout.created', data: { payoutId: randomUUID() } }, 'dlv_ok')
    await app.payouts.drainInbox()

    const nothing = await run(PayoutsReplay)
    nothing.assertFailed()
    nothing.assertLogMatches(/Say what to replay/)

    const dead = await run(PayoutsReplay, ['--state=dead', '--json'])
    dead.assertFailed()
    assert.deepInclude(jsonOf(dead), { requeued: 1, failing: 1 })

    const unforced = await run(PayoutsReplay, ['--id=dlv_ok'])
    unforced.assertFailed()
    unforced.assertLogMatches(/dlv_ok already processed; add --force/)
    const forced = await run(PayoutsReplay, ['--id=dlv_ok', '--force', '--json'])
    forced.assertSucceeded()
    assert.deepInclude(jsonOf(forced), { requeued: 1, failing: 0 })
    assert.lengthOf(
      app.events.filter((e) => e.name === 'payouts:created'),
      1,
      're-applying changed nothing'
    )
  })

  test('payouts:reconcile, payouts:recover, payouts:confirm-escrow and payouts:status', async ({
    assert,
    cleanup,
  }) => {
    const { app, run, emu } = await setup(cleanup)
    const { result } = await app.payouts.execute({ ...executeBodies(emu).stable, amount: 20 })
    await app.payouts.escrow.recordDeposit({
      quoteId: result.quoteId,
      txHash: '0x' + '1'.repeat(64),
      confirmedAt: DateTime.now().minus({ hours: 1 }),
    })

    const reconcile = await run(PayoutsReconcile, ['--stale-after-ms=0', '--json'])
    reconcile.assertSucceeded()
    assert.deepInclude(jsonOf(reconcile), { checked: 1 })

    const recover = await run(PayoutsRecover, ['--older-than-ms=0'])
    recover.assertSucceeded()
    recover.assertLogMatches(/Re-sent/)

    const escrow = await run(PayoutsConfirmEscrow, ['--json'])
    escrow.assertFailed()
    assert.deepInclude(jsonOf(escrow), { failed: 1 })

    const status = await run(PayoutsStatus, ['--json'])
    status.assertFailed()
    const report = jsonOf(status)
    assert.equal(report.environment, 'sandbox')
    assert.deepEqual([report.checks.escrowFailed.value, report.checks.deadLetters.value], [1, 0])
    assert.equal(report.checks.unknownIntents.value, 0)
  })

  test('payouts:webhooks:redeliver and payouts:recipients:sync', async ({ assert, cleanup }) => {
    const { run, emu } = await setup(cleanup)
    emu.admin.seedRecipient({ name: 'Remote' })
    const sync = await run(PayoutsRecipientsSync, ['--json'])
    sync.assertSucceeded()
    assert.deepEqual(jsonOf(sync), { created: 1, updated: 0, deleted: 0 })
    const missing = await run(PayoutsWebhooksRedeliver, ['dlv_missing'])
    missing.assertFailed()
    missing.assertLogMatches(/Redelivery failed/)
  })
})
