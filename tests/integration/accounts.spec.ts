import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { request } from 'undici'
import type { ApplicationService } from '@adonisjs/core/types'
import { Emitter } from '@adonisjs/core/events'
import { AppFactory } from '@adonisjs/core/factories/app'
import { Logger } from '@adonisjs/core/logger'
import { Database } from '@adonisjs/lucid/database'
import type { PayoutsEmulator } from '../../src/emulator/main.ts'
import {
  createPayoutsAccounts,
  createPayoutsIndexes,
  createPayoutsLeases,
  createPayoutsProviderMetadataAt,
  createPayoutsProviderMetadataDue,
  createPayoutsTables,
  createPayoutsTraceContext,
  dropPayoutsTables,
  tableNames,
} from '../../src/database/schema.ts'
import type { ScheduledJob } from '../../src/jobs/scheduler.ts'
import type { PayoutsManager } from '../../src/service/payouts_manager.ts'
import type { PayoutsService } from '../../src/service/payouts_service.ts'
import { signPayload } from '../../src/signature/signature.ts'
import { fiatBody, startEmulator, startReceiver, testClient, waitFor } from '../emulator/helpers.ts'
import { BASE_URL } from '../helpers/app.ts'
import { connectionConfig, TEST_DB } from '../helpers/database.ts'
import { serveHostApp } from '../helpers/host_app.ts'
import { startRecordingProxy } from '../helpers/recording_proxy.ts'

/**
 * Several accounts in one app (issue #28, docs/accounts.md): `main` and `eu`, each against
 * its own emulator (its own key and signing secret), one database, real HTTP both ways.
 */

type Cleanup = (fn: () => Promise<void>) => void

const MAIN_PATH = '/webhooks/payouts'
const EU_PATH = '/webhooks/payouts/eu'
const PAYOUT_EVENTS: Array<'payout.created' | 'payout.status.updated'> = [
  'payout.created',
  'payout.status.updated',
]

/** An emulator, a recording proxy in front of it (what reached it), and a subscription. */
async function startService(cleanup: Cleanup) {
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const wire = await startRecordingProxy(cleanup, emu.baseUrl)
  const client = testClient(cleanup, emu, { allowInsecureLoopbackWebhooks: true })
  // The app's URL is known once it listens: the subscription (and its secret) first.
  const subscription = await client.webhooks.subscriptions.create({
    url: 'https://placeholder.example/h',
    events: PAYOUT_EVENTS,
  })
  return {
    emu,
    wire,
    secret: subscription.secret as string,
    /** Points the emulator's deliveries at `url`. */
    deliverTo: (url: string) => client.webhooks.subscriptions.update(subscription.id, { url }),
    /** execute calls that reached this emulator. */
    executes: () => wire.count('POST', '/rfq/execute'),
  }
}

type Service = Awaited<ReturnType<typeof startService>>

/** The payouts config of an app with both accounts, each on its own service. */
function accountsConfig(
  prefix: string,
  main: Service,
  eu: Service,
  shared: Record<string, unknown> = {}
) {
  return {
    clientRateLimiter: false,
    jobs: { enabled: false },
    ...shared,
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
  }
}

interface AppInstance {
  app: ApplicationService
  payouts: PayoutsManager
  url: string
  events: Array<{ name: string; data: any }>
  /** Stops it (once; the test's cleanup does it otherwise). */
  close(): Promise<void>
}

/**
 * A real host app over HTTP on the suite's database, every event it emits kept in `events`.
 * The payouts tables are created under `prefix` (and dropped on close) unless `tables` is
 * `shared`: they exist already (another instance's, or a ledger the test migrated itself).
 */
async function startApp(
  cleanup: Cleanup,
  payouts: Record<string, unknown>,
  options: { prefix: string; tables?: 'create' | 'shared' }
): Promise<AppInstance> {
  const events: AppInstance['events'] = []
  const tables = options.tables ?? 'create'
  const host = await serveHostApp({
    root: BASE_URL,
    connection: connectionConfig('accounts'),
    transmit: true,
    ...(tables === 'create' ? { tablePrefix: options.prefix } : {}),
    payouts,
    async setup({ app }) {
      const emitter = await app.container.make('emitter')
      emitter.onAny((name, data) => void events.push({ name: String(name), data }))
    },
  })
  let closed = false
  const close = async () => {
    if (closed) return
    closed = true
    await host.close()
  }
  cleanup(close)
  return {
    app: host.app,
    payouts: host.payouts as PayoutsManager,
    url: host.url,
    events,
    close,
  }
}

/** A connection of the test's own (no model touched): the migrations an operator runs. */
async function migrationConnection(cleanup: Cleanup) {
  const app = new AppFactory().create(BASE_URL)
  await app.init()
  const db = new Database(
    { connection: 'primary', connections: { primary: connectionConfig('accounts') as any } },
    new Logger({ enabled: false }),
    new Emitter(app)
  )
  cleanup(() => db.manager.closeAll())
  return db
}

/** Two accounts in one app, each on its own emulator, their webhooks posted to the app. */
async function setup(cleanup: Cleanup, shared: Record<string, unknown> = {}) {
  const main = await startService(cleanup)
  const eu = await startService(cleanup)
  const prefix = `a${Math.random().toString(36).slice(2, 8)}_`
  const instance = await startApp(cleanup, accountsConfig(prefix, main, eu, shared), { prefix })
  await main.deliverTo(`${instance.url}${MAIN_PATH}`)
  await eu.deliverTo(`${instance.url}${EU_PATH}`)
  const db = await instance.app.container.make('lucid.db')
  return { main, eu, prefix, ...instance, db, t: tableNames(prefix) }
}

type Setup = Awaited<ReturnType<typeof setup>>

/** Every row of the tables, in id order: what "nothing changed" is compared on. */
async function snapshot(s: Pick<Setup, 'db' | 't'>) {
  const rows = async (table: string) =>
    JSON.parse(JSON.stringify(await s.db.from(table).select('*').orderBy('id', 'asc')))
  return {
    payouts: await rows(s.t.payouts),
    payoutEvents: await rows(s.t.payoutEvents),
    deliveries: await rows(s.t.webhookDeliveries),
  }
}

/** The emulator's delivery with this id: payload, event type, account. */
function deliveryOf(emu: PayoutsEmulator, id: string) {
  const delivery = emu.webhooks.deliveries.get(id)
  if (!delivery) throw new Error(`no delivery ${id}`)
  return delivery
}

/** POSTs a delivery to the app as the service would, signed with `secret` now. */
async function post(
  url: string,
  delivery: { id: string; eventType: string; payload: string },
  secret: string
) {
  const response = await request(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'svc-signature': signPayload(secret, Math.floor(Date.now() / 1000), delivery.payload),
      'svc-delivery-id': delivery.id,
      'svc-event-type': delivery.eventType,
    },
    body: delivery.payload,
  })
  return { status: response.statusCode, body: await response.body.text() }
}

/** Moves the emulator's time on and applies what its webhooks brought (bounded). */
async function advanceAndDrain(emu: PayoutsEmulator, service: PayoutsService, ms: number) {
  await emu.admin.advance(ms)
  await service.drainInbox()
}

/** Waits for `promise`, failing after `ms` (its timer cleared either way). */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not done within ${ms} ms`)), ms)
  })
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}

/** Waits for an app event (bounded). */
function eventually(events: AppInstance['events'], check: (e: AppInstance['events']) => boolean) {
  return waitFor(() => check(events), 10_000)
}

const payoutEvents = (events: AppInstance['events'], payoutId: string) =>
  events.filter((e) => e.name.startsWith('payouts:') && e.data?.payoutId === payoutId)

test.group(`Accounts | two accounts in one app, each on its own service (${TEST_DB})`, () => {
  test("each account's payout completes by its own account's webhooks", async ({
    assert,
    cleanup,
  }) => {
    const s = await setup(cleanup)
    const eu = s.payouts.use('eu')
    const fromMain = await s.payouts.execute(fiatBody(s.main.emu, { amount: 50 }))
    const fromEu = await eu.execute(fiatBody(s.eu.emu, { amount: 70 }))
    const mainId = fromMain.result.payoutId
    const euId = fromEu.result.payoutId
    assert.notEqual(mainId, euId)

    await advanceAndDrain(s.main.emu, s.payouts, 60_000)
    await advanceAndDrain(s.eu.emu, eu, 60_000)
    await eventually(
      s.events,
      (events) =>
        payoutEvents(events, mainId).some((e) => e.name === 'payouts:completed') &&
        payoutEvents(events, euId).some((e) => e.name === 'payouts:completed')
    )

    // Each ledger row carries its account.
    const rows = await s.db
      .from(s.t.payouts)
      .select('account', 'payout_uuid', 'status', 'step')
      .orderBy('account', 'asc')
    assert.deepEqual(
      rows.map((r: any) => ({ ...r })),
      [
        { account: 'eu', payout_uuid: euId, status: 'completed', step: 'delivered' },
        { account: 'main', payout_uuid: mainId, status: 'completed', step: 'delivered' },
      ]
    )
    const logged = await s.db.from(s.t.payoutEvents).select('account', 'payout_uuid')
    assert.isAbove(logged.length, 2)
    for (const row of logged) {
      assert.equal(row.account, row.payout_uuid === euId ? 'eu' : 'main', row.payout_uuid)
    }
    // Every stored delivery is the account's whose emulator sent it.
    const deliveries = await s.db.from(s.t.webhookDeliveries).select('account', 'delivery_id')
    assert.isAbove(deliveries.length, 2)
    for (const row of deliveries) {
      const sender = s.main.emu.webhooks.deliveries.has(row.delivery_id) ? 'main' : 'eu'
      assert.isTrue(
        (sender === 'main' ? s.main : s.eu).emu.webhooks.deliveries.has(row.delivery_id)
      )
      assert.equal(row.account, sender, row.delivery_id)
    }
    const intents = await s.db
      .from(s.t.executionIntents)
      .select('account', 'payout_uuid')
      .orderBy('account', 'asc')
    assert.deepEqual(
      intents.map((r: any) => [r.account, r.payout_uuid]),
      [
        ['eu', euId],
        ['main', mainId],
      ]
    )

    // The app events of each carry their account (eventKey scoped for accounts but main).
    const mainEvents = payoutEvents(s.events, mainId)
    const euEvents = payoutEvents(s.events, euId)
    assert.includeMembers(
      mainEvents.map((e) => e.name),
      ['payouts:created', 'payouts:completed']
    )
    assert.includeMembers(
      euEvents.map((e) => e.name),
      ['payouts:created', 'payouts:completed']
    )
    for (const event of mainEvents) {
      assert.equal(event.data.account, 'main', event.name)
      assert.notMatch(event.data.eventKey, /^[a-z][a-z0-9_-]*\//)
    }
    for (const event of euEvents) {
      assert.equal(event.data.account, 'eu', event.name)
      assert.isTrue(event.data.eventKey.startsWith('eu/'), event.data.eventKey)
    }

    // Each service received only its own account's call.
    assert.equal(s.main.executes(), 1)
    assert.equal(s.eu.executes(), 1)
    assert.deepEqual(
      s.main.emu.admin.payouts().map((p) => p.payoutId),
      [mainId]
    )
    assert.deepEqual(
      s.eu.emu.admin.payouts().map((p) => p.payoutId),
      [euId]
    )
    // And every delivery each service sent was acknowledged by its account's route.
    for (const emu of [s.main.emu, s.eu.emu]) {
      assert.deepEqual([...new Set(emu.admin.deliveries().map((d) => d.status))], ['succeeded'])
    }
  })

  test("a delivery posted to the other account's route is refused and changes nothing", async ({
    assert,
    cleanup,
  }) => {
    const s = await setup(cleanup)
    const eu = s.payouts.use('eu')
    const mainId = (await s.payouts.execute(fiatBody(s.main.emu))).result.payoutId
    const euId = (await eu.execute(fiatBody(s.eu.emu))).result.payoutId
    await advanceAndDrain(s.main.emu, s.payouts, 0)
    await advanceAndDrain(s.eu.emu, eu, 0)
    await eventually(
      s.events,
      (events) => payoutEvents(events, mainId).length > 0 && payoutEvents(events, euId).length > 0
    )

    // main's next deliveries (about main's payout), genuine but not given to the app yet.
    const held = await startReceiver(cleanup)
    await s.main.deliverTo(held.url)
    await s.main.emu.admin.advance(60_000)
    assert.isAbove(held.received.length, 0)
    const mainUpdate = held.received.find((r) => {
      const body = JSON.parse(r.raw.toString())
      return r.headers['svc-event-type'] === 'payout.status.updated' && body.data
    })!
    assert.exists(mainUpdate)
    const mainDelivery = deliveryOf(s.main.emu, mainUpdate.headers['svc-delivery-id'] as string)
    assert.include(mainDelivery.payload, mainId)
    // eu's first delivery (its payout.created), which eu's route has stored already.
    const euDelivery = [...s.eu.emu.webhooks.deliveries.values()][0]
    assert.include(euDelivery.payload, euId)

    const before = await snapshot(s)
    assert.isAbove(before.deliveries.length, 1)
    const appEvents = () => s.events.filter((e) => e.name.startsWith('payouts:'))
    const eventsBefore = appEvents().length

    // Signed with eu's secret, posted to main's route: main's secret does not verify it.
    const euSigned = [
      // about main's payout, a delivery the app never saw
      await post(`${s.url}${MAIN_PATH}`, mainDelivery, s.eu.secret),
      // eu's own genuine delivery, under the id eu's row has
      await post(`${s.url}${MAIN_PATH}`, euDelivery, s.eu.secret),
    ]
    // A genuine main delivery re-posted to eu's route, exactly as the service signed it.
    const replayedToEu = await request(`${s.url}${EU_PATH}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'svc-signature': mainUpdate.headers['svc-signature'] as string,
        'svc-delivery-id': mainUpdate.headers['svc-delivery-id'] as string,
        'svc-event-type': mainUpdate.headers['svc-event-type'] as string,
      },
      body: mainUpdate.raw,
    })
    const replayedStatus = replayedToEu.statusCode
    await replayedToEu.body.dump()
    // A main payout's delivery re-signed with main's secret still names main's payout: eu's
    // route does not know that secret either.
    const mainSignedToEu = await post(`${s.url}${EU_PATH}`, mainDelivery, s.main.secret)

    // The route answers 400 to any signature it cannot verify (webhook_receiver.ts #reject).
    assert.deepEqual(
      [...euSigned.map((r) => r.status), replayedStatus, mainSignedToEu.status],
      [400, 400, 400, 400]
    )
    await s.payouts.drainInbox()
    await eu.drainInbox()
    assert.deepEqual(await snapshot(s), before, 'no row of either account changed')
    assert.equal(appEvents().length, eventsBefore, 'no app event')

    // The control: the same delivery on main's own route, as signed, applies to main only.
    const genuine = await post(`${s.url}${MAIN_PATH}`, mainDelivery, s.main.secret)
    assert.equal(genuine.status, 200)
    await s.payouts.drainInbox()
    const after = await snapshot(s)
    const stored = after.deliveries.filter((d: any) => d.delivery_id === mainDelivery.id)
    assert.deepEqual(
      stored.map((d: any) => d.account),
      ['main']
    )
    assert.deepEqual(
      after.payouts.find((p: any) => p.payout_uuid === euId),
      before.payouts.find((p: any) => p.payout_uuid === euId),
      "eu's payout untouched"
    )
  })

  test("a signing secret one account stored is not accepted by another account's route", async ({
    assert,
    cleanup,
  }) => {
    const s = await setup(cleanup)
    const eu = s.payouts.use('eu')
    const mainId = (await s.payouts.execute(fiatBody(s.main.emu))).result.payoutId
    await advanceAndDrain(s.main.emu, s.payouts, 0)
    await eventually(s.events, (events) => payoutEvents(events, mainId).length > 0)
    // A subscription made through main's service: its secret kept in the ledger, for main.
    const { id } = await s.payouts.webhooks.create({ url: 'https://hooks.example.com/main' })
    const stored = s.main.emu.webhooks.subscriptions.get(id)!.secret
    assert.include(await s.payouts.webhookSecrets(), stored)
    assert.notInclude(await eu.webhookSecrets(), stored, "eu's route does not accept it")

    // A delivery about main's payout, signed with that secret, to eu's route: refused.
    const created = [...s.main.emu.webhooks.deliveries.values()][0]
    assert.include(created.payload, mainId)
    const before = await snapshot(s)
    const toEu = await post(`${s.url}${EU_PATH}`, { ...created, id: `dlv_${randomUUID()}` }, stored)
    assert.equal(toEu.status, 400)
    await eu.drainInbox()
    assert.deepEqual(await snapshot(s), before, 'no row of either account changed')
    // To main's own route it is accepted, as main's.
    const toMain = await post(
      `${s.url}${MAIN_PATH}`,
      { ...created, id: `dlv_${randomUUID()}` },
      stored
    )
    assert.equal(toMain.status, 200)
  })

  test('one idempotency key in both accounts makes one payout per account', async ({
    assert,
    cleanup,
  }) => {
    const s = await setup(cleanup)
    const eu = s.payouts.use('eu')
    const mainBody = fiatBody(s.main.emu, { amount: 42 })
    const euBody = fiatBody(s.eu.emu, { amount: 42 })
    // 'order-1' itself is too short: keys are 8 to 255 url-safe characters.
    const key = 'order-0001'
    const first = await s.payouts.execute(mainBody, { idempotencyKey: key })
    const second = await eu.execute(euBody, { idempotencyKey: key })
    assert.notEqual(first.result.payoutId, second.result.payoutId)
    assert.deepEqual([s.main.executes(), s.eu.executes()], [1, 1])
    assert.deepEqual(
      s.main.emu.admin.payouts().map((p) => [p.payoutId, p.idempotencyKey]),
      [[first.result.payoutId, key]]
    )
    assert.deepEqual(
      s.eu.emu.admin.payouts().map((p) => [p.payoutId, p.idempotencyKey]),
      [[second.result.payoutId, key]]
    )

    // Again in each account: that account's payout, from its ledger, no new call.
    const mainAgain = await s.payouts.execute(mainBody, { idempotencyKey: key })
    const euAgain = await eu.execute(euBody, { idempotencyKey: key })
    assert.equal(mainAgain.result.payoutId, first.result.payoutId)
    assert.equal(euAgain.result.payoutId, second.result.payoutId)
    assert.deepEqual([s.main.executes(), s.eu.executes()], [1, 1])

    const intents = await s.db
      .from(s.t.executionIntents)
      .select('account', 'idempotency_key', 'payout_uuid', 'state')
      .orderBy('account', 'asc')
    assert.deepEqual(
      intents.map((r: any) => [r.account, r.idempotency_key, r.payout_uuid, r.state]),
      [
        ['eu', key, second.result.payoutId, 'succeeded'],
        ['main', key, first.result.payoutId, 'succeeded'],
      ]
    )
    const payouts = await s.db
      .from(s.t.payouts)
      .select('account', 'payout_uuid')
      .orderBy('account', 'asc')
    assert.deepEqual(
      payouts.map((r: any) => [r.account, r.payout_uuid]),
      [
        ['eu', second.result.payoutId],
        ['main', first.result.payoutId],
      ]
    )
  })

  test("one account's 429 storm leaves the other's calls unaffected", async ({
    assert,
    cleanup,
  }) => {
    // The client-side rate limiter on (the default), as each account's own.
    const s = await setup(cleanup, {
      clientRateLimiter: true,
      retry: { maxRetries: 4, baseDelayMs: 10, jitter: 0 },
    })
    const eu = s.payouts.use('eu')
    const log: string[] = []
    const hooks = { main: s.payouts.client, eu: eu.client }
    const euResponses: Array<{ attempt: number; status: number; willRetry: boolean }> = []
    for (const [name, client] of Object.entries(hooks)) {
      client.on('request', (e) => void log.push(`${name}:request:${e.endpoint}:${e.attempt}`))
      client.on('response', (e) => {
        log.push(`${name}:response:${e.endpoint}:${e.attempt}:${e.status}`)
        if (name === 'eu')
          euResponses.push({ attempt: e.attempt, status: e.status, willRetry: e.willRetry })
      })
    }
    const mainBody = fiatBody(s.main.emu)
    const euBody = fiatBody(s.eu.emu)

    s.main.emu.admin.setFaults({ rateLimitStormRate: 1 })
    let mainOutcome: unknown
    const mainCall = s.payouts.execute(mainBody).then(
      (value) => (mainOutcome = value),
      (error) => (mainOutcome = error)
    )
    // main is in its storm: answered 429, waiting to retry.
    await waitFor(() => log.includes('main:response:execute:1:429'), 10_000)

    const fromEu = await eu.execute(euBody)
    assert.match(fromEu.result.payoutId, /.+/)
    assert.deepEqual(euResponses, [
      { attempt: 1, status: euResponses[0]?.status, willRetry: false },
    ])
    assert.isAtLeast(euResponses[0].status, 200)
    assert.isBelow(euResponses[0].status, 300)
    assert.equal(s.eu.executes(), 1, "eu's execute reached its service once")
    assert.equal(s.eu.emu.admin.faultStats().rateLimited, 0)
    // eu's call went out and was answered while main's was still waiting on its storm.
    assert.isUndefined(mainOutcome)
    const mainRetry = log.indexOf('main:request:execute:2')
    const euAnswered = log.indexOf(`eu:response:execute:1:${euResponses[0].status}`)
    if (mainRetry !== -1) assert.isBelow(euAnswered, mainRetry)

    // The storm passes: main's own call completes on a retry, in main's account.
    s.main.emu.admin.setFaults({})
    await within(mainCall, 15_000, "main's execute")
    assert.notInstanceOf(mainOutcome, Error, String(mainOutcome))
    const fromMain = mainOutcome as Awaited<ReturnType<PayoutsService['execute']>>
    assert.isAbove(s.main.emu.admin.faultStats().rateLimited, 0)
    assert.isAbove(log.filter((line) => line.startsWith('main:request:execute')).length, 1)
    const rows = await s.db
      .from(s.t.payouts)
      .select('account', 'payout_uuid')
      .orderBy('account', 'asc')
    assert.deepEqual(
      rows.map((r: any) => [r.account, r.payout_uuid]),
      [
        ['eu', fromEu.result.payoutId],
        ['main', fromMain.result.payoutId],
      ]
    )
  })

  test("each account's jobs run once per interval across two instances, independently", async ({
    assert,
    cleanup,
  }) => {
    const main = await startService(cleanup)
    const eu = await startService(cleanup)
    const prefix = `a${Math.random().toString(36).slice(2, 8)}_`
    // Jobs on, with intervals no test outlasts: the ticks below are the only runs.
    const config = accountsConfig(prefix, main, eu, {
      jobs: {
        enabled: true,
        reconcileEveryMs: 3_600_000,
        escrowEveryMs: 3_600_000,
        recoverEveryMs: 3_600_000,
        pruneEveryMs: 0,
      },
    })
    const first = await startApp(cleanup, config, { prefix })
    const second = await startApp(cleanup, config, { prefix, tables: 'shared' })
    // One payout in each account, so each reconcile reads one payout from its own service.
    const mainId = (await first.payouts.execute(fiatBody(main.emu))).result.payoutId
    const euId = (await first.payouts.use('eu').execute(fiatBody(eu.emu))).result.payoutId
    const reads = (service: Service) => service.wire.requests.filter((r) => r.method === 'GET')

    const instances = { first, second }
    const runs: string[] = []
    // Long enough that three rounds of ticks fall within one interval on a loaded machine.
    const INTERVAL = 2500
    /** Held runs, released in the cleanup too: a stopping scheduler waits for its runs. */
    const gates: Array<() => void> = []
    cleanup(async () => gates.forEach((open) => open()))
    const holdingRun = () => {
      let started!: () => void
      const running = new Promise<void>((resolve) => (started = resolve))
      let release!: () => void
      const gate = new Promise<void>((resolve) => (release = resolve))
      gates.push(release)
      const run = async () => {
        started()
        await gate
      }
      return { running, release, job: { name: 'reconcile', intervalMs: INTERVAL, run } }
    }
    /** The reconcile job of `account` on `instance`, as its scheduler runs it, counted. */
    const job = (instance: keyof typeof instances, account: string): ScheduledJob => ({
      name: 'reconcile',
      intervalMs: INTERVAL,
      run: async () => {
        runs.push(`${account}@${instance}`)
        return instances[instance].payouts.use(account).reconcile({ staleAfterMs: 0 })
      },
    })
    const scheduler = (instance: keyof typeof instances, account: string) =>
      instances[instance].payouts.use(account).startJobs()
    const round = async () => {
      const ticks = await Promise.all(
        (['first', 'second'] as const).flatMap((instance) =>
          ['main', 'eu'].map(async (account) => {
            const outcome = await (await scheduler(instance, account)).tick(job(instance, account))
            return [account, outcome] as const
          })
        )
      )
      const ran = (account: string) =>
        ticks.filter(([a, outcome]) => a === account && outcome === 'ran').length
      return { main: ran('main'), eu: ran('eu'), ticks }
    }

    const rounds = [await round(), await round(), await round()]
    assert.deepEqual(
      rounds.map((r) => [r.main, r.eu]),
      [
        [1, 1],
        [0, 0],
        [0, 0],
      ],
      JSON.stringify(rounds.map((r) => r.ticks))
    )
    assert.lengthOf(runs, 2)
    assert.sameMembers(
      runs.map((r) => r.split('@')[0]),
      ['main', 'eu']
    )
    // Each reconcile read its own payout from its own service, with its own key.
    assert.deepEqual(
      reads(main).map((r) => r.path),
      [`/payouts/${mainId}`]
    )
    assert.deepEqual(
      reads(eu).map((r) => r.path),
      [`/payouts/${euId}`]
    )

    // The next interval: once more per account, in total.
    await new Promise((resolve) => setTimeout(resolve, INTERVAL + 200))
    const next = await round()
    assert.deepEqual([next.main, next.eu], [1, 1], JSON.stringify(next.ticks))
    assert.lengthOf(runs, 4)
    assert.lengthOf(reads(main), 2)
    assert.lengthOf(reads(eu), 2)

    // main's job held (a run in progress on the first instance) does not stop eu's.
    await new Promise((resolve) => setTimeout(resolve, INTERVAL + 200))
    const mainHeld = holdingRun()
    const slowMain = (await scheduler('first', 'main')).tick(mainHeld.job)
    await within(mainHeld.running, 5000, "main's held run")
    const whileHeld = {
      mainElsewhere: await (await scheduler('second', 'main')).tick(job('second', 'main')),
      euElsewhere: await (await scheduler('second', 'eu')).tick(job('second', 'eu')),
    }
    mainHeld.release()
    assert.equal(await slowMain, 'ran')
    assert.deepEqual(whileHeld, { mainElsewhere: 'skipped', euElsewhere: 'ran' })
    // And the other way: eu's lock held now does not stop main's on the first instance.
    await new Promise((resolve) => setTimeout(resolve, INTERVAL + 200))
    const euHeld = holdingRun()
    const slowEu = (await scheduler('second', 'eu')).tick(euHeld.job)
    await within(euHeld.running, 5000, "eu's held run")
    const mainWhileEuHeld = await (await scheduler('first', 'main')).tick(job('first', 'main'))
    const euWhileHeld = await (await scheduler('first', 'eu')).tick(job('first', 'eu'))
    euHeld.release()
    assert.equal(await slowEu, 'ran')
    assert.deepEqual([mainWhileEuHeld, euWhileHeld], ['ran', 'skipped'])
  })
})

test.group(`Accounts | an app from before accounts (${TEST_DB})`, () => {
  test('its ledger, migrated, is account main: payouts, duplicates and new webhooks', async ({
    assert,
    cleanup,
  }) => {
    const migrations = await migrationConnection(cleanup)
    const service = await startService(cleanup)
    const { emu } = service
    const flat = (prefix: string) => ({
      apiKey: emu.apiKey,
      baseUrl: service.wire.baseUrl,
      clientRateLimiter: false,
      jobs: { enabled: false },
      webhook: { secret: service.secret },
      ledger: { tablePrefix: prefix },
    })

    // The app as it ran: one payout, its payout.created delivery stored and processed.
    const earlierPrefix = `a${Math.random().toString(36).slice(2, 8)}_`
    const earlier = await startApp(cleanup, flat(earlierPrefix), { prefix: earlierPrefix })
    await service.deliverTo(`${earlier.url}${MAIN_PATH}`)
    const { result } = await earlier.payouts.execute(fiatBody(emu, { amount: 30 }))
    const payoutId = result.payoutId
    await advanceAndDrain(emu, earlier.payouts, 0)
    await eventually(earlier.events, (events) =>
      payoutEvents(events, payoutId).some((e) => e.name === 'payouts:created')
    )
    const oldDelivery = [...emu.webhooks.deliveries.values()][0]
    assert.equal(oldDelivery.eventType, 'payout.created')

    // Its ledger as the first four migrations made it, holding those rows (the migrations
    // run on a connection of their own, as `node ace migration:run` does).
    const oldPrefix = `o${Math.random().toString(36).slice(2, 8)}_`
    const schema = () => migrations.connection().schema
    await createPayoutsTraceContext(
      createPayoutsLeases(
        createPayoutsIndexes(createPayoutsTables(schema(), oldPrefix), oldPrefix),
        oldPrefix
      ),
      oldPrefix
    )
    cleanup(() => dropPayoutsTables(schema(), oldPrefix))
    const from = tableNames(earlierPrefix)
    const to = tableNames(oldPrefix)
    for (const name of [
      'payouts',
      'payoutEvents',
      'webhookDeliveries',
      'executionIntents',
    ] as const) {
      const columns = Object.keys(await migrations.connection().columnsInfo(to[name]))
      assert.notInclude(columns, 'account')
      // Its own ids (a PostgreSQL sequence is not moved by rows inserted with theirs).
      columns.splice(columns.indexOf('id'), 1)
      const rows = await migrations.from(from[name]).select(columns).orderBy('id', 'asc')
      if (rows.length > 0) await migrations.table(to[name]).multiInsert(rows)
    }
    const oldRows = await migrations.from(to.webhookDeliveries).select('delivery_id', 'state')
    assert.deepEqual(
      oldRows.map((r: any) => [r.delivery_id, r.state]),
      [[oldDelivery.id, 'processed']]
    )
    assert.lengthOf(await migrations.from(to.payouts).where('payout_uuid', payoutId), 1)
    // The earlier app stops (its own tables go); the old ledger stays.
    await earlier.close()

    // The fifth migration and the later ones, as an upgrade runs them, then the app booted
    // with its old flat config on that ledger.
    await createPayoutsAccounts(schema(), oldPrefix)
    await createPayoutsProviderMetadataAt(schema(), oldPrefix)
    await createPayoutsProviderMetadataDue(schema(), oldPrefix)
    const upgraded = await startApp(cleanup, flat(oldPrefix), {
      prefix: oldPrefix,
      tables: 'shared',
    })
    const udb = await upgraded.app.container.make('lucid.db')
    await service.deliverTo(`${upgraded.url}${MAIN_PATH}`)
    assert.deepEqual(upgraded.payouts.accounts, ['main'])

    // Its payout is account main.
    const found = await udb.from(to.payouts).where('payout_uuid', payoutId).select('account')
    assert.deepEqual(
      found.map((r: any) => r.account),
      ['main']
    )
    const { Payout } = await import('../../src/models/main.ts')
    const model = await Payout.query()
      .where('account', 'main')
      .where('payout_uuid', payoutId)
      .first()
    assert.exists(model, 'the model finds it in account main')

    // A redelivery of the old delivery id is still a duplicate.
    const deliveriesBefore = await udb.from(to.webhookDeliveries).select('*').orderBy('id')
    const again = await post(`${upgraded.url}${MAIN_PATH}`, oldDelivery, service.secret)
    assert.equal(again.status, 200)
    assert.deepInclude(JSON.parse(again.body), { duplicate: true })
    await upgraded.payouts.drainInbox()
    assert.deepEqual(
      JSON.parse(JSON.stringify(await udb.from(to.webhookDeliveries).select('*').orderBy('id'))),
      JSON.parse(JSON.stringify(deliveriesBefore))
    )
    assert.equal(deliveriesBefore[0].account, 'main')

    // A new webhook for that payout applies.
    await advanceAndDrain(emu, upgraded.payouts, 60_000)
    await eventually(upgraded.events, (events) =>
      payoutEvents(events, payoutId).some((e) => e.name === 'payouts:completed')
    )
    const row = await udb
      .from(to.payouts)
      .where('payout_uuid', payoutId)
      .select('account', 'status', 'step')
    assert.deepEqual(
      row.map((r: any) => ({ ...r })),
      [{ account: 'main', status: 'completed', step: 'delivered' }]
    )
    const fresh = await udb
      .from(to.webhookDeliveries)
      .whereNot('delivery_id', oldDelivery.id)
      .select('account', 'state', 'event_type', 'last_error')
    assert.isAbove(fresh.length, 0)
    for (const { last_error: lastError, event_type: type, ...delivery } of fresh) {
      assert.deepEqual(
        { ...delivery },
        { account: 'main', state: 'processed' },
        `${type}: ${lastError}`
      )
    }
    for (const event of payoutEvents(upgraded.events, payoutId)) {
      assert.equal(event.data.account, 'main')
      // main's keys are a one-account app's: no account in front.
      assert.notMatch(event.data.eventKey, /^[a-z][a-z0-9_-]*\//)
    }
    assert.equal(service.executes(), 1, 'nothing sent again')
  })
})
