import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import fc from 'fast-check'
import { DateTime } from 'luxon'
import { Reconciler } from '../../src/jobs/reconciler.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { isBehind } from '../../src/ledger/state_machine.ts'
import { readIds, type PayoutObservation } from '../../src/ledger/vocabulary.ts'
import { Payout, PayoutEvent } from '../../src/models/main.ts'
import type { Payout as RemotePayout, ProviderMetadata } from '../../src/schemas/resources.ts'
import { partsOf } from '../../src/service/payouts_service.ts'
import { fiatBody, startEmulator, testClient } from '../emulator/helpers.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'
import { startRecordingProxy } from '../helpers/recording_proxy.ts'

type Cleanup = (fn: () => Promise<void>) => void

/** The emulator's step interval: one step of a payout's lifecycle per advance. */
const STEP_MS = 2000

/**
 * An app on the emulator whose webhooks reach the app's route (a subscription pointed at it,
 * its secret the app's), and a client of the emulator to read payouts as the reconciler does.
 * The app calls the emulator through a recording proxy: `reads(id)` counts its reads of a payout.
 */
async function setup(cleanup: Cleanup, options: { webhooks: boolean }) {
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const wire = await startRecordingProxy(cleanup, emu.baseUrl)
  const client = testClient(cleanup, emu, { allowInsecureLoopbackWebhooks: true })
  const subscription = options.webhooks
    ? await client.webhooks.subscriptions.create({
        url: 'https://placeholder.example/h',
        events: ['payout.created', 'payout.status.updated'],
      })
    : null
  const app = await startHttpApp(cleanup, {
    apiKey: emu.apiKey,
    baseUrl: wire.baseUrl,
    clientRateLimiter: false,
    ...(subscription && { webhook: { secret: subscription.secret as string } }),
  })
  if (subscription) {
    await client.webhooks.subscriptions.update(subscription.id, {
      url: `${app.url}/webhooks/payouts`,
    })
  }
  const payouts = app.payouts
  const row = (payoutId: string) => Payout.findByOrFail('payoutUuid', payoutId)
  /** Moves the emulator on by `steps` lifecycle steps and applies what its webhooks said. */
  const advance = async (steps: number) => {
    await emu.admin.advance(steps * STEP_MS)
    await payouts.drainInbox()
  }
  /** The app's reads of the payout that reached the service. */
  const reads = (payoutId: string) => wire.count('GET', `/payouts/${payoutId}`)
  /** The app events fired so far (`payouts:*`), by name. */
  const appEvents = () =>
    app.events.filter((e) => e.name.startsWith('payouts:')).map((e) => e.name as string)
  /**
   * Puts the service's clock `ms` ahead of this one (the emulator's manual clock starts when it
   * does and stands still while the app starts): the times its events give are the service's.
   */
  const serviceAhead = (ms: number) =>
    emu.admin.advance(Math.max(0, Date.now() - emu.clock.now()) + ms)
  return { emu, client, payouts, row, advance, reads, appEvents, serviceAhead }
}

/** A read of the payout applied as the reconciler applies one, at `observedAt`. */
function readObservation(
  payoutId: string,
  remote: RemotePayout,
  observedAt: DateTime
): PayoutObservation {
  return {
    ...readIds(payoutId, remote),
    status: remote.status,
    step: remote.step ?? null,
    source: 'poll',
    eventType: 'reconcile',
    observedAt,
    fields: { providerMetadata: remote.providerMetadata ?? null },
  }
}

test.group(`Ledger | provider metadata through the emulator (${TEST_DB})`, (group) => {
  group.each.timeout(30_000)

  test('each read stores the routing detail it gave; webhooks, which carry none, keep it; an earlier read applied late changes nothing', async ({
    assert,
    cleanup,
  }) => {
    const { emu, client, payouts, row, advance } = await setup(cleanup, { webhooks: true })
    const { result } = await payouts.execute(fiatBody(emu))
    const payoutId = result.payoutId
    // The execute answer has no providerMetadata (spec): nothing yet.
    assert.isNull((await row(payoutId)).providerMetadata)
    assert.isNull((await row(payoutId)).providerMetadataAt)

    const early = await client.getPayout(payoutId)
    const earlyAt = DateTime.now()
    assert.equal(early.providerMetadata?.onramp?.status, 'pending')
    await payouts.reconcile({ staleAfterMs: 0 })
    const afterFirstRead = await row(payoutId)
    assert.deepEqual(afterFirstRead.providerMetadata, early.providerMetadata)
    assert.isNotNull(afterFirstRead.providerMetadataAt)

    // payout.status.updated (processing, compliance_cleared) arrives by the route: applied,
    // the stored metadata kept as it was.
    await advance(1)
    const afterWebhook = await row(payoutId)
    assert.deepEqual([afterWebhook.status, afterWebhook.step], ['processing', 'compliance_cleared'])
    assert.deepEqual(afterWebhook.providerMetadata, early.providerMetadata)
    assert.equal(
      afterWebhook.providerMetadataAt!.toMillis(),
      afterFirstRead.providerMetadataAt!.toMillis()
    )

    // The next read shows the leg moved on: stored.
    await payouts.reconcile({ staleAfterMs: 0 })
    const latest = await client.getPayout(payoutId)
    assert.equal(latest.providerMetadata?.onramp?.status, 'processing')
    const afterSecondRead = await row(payoutId)
    assert.deepEqual(afterSecondRead.providerMetadata, latest.providerMetadata)
    assert.deepEqual(afterSecondRead.providerMetadata, {
      version: 1,
      onramp: { protocol: 'emu-onramp', status: 'processing' },
      offramp: {
        protocol: 'emu-offramp',
        amount: latest.payoutAmount,
        currency: latest.payoutCurrency,
      },
    })

    // The first read, delivered late (a slow reconcile run elsewhere): stale, ignored.
    const { ledger } = await partsOf(payouts)
    await ledger.apply(readObservation(payoutId, early, earlyAt))
    const afterLateRead = await row(payoutId)
    assert.deepEqual(afterLateRead.providerMetadata, latest.providerMetadata)
    assert.deepEqual(
      [afterLateRead.status, afterLateRead.step],
      ['processing', 'compliance_cleared']
    )
  })

  test("a payout that failed at a leg: the read shows the leg's status, and the ledger keeps it", async ({
    assert,
    cleanup,
  }) => {
    const { emu, payouts, row } = await setup(cleanup, { webhooks: false })
    const { result } = await payouts.execute(fiatBody(emu, { reference: 'scenario:fail' }))
    await emu.admin.advance(10 * STEP_MS)
    await payouts.reconcile({ staleAfterMs: 0 })
    const failed = await row(result.payoutId)
    assert.equal(failed.status, 'failed')
    const metadata: ProviderMetadata | null = failed.providerMetadata
    assert.equal(metadata?.offramp?.status, 'conversion_failed')
    assert.equal(metadata?.onramp?.status, 'failed')
  })
})

test.group(`Ledger | ended payouts' final metadata (${TEST_DB})`, (group) => {
  group.each.timeout(30_000)

  test(
    '{name}: the next run reads it once and stores its final detail, no event fired; later runs do not read it'
  )
    .with([
      {
        name: 'failed by webhook',
        reference: 'scenario:fail',
        status: 'failed',
        event: 'payouts:failed',
        offramp: 'conversion_failed',
      },
      {
        name: 'cancelled by webhook',
        reference: 'scenario:cancel',
        status: 'cancelled',
        event: 'payouts:cancelled',
        offramp: undefined,
      },
      {
        name: 'completed by webhook',
        reference: undefined,
        status: 'completed',
        event: 'payouts:completed',
        offramp: undefined,
      },
    ])
    .run(async ({ assert, cleanup }, expected) => {
      const { emu, client, payouts, row, advance, reads, appEvents, serviceAhead } = await setup(
        cleanup,
        { webhooks: true }
      )
      // Its events dated a minute ahead of the reads: a read of the ended payout, taken before
      // its end's time on the service's clock, must still count as after it.
      await serviceAhead(60_000)
      const body = fiatBody(emu, expected.reference ? { reference: expected.reference } : {})
      const payoutId = (await payouts.execute(body)).result.payoutId
      // A read while it runs: the detail from before the end.
      await payouts.reconcile({ staleAfterMs: 0 })
      const running = await row(payoutId)
      assert.equal(running.providerMetadata?.onramp?.status, 'pending')

      // It ends by a webhook, which carries no detail: the one from before the end is kept.
      await advance(10)
      const ended = await row(payoutId)
      assert.equal(ended.status, expected.status)
      assert.deepEqual(ended.providerMetadata, running.providerMetadata)
      assert.include(appEvents(), expected.event)
      const eventsBefore = appEvents()
      const readsBefore = reads(payoutId)

      // The next run, whatever its staleness: one read, the final detail stored.
      const first = await payouts.reconcile()
      assert.deepInclude(first, { checked: 1, ended: 1, changed: 0, missing: 0, failed: 0 })
      assert.equal(reads(payoutId), readsBefore + 1)
      const final = await row(payoutId)
      const remote = await client.getPayout(payoutId)
      assert.deepEqual(final.providerMetadata, remote.providerMetadata)
      // The legs as they ended (the failed one's status is why it failed).
      assert.equal(final.providerMetadata?.onramp?.status, expected.status)
      assert.equal(final.providerMetadata?.offramp?.status, expected.offramp)
      // Its position as the webhook left it; dated no earlier than its end (the emulator's
      // clock, which the test moved ahead of this one).
      assert.deepEqual(
        [final.status, final.step, final.statusChangedAt!.toMillis()],
        [ended.status, ended.step, ended.statusChangedAt!.toMillis()]
      )
      assert.isAtLeast(final.providerMetadataAt!.toMillis(), final.statusChangedAt!.toMillis())
      // No app event: the read changed nothing but the detail, and was logged as such.
      assert.deepEqual(appEvents(), eventsBefore)
      const logged = await PayoutEvent.query()
        .where('payout_uuid', payoutId)
        .orderBy('id', 'desc')
        .firstOrFail()
      assert.deepInclude(logged.serialize(), {
        source: 'poll',
        eventType: 'reconcile',
        status: expected.status,
        applied: false,
        reason: 'duplicate',
      })

      // Read once: the next runs, stale or not, leave it alone.
      assert.deepInclude(await payouts.reconcile(), { checked: 0, ended: 0 })
      assert.deepInclude(await payouts.reconcile({ staleAfterMs: 0 }), { checked: 0, ended: 0 })
      assert.equal(reads(payoutId), readsBefore + 1)
      assert.deepEqual(appEvents(), eventsBefore)
    })

  test('a payout that ended before the window is not read; one that ended within it is', async ({
    assert,
    cleanup,
  }) => {
    const { emu, payouts, row, advance, reads, serviceAhead } = await setup(cleanup, {
      webhooks: true,
    })
    await serviceAhead(0)
    const payoutId = (await payouts.execute(fiatBody(emu, { reference: 'scenario:fail' }))).result
      .payoutId
    await advance(10)
    assert.equal((await row(payoutId)).status, 'failed')
    assert.isNull((await row(payoutId)).providerMetadata)
    const { db, ledger } = await partsOf(payouts)
    const reconcilerAt = (later: { hours: number }) =>
      new Reconciler({
        db,
        ledger,
        client: payouts.client,
        now: () => DateTime.now().plus(later),
      })

    // A day and an hour on: it ended past the window (24 h), so it is not read.
    assert.deepInclude(await reconcilerAt({ hours: 25 }).run(), { checked: 0, ended: 0 })
    assert.equal(reads(payoutId), 0)
    assert.isNull((await row(payoutId)).providerMetadata)
    // 23 hours on, it is within.
    assert.deepInclude(await reconcilerAt({ hours: 23 }).run(), { checked: 1, ended: 1 })
    assert.equal(reads(payoutId), 1)
    assert.equal((await row(payoutId)).providerMetadata?.offramp?.status, 'conversion_failed')
  })
})

test.group(`Ledger | provider metadata ordering (${TEST_DB})`, () => {
  const at = (minutes: number) => DateTime.fromISO('2026-03-01T10:00:00Z').plus({ minutes })
  const metadata = (status: string): ProviderMetadata => ({
    version: 1,
    onramp: { protocol: 'rt_on', status },
    offramp: { protocol: 'rt_off', amount: 12.5, currency: 'MXN' },
  })
  const read = (
    payoutId: string,
    position: { status: string; step?: string | null },
    observedAt: DateTime,
    providerMetadata?: ProviderMetadata
  ): PayoutObservation => ({
    payoutId,
    status: position.status,
    step: position.step ?? null,
    source: 'poll',
    eventType: 'reconcile',
    observedAt,
    ...(providerMetadata && { fields: { providerMetadata } }),
  })

  test('the latest read wins; an earlier one, one behind the position, or one without the field never replaces it', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'provider_metadata')
    const ledger = new PayoutLedger(db)
    const id = randomUUID()
    const stored = async () => {
      const row = await Payout.findByOrFail('payoutUuid', id)
      return { metadata: row.providerMetadata, at: row.providerMetadataAt?.toISO() ?? null }
    }
    const converting = { status: 'processing', step: 'converting' }

    await ledger.apply(read(id, converting, at(10), metadata('converting')))
    assert.deepEqual(await stored(), {
      metadata: metadata('converting'),
      at: at(10).toUTC().toISO(),
    })
    // Same position, read earlier: older.
    await ledger.apply(read(id, converting, at(5), metadata('older')))
    assert.deepEqual((await stored()).metadata, metadata('converting'))
    // Read later but behind the position the row holds: what it describes is older.
    await ledger.apply(
      read(id, { status: 'processing', step: 'collected' }, at(20), metadata('behind'))
    )
    assert.deepEqual((await stored()).metadata, metadata('converting'))
    // A webhook moves the payout on and carries no metadata: kept.
    await ledger.apply({
      payoutId: id,
      status: 'processing',
      step: 'settling',
      source: 'webhook',
      eventType: 'payout.status.updated',
      observedAt: at(25),
    })
    assert.deepEqual(await stored(), {
      metadata: metadata('converting'),
      at: at(10).toUTC().toISO(),
    })
    // A read that gives the status only (the spec's read has no step), later: taken.
    await ledger.apply(read(id, { status: 'processing' }, at(30), metadata('status only')))
    assert.deepEqual(await stored(), {
      metadata: metadata('status only'),
      at: at(30).toUTC().toISO(),
    })
    // After the end: another terminal status is ignored, the same one is taken.
    await ledger.apply(read(id, { status: 'failed' }, at(40), metadata('failed')))
    await ledger.apply(read(id, { status: 'completed' }, at(50), metadata('completed')))
    assert.deepEqual((await stored()).metadata, metadata('failed'))
    await ledger.apply(read(id, { status: 'failed' }, at(60), metadata('failed, later')))
    assert.deepEqual((await stored()).metadata, metadata('failed, later'))
    // Null is "not given", never an erasure.
    await ledger.apply({
      ...read(id, { status: 'failed' }, at(70)),
      fields: { providerMetadata: null },
    })
    assert.deepEqual((await stored()).metadata, metadata('failed, later'))
  })

  test('in one batch as one by one: the latest of several reads of a payout wins, whatever their order', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'provider_metadata')
    const ledger = new PayoutLedger(db)
    const positions = [
      { status: 'pending', step: 'initiated' },
      { status: 'processing', step: 'compliance_cleared' },
      { status: 'processing', step: 'compliance_cleared' },
      { status: 'processing', step: 'collected' },
      { status: 'processing', step: null },
      { status: 'completed', step: 'delivered' },
    ]
    // Whole minutes apart: SQLite and MySQL keep whole seconds.
    const trajectory = (id: string) =>
      positions.map((position, i) => read(id, position, at(i), metadata(`read ${i}`)))
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 2 ** 31 }), async (seed) => {
        const [order] = fc.sample(
          fc.shuffledSubarray([...positions.keys()], { minLength: positions.length }),
          { seed, numRuns: 1 }
        )
        const oneByOne = randomUUID()
        const batched = randomUUID()
        for (const index of order) await ledger.apply(trajectory(oneByOne)[index])
        await ledger.applyBatch(order.map((index) => trajectory(batched)[index]))
        for (const id of [oneByOne, batched]) {
          const row = await Payout.findByOrFail('payoutUuid', id)
          assert.deepEqual(row.providerMetadata, metadata('read 5'), `${id} after ${order}`)
          assert.equal(row.providerMetadataAt!.toMillis(), at(5).toMillis())
        }
      }),
      { seed: 32, numRuns: TEST_DB === 'sqlite' ? 15 : 8 }
    )
  })

  test('two reads within one second: a batch decides as one by one does, at the precision the database keeps', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'provider_metadata')
    const ledger = new PayoutLedger(db)
    const position = { status: 'processing', step: 'collected' }
    const reads = (id: string) => [
      read(id, position, at(0).plus({ milliseconds: 900 }), metadata('at .900')),
      read(id, position, at(0).plus({ milliseconds: 500 }), metadata('at .500')),
    ]
    const oneByOne = randomUUID()
    const batched = randomUUID()
    for (const observation of reads(oneByOne)) await ledger.apply(observation)
    await ledger.applyBatch(reads(batched))
    const [first, second] = await Promise.all(
      [oneByOne, batched].map((id) => Payout.findByOrFail('payoutUuid', id))
    )
    // PostgreSQL keeps the milliseconds: the earlier read is older. SQLite and MySQL keep whole
    // seconds: the two are as old, and the one applied later wins.
    const expected = TEST_DB === 'pg' ? 'at .900' : 'at .500'
    assert.deepEqual(first.providerMetadata, metadata(expected))
    assert.deepEqual(second.providerMetadata, metadata(expected))
  })

  test("a placeholder merged into its UUID hands on its metadata with its own time, not its position's", async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'provider_metadata')
    const ledger = new PayoutLedger(db)
    const uuid = randomUUID()
    const readId = `po_${randomUUID().slice(0, 8)}`
    const processing = { status: 'processing', step: 'collected' }
    // Seen by its read id alone: its position at 10, its metadata read at 30.
    await ledger.apply(read(readId, processing, at(10)))
    await ledger.apply(read(readId, processing, at(30), metadata('placeholder')))
    // A read that names both ids, taken at 20, applied now: the merge keeps the newer one.
    await ledger.apply({ ...read(uuid, processing, at(20), metadata('older')), readId })
    const row = await Payout.findByOrFail('payoutUuid', uuid)
    assert.equal(row.readId, readId)
    assert.deepEqual(row.providerMetadata, metadata('placeholder'))
    assert.equal(row.providerMetadataAt!.toMillis(), at(30).toMillis())
    assert.isNull(await Payout.findBy('payoutUuid', readId))
  })

  test('isBehind: a lower status, an earlier step, another terminal status; never an unknown status or a status alone', ({
    assert,
  }) => {
    const row = { status: 'processing' as const, step: 'converting' as const }
    assert.isFalse(isBehind(null, { status: 'pending' }))
    assert.isTrue(isBehind(row, { status: 'pending' }))
    assert.isTrue(isBehind(row, { status: 'processing', step: 'collected' }))
    assert.isTrue(isBehind(row, { step: 'collected' }))
    assert.isFalse(isBehind(row, { status: 'processing' }))
    assert.isFalse(isBehind(row, { status: 'processing', step: 'converting' }))
    assert.isFalse(isBehind(row, { status: 'processing', step: 'settling' }))
    assert.isFalse(isBehind(row, { status: 'failed', step: 'collected' }))
    assert.isFalse(isBehind(row, { status: 'on_hold' }))
    assert.isFalse(isBehind(row, {}))
    const failed = { status: 'failed' as const, step: 'collected' as const }
    assert.isTrue(isBehind(failed, { status: 'completed' }))
    assert.isTrue(isBehind(failed, { status: 'processing', step: 'settling' }))
    assert.isFalse(isBehind(failed, { status: 'failed' }))
    assert.isFalse(isBehind(failed, { status: 'failed', step: 'converting' }))
  })
})

test.group(`Ledger | provider metadata on the model (${TEST_DB})`, () => {
  test('typed from the contract schema', ({ expectTypeOf }) => {
    expectTypeOf<Payout['providerMetadata']>().toEqualTypeOf<ProviderMetadata | null>()
    expectTypeOf<NonNullable<Payout['providerMetadata']>['onramp']>().toEqualTypeOf<
      ProviderMetadata['onramp']
    >()
  })
})
