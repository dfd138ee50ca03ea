import { test } from '@japa/runner'
import { Logger } from '@adonisjs/core/logger'
import { DateTime } from 'luxon'
import { validateConfig } from '../../src/define_config.ts'
import { PayoutsEmulator } from '../../src/emulator/main.ts'
import { createClient } from '../../src/service/client_factory.ts'
import { LiveConnection } from '../../src/service/connection.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { reduce, type PayoutPosition } from '../../src/ledger/state_machine.ts'
import { Payout, PayoutEvent, Recipient, WebhookDelivery } from '../../src/models/main.ts'
import { readHealth } from '../../src/health/report.ts'
import {
  PayoutEventFactory,
  PayoutFactory,
  RecipientFactory,
  WebhookDeliveryFactory,
  payoutPath,
} from '../../src/testing/main.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

/** Where a payout row stands. */
const positionOf = (payout: Payout) => ({ status: payout.status, step: payout.step })

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

/** Each status state, the position it gives, and a later observation the ledger applies or not. */
const STATES = [
  {
    state: 'pending',
    position: { status: 'pending', step: 'initiated' },
    later: { status: 'processing', step: 'compliance_cleared' },
    applies: true,
  },
  {
    state: 'processing',
    position: { status: 'processing', step: 'collected' },
    later: { status: 'processing', step: 'converting' },
    applies: true,
  },
  {
    state: 'completed',
    position: { status: 'completed', step: 'delivered' },
    later: { status: 'failed', step: 'delivered' },
    applies: false,
  },
  {
    state: 'failed',
    position: { status: 'failed', step: 'collected' },
    later: { status: 'processing', step: 'converting' },
    applies: false,
  },
  {
    state: 'cancelled',
    position: { status: 'cancelled', step: 'initiated' },
    later: { status: 'completed', step: 'delivered' },
    applies: false,
  },
] as const

test.group(`Testing | factories (${TEST_DB})`, () => {
  test('a {state} payout is a position the ledger holds and moves on from')
    .with([...STATES])
    .run(async ({ assert, cleanup }, { state, position, later, applies }) => {
      const { db } = await setupDatabase(cleanup, 'factories')
      const path = payoutPath(position)
      const made = await PayoutFactory.apply(state).with('events', path.length).create()

      const stored = await Payout.findByOrFail('payoutUuid', made.payoutUuid)
      assert.match(stored.payoutUuid, UUID)
      assert.deepEqual(positionOf(stored), position)
      assert.equal(stored.completedAt !== null, state === 'completed')
      assert.match(stored.sourceAmount!, /^\d+\.\d{2}$/)
      assert.equal(
        typeof (await db.from(Payout.table).where('id', stored.id).first()).source_amount,
        'string'
      )

      // Its log, replayed through the reducer from nothing, ends where the row stands.
      const events = await PayoutEvent.query().where('payout_uuid', made.payoutUuid).orderBy('id')
      assert.lengthOf(events, path.length)
      let replayed: PayoutPosition | null = null
      for (const event of events) {
        assert.isTrue(event.applied)
        const result = reduce(replayed, event)
        assert.isTrue(result.changed, `${event.status}/${event.step} moves the payout`)
        replayed = result.next
      }
      assert.deepEqual(replayed, position)
      assert.equal(events[0].source, 'execute')

      // The ledger reads the row as its own: the same position again is a duplicate...
      const ledger = new PayoutLedger(db)
      const again = await ledger.apply({ payoutId: made.payoutUuid, ...position, source: 'poll' })
      assert.deepInclude(again, { changed: false, reason: 'duplicate' })
      // ...and a later observation applies on top of it, unless the payout is final.
      const next = await ledger.apply({ payoutId: made.payoutUuid, ...later, source: 'webhook' })
      assert.equal(next.changed, applies)
      assert.equal(next.reason, applies ? 'applied' : 'after_terminal')
      const after = await Payout.findByOrFail('payoutUuid', made.payoutUuid)
      assert.deepEqual(positionOf(after), applies ? later : position)
      assert.lengthOf(await Payout.query().where('payout_uuid', made.payoutUuid), 1)
    })

  test('an ended payout is marked for its routing detail as the ledger marks it, merged values and states both counted', async ({
    assert,
    cleanup,
  }) => {
    await setupDatabase(cleanup, 'factory_marks')
    const due = (payout: Payout) =>
      payout.providerMetadataDueAt && payout.providerMetadataDueAt.toMillis()
    const ended = await PayoutFactory.apply('completed').create()
    assert.equal(due(ended), ended.statusChangedAt!.toMillis())
    // A detail read before the end is not the end's; one read after it is.
    const readBefore = await PayoutFactory.merge({
      providerMetadataAt: DateTime.now().minus({ hours: 1 }),
    })
      .apply('failed')
      .create()
    assert.equal(due(readBefore), readBefore.statusChangedAt!.toMillis())
    const readAfter = await PayoutFactory.merge({
      providerMetadataAt: DateTime.now().plus({ minutes: 1 }),
    })
      .apply('completed')
      .create()
    assert.isNull(readAfter.providerMetadataDueAt)
    // A status merged without its state.
    const merged = await PayoutFactory.merge({ status: 'cancelled' }).create()
    assert.equal(due(merged), merged.statusChangedAt!.toMillis())
    const running = await PayoutFactory.apply('processing').create()
    assert.isNull(running.providerMetadataDueAt)
    const stub = await PayoutFactory.apply('completed').makeStubbed()
    assert.equal(due(stub), stub.statusChangedAt!.toMillis())
  })

  test('a processing or failed payout keeps a merged step', async ({ assert, cleanup }) => {
    const { db } = await setupDatabase(cleanup, 'factories')
    const converting = await PayoutFactory.merge({ step: 'converting' })
      .apply('processing')
      .create()
    assert.deepEqual(positionOf(converting), { status: 'processing', step: 'converting' })
    const failed = await PayoutFactory.merge({ step: 'settling' }).apply('failed').create()
    assert.deepEqual(positionOf(failed), { status: 'failed', step: 'settling' })

    const ledger = new PayoutLedger(db)
    const backwards = await ledger.apply({
      payoutId: converting.payoutUuid,
      status: 'processing',
      step: 'collected',
      source: 'webhook',
    })
    assert.deepInclude(backwards, { changed: false, reason: 'backwards' })
    const completed = await ledger.apply({
      payoutId: converting.payoutUuid,
      status: 'completed',
      source: 'poll',
    })
    assert.deepInclude(completed, { changed: true, reason: 'applied' })
    assert.deepEqual(positionOf(completed.payout), { status: 'completed', step: 'delivered' })
  })

  test('each flow has its currencies; more events than the path are redeliveries', async ({
    assert,
    cleanup,
  }) => {
    await setupDatabase(cleanup, 'factories')
    const fiat = await PayoutFactory.apply('fiatToFiat').create()
    const stablecoin = await PayoutFactory.apply('stablecoinToFiat', 'processing').create()
    const onramp = await PayoutFactory.apply('onramp', 'completed').create()
    const flowOf = (p: Payout) => [p.flow, p.transactionType, p.sourceCurrency, p.payoutCurrency]
    assert.deepEqual(flowOf(fiat), ['fiat_to_fiat', 'fiat_to_fiat', 'USD', 'MXN'])
    assert.deepEqual(flowOf(stablecoin), [
      'stablecoin_to_fiat',
      'stablecoin_to_fiat',
      'USDC',
      'MXN',
    ])
    assert.deepEqual(flowOf(onramp), ['onramp', 'onramp', 'USD', 'USDC'])
    assert.deepEqual([stablecoin.status, onramp.status], ['processing', 'completed'])
    const reread = await Payout.findByOrFail('payoutUuid', onramp.payoutUuid)
    assert.match(String(reread.instructions?.paymentUrl), /^https:\/\//)

    const pending = await PayoutFactory.with('events', 3).create()
    const events = await PayoutEvent.query().where('payout_uuid', pending.payoutUuid).orderBy('id')
    assert.deepEqual(
      events.map((e) => [e.status, e.step, e.applied, e.reason]),
      [
        ['pending', 'initiated', true, 'applied'],
        ['pending', 'initiated', false, 'duplicate'],
        ['pending', 'initiated', false, 'duplicate'],
      ]
    )
    const ignored = await PayoutEventFactory.apply('ignored')
      .merge({ payoutUuid: pending.payoutUuid })
      .create()
    assert.deepEqual(
      [ignored.applied, ignored.reason, ignored.notifiedAt],
      [false, 'backwards', null]
    )
  })

  test('the health report counts inbox rows by state and stuck payouts', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'factories')
    const emulator = await PayoutsEmulator.start()
    cleanup(() => emulator.close())
    await WebhookDeliveryFactory.apply('pending').createMany(2)
    await WebhookDeliveryFactory.apply('failed').create()
    await WebhookDeliveryFactory.apply('processed').createMany(3)
    await WebhookDeliveryFactory.apply('dead').createMany(2)
    const old = DateTime.now().minus({ days: 2 })
    await PayoutFactory.apply('processing').merge({ createdAt: old }).create()
    await PayoutFactory.apply('completed').merge({ createdAt: old }).create()
    await PayoutFactory.apply('pending').create()

    const config = validateConfig({
      apiKey: emulator.apiKey,
      baseUrl: emulator.baseUrl,
      ledger: { tablePrefix: prefix },
    })
    const logger = new Logger({ enabled: false })
    const report = await readHealth({
      config,
      environment: 'sandbox',
      db,
      reachability: await new LiveConnection(config, logger, () =>
        createClient(config, logger)
      ).reachability(),
    })
    assert.include(report.checks.inboxBacklog, { value: 3 })
    assert.include(report.checks.deadLetters, { value: 2 })
    assert.include(report.checks.stuckPayouts, { value: 1 })
    assert.equal(report.checks.reachability.status, 'ok')
    assert.isNotNull(report.lastEventReceivedAt)

    // Each row carries what its state means.
    const dead = await WebhookDelivery.query().where('state', 'dead')
    assert.isTrue(dead.every((row) => row.attempts > 0 && row.lastError !== null))
    const [failed] = await WebhookDelivery.query().where('state', 'failed')
    assert.isTrue(failed.nextAttemptAt! > DateTime.now())
    const [processed] = await WebhookDelivery.query().where('state', 'processed')
    assert.isNotNull(processed.processedAt)
    assert.equal(JSON.parse(processed.body.toString()).type, processed.eventType)
  })

  test('a recipient is mirrored with a UUID remote id; deleted is soft', async ({
    assert,
    cleanup,
  }) => {
    await setupDatabase(cleanup, 'factories')
    const [ana, bob] = await RecipientFactory.merge([{ ownerId: 'tenant-1' }, {}]).createMany(2)
    const gone = await RecipientFactory.apply('deleted').create()
    const reread = await Recipient.findByOrFail('remoteId', ana.remoteId)
    assert.match(reread.remoteId, UUID)
    assert.equal(reread.ownerId, 'tenant-1')
    assert.isNull(bob.ownerId)
    assert.lengthOf(reread.paymentMethods!, 1)
    assert.isNotNull((await Recipient.findByOrFail('remoteId', gone.remoteId)).deletedAt)
  })

  test('the factories are typed by their models and states', ({ expectTypeOf }) => {
    // Functions, never called: the types alone are under test.
    expectTypeOf(() =>
      PayoutFactory.apply('completed').create()
    ).returns.resolves.toEqualTypeOf<Payout>()
    expectTypeOf(() =>
      PayoutFactory.with('events', 2).createMany(2)
    ).returns.resolves.toEqualTypeOf<Payout[]>()
    expectTypeOf(() => PayoutEventFactory.make()).returns.resolves.toEqualTypeOf<PayoutEvent>()
    expectTypeOf(() =>
      RecipientFactory.apply('deleted').create()
    ).returns.resolves.toEqualTypeOf<Recipient>()
    expectTypeOf(() =>
      WebhookDeliveryFactory.apply('dead').create()
    ).returns.resolves.toEqualTypeOf<WebhookDelivery>()
    expectTypeOf(payoutPath).returns.toEqualTypeOf<
      Array<{ status: Payout['status']; step: Payout['step'] }>
    >()
    expectTypeOf(PayoutFactory.apply)
      .parameter(0)
      .toEqualTypeOf<
        | 'pending'
        | 'processing'
        | 'completed'
        | 'failed'
        | 'cancelled'
        | 'fiatToFiat'
        | 'stablecoinToFiat'
        | 'onramp'
      >()
    expectTypeOf(WebhookDeliveryFactory.apply)
      .parameter(0)
      .toEqualTypeOf<'pending' | 'processed' | 'failed' | 'dead'>()
    const misuses = () => {
      // @ts-expect-error: not a state of the payout factory
      PayoutFactory.apply('refunded')
      // @ts-expect-error: payouts have no such relation
      PayoutFactory.with('deposits')
    }
    expectTypeOf(misuses).toBeFunction()
  })
})
