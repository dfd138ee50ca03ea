import { test } from '@japa/runner'
import type { BatchRowOutcome, ExecutedBatch } from '../../src/types/main.ts'
import type { ExecuteResult } from '../../src/schemas/resources.ts'
import { Payout, WebhookDelivery } from '../../src/models/main.ts'
import { partsOf } from '../../src/service/payouts_service.ts'
import { api, executeBodies } from '../emulator/helpers.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startAppOnEmulator, type HttpApp } from '../helpers/http_app.ts'

/** `n` fiat rows of distinct amounts for one recipient. */
function rows(emu: Parameters<typeof executeBodies>[0], n: number) {
  const { fiat } = executeBodies(emu)
  return Array.from({ length: n }, (_, index) => ({ ...fiat, amount: 10 + index }))
}

/** The requests the app's client sends from now on, by endpoint. */
function countRequests(app: HttpApp) {
  const sent: string[] = []
  app.payouts.client.on('request', (event) => void sent.push(event.endpoint))
  return sent
}

/** The payouts:created events the app heard, per payout. */
function createdEvents(app: HttpApp) {
  const events = app.events.filter((event) => event.name === 'payouts:created')
  return {
    count: events.length,
    payouts: new Set(events.map((event) => event.data.payoutId)).size,
    keys: new Set(events.map((event) => event.data.eventKey)).size,
  }
}

test.group(`Integration | mass payouts against the emulator over loopback (${TEST_DB})`, () => {
  test('250 rows through payouts.executeBatch: 3 requests, 250 ledger rows, 250 payouts:created, once each', async ({
    assert,
    cleanup,
  }) => {
    const { emu, app } = await startAppOnEmulator(cleanup)
    // The service's payout.created webhooks reach the app's route too, after the batch's own
    // store: the ledger applies each payout once, from either source.
    const subscription = await api(emu, 'POST', '/webhooks/subscriptions', {
      body: { url: `${app.url}/webhooks/payouts`, events: ['payout.created'] },
    })
    emu.webhooks.subscriptions.get(subscription.json.id)!.secret = 'whsec_current_secret'
    const sent = countRequests(app)

    const batch = await app.payouts.executeBatch(rows(emu, 250), {
      idempotencyKey: 'marketplace-friday-0001',
      ownerId: 'tenant-9',
    })
    assert.isTrue(batch.complete)
    assert.equal(batch.counts.created, 250)
    assert.deepEqual(sent, ['executeBatch', 'executeBatch', 'executeBatch'])
    assert.lengthOf(emu.admin.payouts(), 250)

    // The emulator's clock is manual: its deliveries go out when it moves.
    await emu.admin.advance(0)
    await app.payouts.drainInbox()
    await partsOf(app.payouts)
    assert.lengthOf(await Payout.query().where('owner_id', 'tenant-9'), 250)
    assert.deepEqual(createdEvents(app), { count: 250, payouts: 250, keys: 250 })
    const deliveries = emu.admin.deliveries()
    assert.lengthOf(deliveries, 250)
    assert.deepEqual([...new Set(deliveries.map((d) => d.status))], ['succeeded'])
    assert.lengthOf(await WebhookDelivery.query().where('state', 'processed'), 250)

    // Found again by its key, from the ledger alone.
    const found = await app.payouts.findBatch('marketplace-friday-0001')
    assert.equal(found?.counts.created, 250)
    assert.lengthOf(sent, 3)
  }).timeout(60_000)

  test('the figure: 250 rows through executeBatch against 250 single executes', async ({
    assert,
    cleanup,
  }) => {
    const { emu, app } = await startAppOnEmulator(cleanup)
    const sent = countRequests(app)
    const batchRows = rows(emu, 250)
    // Warm: the parts, the client's connection, the tables' first pages.
    await app.payouts.execute(rows(emu, 1)[0])
    sent.length = 0

    let started = performance.now()
    await app.payouts.executeBatch(batchRows, { idempotencyKey: 'figure-batch-0001' })
    const batchMs = performance.now() - started
    const batchRequests = sent.length

    sent.length = 0
    started = performance.now()
    for (const row of rows(emu, 250)) await app.payouts.execute(row)
    const singleMs = performance.now() - started
    const singleRequests = sent.length

    assert.equal(batchRequests, 3)
    assert.equal(singleRequests, 250)
    assert.lengthOf(emu.admin.payouts(), 501)
    console.log(
      `[figure ${TEST_DB}] 250 rows: executeBatch ${Math.round(batchMs)} ms, ${batchRequests} requests; ` +
        `250 executes ${Math.round(singleMs)} ms, ${singleRequests} requests`
    )
  }).timeout(120_000)

  test('the types a host app reads: a created row carries its answer and its ledger row', ({
    expectTypeOf,
  }) => {
    expectTypeOf<
      HttpApp['payouts']['executeBatch']
    >().returns.resolves.toEqualTypeOf<ExecutedBatch>()
    type Created = Extract<BatchRowOutcome, { outcome: 'created' }>
    expectTypeOf<Created['result']>().toEqualTypeOf<ExecuteResult>()
    expectTypeOf<Created['payout']>().toEqualTypeOf<Payout>()
    expectTypeOf<Exclude<BatchRowOutcome, Created>>().toHaveProperty('code').toEqualTypeOf<string>()
  })
})
