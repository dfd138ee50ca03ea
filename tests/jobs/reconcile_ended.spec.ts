import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { DateTime, type DurationLike } from 'luxon'
import { PayoutsResponseError } from '../../src/client/main.ts'
import { dbDate } from '../../src/database/dates.ts'
import { tableNames } from '../../src/database/schema.ts'
import { Reconciler } from '../../src/jobs/reconciler.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { Payout } from '../../src/models/main.ts'
import type { Payout as RemotePayout, ProviderMetadata } from '../../src/schemas/resources.ts'
import type { PayoutsManager } from '../../src/service/payouts_manager.ts'
import { fiatBody, startEmulator, testClient } from '../emulator/helpers.ts'
import { BASE_URL } from '../helpers/app.ts'
import { connectionConfig, setupDatabase, TEST_DB } from '../helpers/database.ts'
import { serveHostApp } from '../helpers/host_app.ts'
import { startRecordingProxy } from '../helpers/recording_proxy.ts'

type Cleanup = (fn: () => Promise<void>) => void

const metadata = (status: string): ProviderMetadata => ({
  version: 1,
  onramp: { protocol: 'rt_on', status: 'completed' },
  offramp: { protocol: 'rt_off', status },
})

/**
 * A ledger on the suite's database, the changes it tells counted, and a service whose answer
 * to each read the test sets (`answer`), its reads recorded in order.
 */
async function setup(cleanup: Cleanup) {
  const { db } = await setupDatabase(cleanup, 'reconcile_ended')
  const changes: string[] = []
  const ledger = new PayoutLedger(db, {
    onChange: (change) => void changes.push(`${change.payout.payoutUuid} ${change.current.status}`),
  })
  const reads: string[] = []
  let answer: (id: string) => Partial<RemotePayout> | Error = (id) => new Error(`no answer ${id}`)
  const client = {
    rateLimit: null as { limit: number; remaining: number } | null,
    getPayout: async (id: string) => {
      reads.push(id)
      const given = answer(id)
      if (given instanceof Error) throw given
      return { id, ...given } as RemotePayout
    },
  }
  const reconciler = (options: { batchSize?: number; later?: { hours: number } } = {}) =>
    new Reconciler({
      db,
      ledger,
      client: client as any,
      batchSize: options.batchSize ?? 50,
      now: () => DateTime.now().plus(options.later ?? {}),
    })
  /** A payout that a webhook ended (or moved) `ago` before now, with no routing detail read. */
  const byWebhook = async (
    status: string,
    step: string | null,
    ago: DurationLike = { minutes: 1 }
  ) => {
    const payoutId = randomUUID()
    await ledger.apply({
      payoutId,
      status,
      step,
      source: 'webhook',
      eventType: 'payout.status.updated',
      observedAt: DateTime.now().minus(ago),
    })
    return payoutId
  }
  const row = (payoutId: string) => Payout.findByOrFail('payoutUuid', payoutId)
  return {
    db,
    ledger,
    client,
    reads,
    changes,
    reconciler,
    byWebhook,
    row,
    setAnswer: (fn: typeof answer) => (answer = fn),
  }
}

test.group(`Jobs | reconciliation of ended payouts (${TEST_DB})`, (group) => {
  group.each.timeout(30_000)

  test('a read that shows another position moves nothing and stores nothing; tried again each run, only within the window', async ({
    assert,
    cleanup,
  }) => {
    const s = await setup(cleanup)
    const failed = await s.byWebhook('failed', 'converting')
    const completed = await s.byWebhook('completed', 'delivered')
    const changesBefore = [...s.changes]
    // The service answers one as still running, the other as failed: both behind what the
    // ledger holds (another terminal status is behind a terminal one).
    s.setAnswer((id) =>
      id === failed
        ? { status: 'processing', step: 'converting', providerMetadata: metadata('converting') }
        : { status: 'failed', providerMetadata: metadata('conversion_failed') }
    )
    const first = await s.reconciler().run()
    assert.deepInclude(first, { checked: 2, ended: 2, changed: 0 })
    for (const [id, status, step] of [
      [failed, 'failed', 'converting'],
      [completed, 'completed', 'delivered'],
    ]) {
      const row = await s.row(id!)
      assert.deepEqual([row.status, row.step], [status, step])
      assert.isNull(row.providerMetadata)
      assert.isNull(row.providerMetadataAt)
    }
    assert.deepEqual(s.changes, changesBefore)

    // Not the final detail yet: read again by the next run (the window bounds how long).
    assert.deepInclude(await s.reconciler().run(), { checked: 2, ended: 2 })
    assert.deepInclude(await s.reconciler({ later: { hours: 25 } }).run(), {
      checked: 0,
      ended: 0,
    })
    assert.lengthOf(s.reads, 4)

    // The answer that shows the end: stored, and the payout is done with.
    s.setAnswer(() => ({ status: 'failed', providerMetadata: metadata('conversion_failed') }))
    await s.reconciler().run()
    assert.deepEqual((await s.row(failed)).providerMetadata, metadata('conversion_failed'))
    assert.deepEqual(s.changes, changesBefore)
    const reads = s.reads.length
    assert.deepInclude(await s.reconciler().run(), { checked: 1, ended: 1 })
    assert.deepEqual(s.reads.slice(reads), [completed])
  })

  for (const [answer, lags] of [
    ['is behind', () => ({ status: 'processing', step: 'converting' })],
    ['is a 404', () => new PayoutsResponseError({ status: 404 })],
  ] as const) {
    test(`a payout whose read ${answer} goes behind the others: a later one is read before it is read again`, async ({
      assert,
      cleanup,
    }) => {
      const s = await setup(cleanup)
      const lagging = await s.byWebhook('failed', 'converting', { minutes: 10 })
      const next = await s.byWebhook('completed', 'delivered', { minutes: 5 })
      // Heard from in that order (whole seconds apart on every store).
      const heard = (id: string, ago: DurationLike) =>
        Payout.query()
          .where('payout_uuid', id)
          .update({ last_observed_at: dbDate(s.db.connection(), DateTime.now().minus(ago)) })
      await heard(lagging, { minutes: 10 })
      await heard(next, { minutes: 5 })
      // The service does not give the first one's end (yet); the second's it does.
      s.setAnswer((id) =>
        id === lagging
          ? lags()
          : { status: 'completed', step: 'delivered', providerMetadata: metadata('completed') }
      )
      // Room for one ended payout a run.
      const run = () => s.reconciler({ batchSize: 1 }).run()
      for (let i = 0; i < 3; i++) await run()
      assert.deepEqual(s.reads, [lagging, next, lagging])
      assert.deepEqual((await s.row(next)).providerMetadata, metadata('completed'))
      assert.isNull((await s.row(lagging)).providerMetadata)
    })
  }

  test('a payout the service does not know (404) is tried once a run within the window, never after', async ({
    assert,
    cleanup,
  }) => {
    const s = await setup(cleanup)
    const forgotten = await s.byWebhook('failed', 'converting', { hours: 2 })
    s.setAnswer(() => new PayoutsResponseError({ status: 404 }))
    for (let run = 0; run < 2; run++) {
      assert.deepInclude(await s.reconciler().run(), { checked: 1, ended: 1, missing: 1 })
    }
    assert.deepInclude(await s.reconciler({ later: { hours: 23 } }).run(), { missing: 0 })
    assert.deepEqual(s.reads, [forgotten, forgotten])
    assert.isNull((await s.row(forgotten)).providerMetadata)
  })

  test('quiet unfinished payouts come first; ended ones take the room they leave in the batch', async ({
    assert,
    cleanup,
  }) => {
    const s = await setup(cleanup)
    const running: string[] = []
    const ended: string[] = []
    for (let i = 0; i < 4; i++) {
      running.push(await s.byWebhook('processing', 'converting'))
      ended.push(await s.byWebhook('failed', 'converting'))
    }
    s.setAnswer((id) =>
      running.includes(id)
        ? { status: 'processing', step: 'converting' }
        : { status: 'failed', providerMetadata: metadata('conversion_failed') }
    )
    const kinds = (ids: string[]) => ids.map((id) => (ended.includes(id) ? 'ended' : 'running'))
    // A batch of 6 with 4 of each kind: the 4 unfinished ones, then 2 ended ones.
    const first = await s.reconciler({ batchSize: 6 }).run({ staleAfterMs: 0 })
    assert.deepInclude(first, { checked: 6, ended: 2 })
    assert.deepEqual(kinds(s.reads), ['running', 'running', 'running', 'running', 'ended', 'ended'])
    // The next run at the default staleness: the unfinished ones were just read, so the
    // other two ended ones get the batch.
    const second = await s.reconciler({ batchSize: 6 }).run()
    assert.deepInclude(second, { checked: 2, ended: 2 })
    assert.sameMembers(
      s.reads.filter((id) => ended.includes(id)),
      ended
    )
    for (const id of ended) {
      assert.equal((await s.row(id)).providerMetadata?.offramp?.status, 'conversion_failed')
    }
    // Done with: a run reads only running ones.
    assert.deepInclude(await s.reconciler({ batchSize: 6 }).run({ staleAfterMs: 0 }), {
      ended: 0,
    })
  })

  test("ended payouts' reads spend the run's rate budget", async ({ assert, cleanup }) => {
    const s = await setup(cleanup)
    for (let i = 0; i < 3; i++) await s.byWebhook('completed', 'delivered')
    s.setAnswer(() => ({ status: 'completed', providerMetadata: metadata('completed') }))
    // Half the budget left after the first read: the run stops there (budgetShare 0.5).
    s.client.rateLimit = { limit: 10, remaining: 5 }
    assert.deepInclude(await s.reconciler().run(), {
      checked: 1,
      ended: 1,
      stoppedForBudget: true,
    })
    s.client.rateLimit = null
    assert.deepInclude(await s.reconciler().run(), { checked: 2, ended: 2 })
  })
})

/** An emulator, a recording proxy in front of it, and a webhook subscription. */
async function startService(cleanup: Cleanup) {
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const wire = await startRecordingProxy(cleanup, emu.baseUrl)
  const client = testClient(cleanup, emu, { allowInsecureLoopbackWebhooks: true })
  const subscription = await client.webhooks.subscriptions.create({
    url: 'https://placeholder.example/h',
    events: ['payout.created', 'payout.status.updated'],
  })
  return {
    emu,
    wire,
    secret: subscription.secret as string,
    deliverTo: (url: string) => client.webhooks.subscriptions.update(subscription.id, { url }),
    /** Reads (GET) that reached this service. */
    reads: () => wire.requests.filter((r) => r.method === 'GET').map((r) => r.path),
  }
}

test.group(`Jobs | reconciliation of ended payouts, two accounts (${TEST_DB})`, (group) => {
  group.each.timeout(60_000)

  test("each account's reconciliation reads its own ended payouts, with its own key, once", async ({
    assert,
    cleanup,
  }) => {
    const main = await startService(cleanup)
    const eu = await startService(cleanup)
    const prefix = `e${Math.random().toString(36).slice(2, 8)}_`
    const events: string[] = []
    const host = await serveHostApp({
      root: BASE_URL,
      connection: connectionConfig('reconcile_ended'),
      transmit: true,
      tablePrefix: prefix,
      payouts: {
        clientRateLimiter: false,
        jobs: { enabled: false },
        ledger: { tablePrefix: prefix },
        default: 'main',
        accounts: {
          main: {
            apiKey: main.emu.apiKey,
            baseUrl: main.wire.baseUrl,
            webhook: { secret: main.secret },
          },
          eu: { apiKey: eu.emu.apiKey, baseUrl: eu.wire.baseUrl, webhook: { secret: eu.secret } },
        },
      },
      async setup({ app }) {
        const emitter = await app.container.make('emitter')
        emitter.onAny((name) => void events.push(String(name)))
      },
    })
    cleanup(() => host.close())
    await main.deliverTo(`${host.url}/webhooks/payouts`)
    await eu.deliverTo(`${host.url}/webhooks/payouts/eu`)
    const payouts = host.payouts as PayoutsManager
    const services = { main, eu }
    const ids: Record<string, string> = {}
    for (const account of ['main', 'eu'] as const) {
      const { emu } = services[account]
      // The service's clock a minute ahead of the app's (its manual clock stood still while
      // the app started).
      await emu.admin.advance(Math.max(0, Date.now() - emu.clock.now()) + 60_000)
      const service = payouts.use(account)
      const body = fiatBody(emu, { reference: 'scenario:fail' })
      ids[account] = (await service.execute(body)).result.payoutId
      await emu.admin.advance(20_000)
      await service.drainInbox()
    }
    const db = await host.app.container.make('lucid.db')
    const t = tableNames(prefix)
    const rowOf = async (account: string) => {
      const row = await db.from(t.payouts).where('payout_uuid', ids[account]).firstOrFail()
      return {
        account: row.account as string,
        status: row.status as string,
        offramp: (row.provider_metadata ? JSON.parse(row.provider_metadata) : null)?.offramp
          ?.status as string | undefined,
      }
    }
    assert.deepEqual(await rowOf('main'), { account: 'main', status: 'failed', offramp: undefined })
    assert.deepEqual(await rowOf('eu'), { account: 'eu', status: 'failed', offramp: undefined })
    const eventsBefore = events.filter((name) => name.startsWith('payouts:'))

    // main's run reads main's ended payout from main's service, and leaves eu's alone.
    assert.deepInclude(await payouts.use('main').reconcile(), { checked: 1, ended: 1 })
    assert.deepEqual(main.reads(), [`/payouts/${ids.main}`])
    assert.deepEqual(eu.reads(), [])
    assert.equal((await rowOf('main')).offramp, 'conversion_failed')
    assert.isUndefined((await rowOf('eu')).offramp)

    assert.deepInclude(await payouts.use('eu').reconcile(), { checked: 1, ended: 1 })
    assert.deepEqual(eu.reads(), [`/payouts/${ids.eu}`])
    assert.deepEqual(await rowOf('eu'), {
      account: 'eu',
      status: 'failed',
      offramp: 'conversion_failed',
    })

    // Once each: the next runs read nothing, and no app event fired for any of it.
    for (const account of ['main', 'eu']) {
      assert.deepInclude(await payouts.use(account).reconcile(), { checked: 0 })
    }
    assert.lengthOf(main.reads(), 1)
    assert.lengthOf(eu.reads(), 1)
    assert.deepEqual(
      events.filter((name) => name.startsWith('payouts:')),
      eventsBefore
    )
  })
})
