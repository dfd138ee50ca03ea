import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { request } from 'undici'
import { tableNames } from '../../src/database/schema.ts'
import type { DeliveryRecord } from '../../src/emulator/webhooks.ts'
import { startEmulator, testClient } from '../emulator/helpers.ts'
import { connectionConfig, setupDatabase, TEST_DB } from '../helpers/database.ts'
import { finalValues, startOtelCollector, type CollectedSpan } from '../helpers/otel_collector.ts'
import {
  EXECUTE_ROUTE,
  freePort,
  otelHostApp,
  startAppProcess,
  startTap,
  waitFor,
  type Exchange,
} from './otel_host_app.ts'

/**
 * The plugin's OpenTelemetry in a real host app that uses `@adonisjs/otel` as
 * docs/observability.md tells a user to (tests/observability/otel_host_app.ts): the app runs
 * as child processes (`bin/server.ts`, and `bin/console.ts payouts:work` in worker mode) and
 * exports over OTLP/HTTP to a collector of the test's (tests/helpers/otel_collector.ts), which
 * reads what each process flushed when SIGTERM stopped it. One payout is executed through a
 * route of the app and completed by the emulator's webhooks; the spans, their links, what they
 * hold and the metrics are checked against what crossed the wire.
 */

type Cleanup = (fn: () => Promise<void>) => void
type Mode = 'inline' | 'worker'

const SCOPE = '@svc/adonis-payouts'
const WEBHOOK_ROUTE = '/webhooks/payouts'
const EXECUTE_CALL = 'payouts client POST /rfq/execute'
/** Every name a span of the plugin may have in this run: templates only. */
const TEMPLATES = [
  'payouts execute',
  EXECUTE_CALL,
  'payouts webhook receive',
  'payouts inbox batch',
  'payouts notify',
]

/** The emulator's deliveries of a payout. */
const deliveriesOf = (emulated: Iterable<DeliveryRecord>, payoutId: string) =>
  [...emulated].filter((delivery) => JSON.parse(delivery.payload).data?.payoutId === payoutId)

/** The services around the app: the collector, the emulator and the taps on both ways. */
async function surroundings(cleanup: Cleanup) {
  const collector = await startOtelCollector(cleanup)
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const toService = await startTap(cleanup, emu.baseUrl)
  const port = await freePort()
  const toApp = await startTap(cleanup, `http://127.0.0.1:${port}`)
  const client = testClient(cleanup, emu, { allowInsecureLoopbackWebhooks: true })
  const subscription = await client.webhooks.subscriptions.create({
    url: `${toApp.url}${WEBHOOK_ROUTE}`,
    events: ['payout.created', 'payout.status.updated'],
  })
  return { collector, emu, toService, port, toApp, secret: subscription.secret as string }
}

/**
 * One payout, executed through the app's route and completed by the emulator's webhooks, in
 * a host app with `@adonisjs/otel` (and, in worker mode, `node ace payouts:work` beside it);
 * both processes stopped by SIGTERM once every delivery is applied and told.
 */
async function runPayout(cleanup: Cleanup, mode: Mode) {
  // Registered first: the tables are dropped after the processes are gone.
  const { db, prefix } = await setupDatabase(cleanup, 'otel')
  const tables = tableNames(prefix)
  const { collector, emu, toService, port, toApp, secret } = await surroundings(cleanup)
  const root = await otelHostApp(cleanup)
  const env = {
    PORT: port,
    OTEL_COLLECTOR_URL: collector.url,
    PAYOUTS_API_KEY: emu.apiKey,
    PAYOUTS_BASE_URL: toService.url,
    PAYOUTS_WEBHOOK_SECRET: secret,
    PAYOUTS_PROCESSING: mode,
    PAYOUTS_TABLE_PREFIX: prefix,
    DB_CONNECTION_JSON: JSON.stringify(connectionConfig('otel')),
  }
  const [web, worker] = await Promise.all([
    startAppProcess(cleanup, root, ['bin/server.ts'], env, /started HTTP server/),
    mode === 'worker'
      ? startAppProcess(
          cleanup,
          root,
          ['bin/console.ts', 'payouts:work', '--poll-interval-ms=100'],
          env,
          /payouts worker started/
        )
      : undefined,
  ])

  const pay = async () => {
    const recipient = emu.admin.seedRecipient()
    const appKey = `order-${randomUUID()}`
    const appBody = JSON.stringify({
      fromCurrency: 'USD',
      toCurrency: 'MXN',
      amount: 120,
      userPaymentMethodId: emu.admin.accountPaymentMethodId,
    })
    const response = await request(
      `http://127.0.0.1:${port}${EXECUTE_ROUTE.replace(':recipientId', recipient.id)}`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': appKey },
        body: appBody,
      }
    )
    const appAnswer = await response.body.text()
    if (response.statusCode !== 200) {
      throw new Error(`the app answered ${response.statusCode}: ${appAnswer}`)
    }
    const payoutId: string = JSON.parse(appAnswer).payoutId

    // The emulator's lifecycle runs to `completed`, each step delivered to the app.
    await emu.admin.advance(60_000)
    const emulated = () => deliveriesOf(emu.webhooks.deliveries.values(), payoutId)
    const deliveries = await waitFor(
      'the emulator delivered every event of the payout',
      () => {
        const sent = emulated()
        const completed = sent.some((d) => JSON.parse(d.payload).data.status === 'completed')
        return completed && sent.every((delivery) => delivery.status === 'succeeded') && sent
      },
      20_000,
      () => emulated().map((d) => `${d.eventType} ${d.status} (${d.lastStatusCode})`)
    )
    const count = async (query: any) => Number((await query.count('* as n'))[0].n)
    await waitFor(
      'the app applied every delivery and told every change',
      async () => {
        const payout = await db.from(tables.payouts).where('payout_uuid', payoutId).first()
        const processed = db.from(tables.webhookDeliveries).where('state', 'processed')
        const untold = db.from(tables.payoutEvents).whereNull('notified_at')
        return (
          payout?.status === 'completed' &&
          (await count(processed)) === deliveries.length &&
          (await count(untold)) === 0
        )
      },
      20_000
    )
    const rows = await db.from(tables.webhookDeliveries).select('delivery_id', 'trace_parent')
    // A change's span ends as its row is marked told: a moment for the last one to end.
    await new Promise((resolve) => setTimeout(resolve, 500))
    // SIGTERM: the stock entry points terminate the app, the otel provider flushes.
    const [webExit, workerExit] = await Promise.all([web.stop(), worker?.stop()])
    return {
      payoutId,
      recipientId: recipient.id,
      deliveries,
      /** The W3C traceparent stored with each delivery's inbox row, by delivery id. */
      storedTraceParents: new Map<string, string | null>(
        rows.map((row: { delivery_id: string; trace_parent: string | null }) => [
          row.delivery_id,
          row.trace_parent,
        ])
      ),
      appKey,
      appBody,
      appAnswer,
      exits: { web: webExit, worker: workerExit },
    }
  }

  const paid = await pay().catch((error: Error) => {
    // A failure of the run, not of an assertion: what the processes said.
    error.message += `\n--- bin/server.ts ---\n${web.output().slice(-4000)}`
    if (worker) error.message += `\n--- payouts:work ---\n${worker.output().slice(-4000)}`
    throw error
  })
  return {
    ...paid,
    mode,
    collector,
    web,
    worker,
    /** The process that applies the deliveries. */
    applier: worker ?? web,
    apiKey: emu.apiKey,
    secret,
    /** What the app sent the service, and its answers. */
    toService: toService.exchanges,
    /** What the service delivered to the app, and its answers. */
    toApp: toApp.exchanges,
  }
}

type Run = Awaited<ReturnType<typeof runPayout>>

const pidOf = (span: CollectedSpan) => span.resource['process.pid']
const ref = (span: { traceId: string; spanId: string }) => `${span.traceId}-${span.spanId}`

/** The one element of `list`, failing with `what` otherwise. */
function one<T>(assert: any, list: T[], what: string): T {
  assert.lengthOf(list, 1, what)
  return list[0]
}

/**
 * The payout's trace: the execute inside the request to the app's route, the client's call
 * inside it (and the HTTP client's request that reached the service inside that), a receive
 * span inside each webhook request, batches linked to the receive spans of their deliveries
 * (in whichever process received them), the changes told inside the execute and the batches.
 */
function assertTraced(assert: any, run: Run) {
  const all = run.collector.spans
  const byId = new Map(all.map((span) => [span.spanId, span]))
  const ours = all.filter((span) => span.scope === SCOPE)
  assert.deepEqual(run.collector.refused, [], 'every export was OTLP/JSON')
  assert.deepEqual(run.exits, { web: 0, worker: run.worker ? 0 : undefined }, 'clean exits')
  assert.deepEqual(
    ours.filter((span) => !TEMPLATES.includes(span.name)).map((span) => span.name),
    [],
    'no other span of the plugin'
  )
  assert.deepEqual(
    ours.filter((span) => span.status.code === 'ERROR').map((span) => span.name),
    [],
    'nothing failed'
  )

  // The execute, inside the server span of the app's route.
  const execute = one(
    assert,
    ours.filter((span) => span.name === 'payouts execute'),
    'one execute'
  )
  assert.equal(execute.kind, 'INTERNAL')
  assert.equal(pidOf(execute), run.web.pid)
  assert.deepInclude(execute.attributes, {
    'payouts.payout.id': run.payoutId,
    'payouts.outcome': 'succeeded',
    'payouts.key_origin': 'app',
    'payouts.flow': 'fiat_to_fiat',
  })
  const server = byId.get(execute.parentSpanId!)
  assert.exists(server, "the execute's parent was exported")
  assert.include(server, {
    kind: 'SERVER',
    name: `POST ${EXECUTE_ROUTE}`,
    traceId: execute.traceId,
  })
  assert.equal(server!.attributes['http.route'], EXECUTE_ROUTE)

  // The client's call, a child of the execute; the request that reached the service is the
  // HTTP client's span inside it (its traceparent crossed the wire).
  const calls = ours.filter((span) => span.kind === 'CLIENT')
  assert.deepEqual(
    run.toService.map((exchange) => `${exchange.method} ${exchange.path}`),
    ['POST /rfq/execute'],
    'what reached the service'
  )
  assert.deepEqual(
    calls.map((call) => call.name),
    [EXECUTE_CALL]
  )
  for (const call of calls) {
    assert.equal(call.parentSpanId, execute.spanId, `${call.name} is a child of the execute`)
    assert.equal(call.traceId, execute.traceId)
    assert.include(call.attributes, {
      'http.request.method': 'POST',
      'http.route': '/rfq/execute',
      'url.template': '/rfq/execute',
      'http.response.status_code': 200,
    })
  }
  for (const exchange of run.toService) {
    const [, traceId, spanId] = String(exchange.headers.traceparent).split('-')
    const sent = byId.get(spanId)
    assert.exists(sent, `the span of ${exchange.path} as it reached the service`)
    assert.include(sent, { traceId, kind: 'CLIENT' })
    assert.include(calls, byId.get(sent!.parentSpanId!), 'sent inside a call of the client')
  }

  // One receive span per delivery POSTed, inside its request's server span, in the web process.
  const deliveryIds = run.deliveries.map((delivery) => delivery.id)
  assert.lengthOf(run.toApp, run.deliveries.length, 'each delivery POSTed once')
  const receives = ours.filter((span) => span.name === 'payouts webhook receive')
  assert.sameMembers(
    receives.map((span) => span.attributes['messaging.message.id']),
    deliveryIds
  )
  assert.lengthOf(receives, deliveryIds.length)
  const receiveOf = new Map(receives.map((span) => [span.attributes['messaging.message.id'], span]))
  for (const delivery of run.deliveries) {
    const receive = receiveOf.get(delivery.id)!
    assert.equal(pidOf(receive), run.web.pid, 'received by the web process')
    assert.equal(receive.kind, 'INTERNAL')
    assert.deepInclude(receive.attributes, {
      'messaging.system': 'svc-payouts-webhooks',
      'messaging.operation.type': 'receive',
      'payouts.event_type': delivery.eventType,
      'payouts.source': 'http',
      'payouts.outcome': 'stored',
      'http.response.status_code': 200,
    })
    // The trace context the row carries to the batch, in whichever process applies it.
    assert.equal(
      run.storedTraceParents.get(delivery.id),
      `00-${receive.traceId}-${receive.spanId}-01`,
      `the traceparent stored with ${delivery.id}`
    )
    const webhookRequest = byId.get(receive.parentSpanId!)
    assert.exists(webhookRequest, `the request of ${delivery.id}`)
    assert.include(webhookRequest, { kind: 'SERVER', name: `POST ${WEBHOOK_ROUTE}` })
    assert.include(webhookRequest, { traceId: receive.traceId })
    assert.equal(webhookRequest!.attributes['http.route'], WEBHOOK_ROUTE)
  }

  // Batches: root spans in the applying process, each linked to the receive span of each of
  // its deliveries; every delivery applied once.
  const batches = ours.filter((span) => span.name === 'payouts inbox batch')
  assert.isAbove(batches.length, 0)
  const applied = batches.flatMap((batch) => batch.attributes['payouts.inbox.delivery_ids'])
  assert.sameMembers(applied, deliveryIds, 'each delivery in a batch')
  assert.lengthOf(applied, deliveryIds.length, 'and in one only')
  const receiveRefs = receives.map(ref)
  for (const batch of batches) {
    const ids = batch.attributes['payouts.inbox.delivery_ids'] as string[]
    assert.equal(pidOf(batch), run.applier.pid, 'applied by the process that applies')
    assert.equal(batch.kind, 'CONSUMER')
    assert.isNull(batch.parentSpanId, 'a batch is a root span')
    assert.deepInclude(batch.attributes, {
      'messaging.operation.type': 'process',
      'messaging.batch.message_count': ids.length,
      'payouts.inbox.path': 'transaction',
      'payouts.inbox.dead': 0,
    })
    const links = batch.links.map(ref)
    const requested = ids.map((id) => ref(receiveOf.get(id)!))
    assert.includeMembers(links, requested, 'linked to the request of each of its deliveries')
    if (run.mode === 'worker') {
      // Nothing was active in the worker's loop: the links are the web process's requests.
      assert.sameMembers(links, requested)
    } else {
      // Inline, the drain starts once the answer that kicked it is written, still in that
      // request's context: the one other link is that webhook request's server span.
      const webhookRequests = receives.map((receive) => ref(byId.get(receive.parentSpanId!)!))
      assert.includeMembers(
        [...receiveRefs, ...webhookRequests],
        links,
        'linked to the webhook requests only'
      )
    }
    for (const id of ids) assert.notEqual(batch.traceId, receiveOf.get(id)!.traceId)
  }

  // The changes told: the creation inside the execute, the others inside the batches.
  const notices = ours.filter((span) => span.name === 'payouts notify')
  for (const notice of notices) {
    assert.equal(notice.attributes['payouts.payout.id'], run.payoutId)
    assert.equal(notice.attributes['payouts.listener_failures'], 0)
  }
  const created = one(
    assert,
    notices.filter((notice) => notice.parentSpanId === execute.spanId),
    'the creation told inside the execute'
  )
  assert.deepInclude(created.attributes, {
    'payouts.status': 'pending',
    'payouts.events': ['payouts:created'],
  })
  const batchById = new Map(batches.map((batch) => [batch.spanId, batch]))
  for (const notice of notices.filter((candidate) => candidate !== created)) {
    const batch = batchById.get(notice.parentSpanId!)
    assert.exists(batch, `the change to ${notice.attributes['payouts.step']} told inside a batch`)
    assert.equal(notice.traceId, batch!.traceId)
    assert.equal(pidOf(notice), run.applier.pid)
  }
  const completed = one(
    assert,
    notices.filter((notice) => notice.attributes['payouts.status'] === 'completed'),
    'the completion told once'
  )
  assert.include(completed.attributes['payouts.events'] as string[], 'payouts:completed')
  return { notices }
}

/** Ids that a span name, `http.route` or `url.template` holds: none (templates only). */
function assertTemplates(assert: any, run: Run) {
  const ids = {
    'payout id': run.payoutId,
    'recipient id': run.recipientId,
    ...Object.fromEntries(run.deliveries.map((d) => [`delivery id ${d.id}`, d.id])),
  }
  const found: string[] = []
  for (const span of run.collector.spans) {
    const places = {
      'name': span.name,
      'http.route': span.attributes['http.route'],
      'url.template': span.attributes['url.template'],
    }
    for (const [place, value] of Object.entries(places)) {
      for (const [what, id] of Object.entries(ids)) {
        if (typeof value === 'string' && value.includes(id)) {
          found.push(`${span.scope} "${span.name}": ${place} holds the ${what}`)
        }
      }
    }
  }
  assert.deepEqual(found, [], found.join('; '))
  // The app's route was called with the recipient's id in its path: the server span's name
  // and route are the template, the id only in the request's URL.
  const server = run.collector.spans.find(
    (span) => span.kind === 'SERVER' && span.attributes['http.route'] === EXECUTE_ROUTE
  )!
  assert.equal(server.name, `POST ${EXECUTE_ROUTE}`)
  assert.include(
    String(server.attributes['http.target'] ?? server.attributes['url.path']),
    run.recipientId
  )
}

/** Every leaf of a JSON body as it is written in it (`"key":value`). */
function fragments(body: string): string[] {
  let parsed: unknown
  try {
    parsed = JSON.parse(body)
  } catch {
    return []
  }
  const found: string[] = []
  const walk = (value: unknown) => {
    if (value === null || typeof value !== 'object') return
    for (const [key, inner] of Object.entries(value)) {
      if (inner !== null && typeof inner === 'object') walk(inner)
      else found.push(`${JSON.stringify(key)}:${JSON.stringify(inner)}`)
    }
  }
  walk(parsed)
  return found
}

/** Every string a value holds (each element of an array, each value of an object). */
function textsOf(value: unknown): string[] {
  if (value === undefined || value === null) return []
  if (Array.isArray(value)) return value.flatMap(textsOf)
  if (typeof value === 'object') return Object.values(value).flatMap(textsOf)
  return [String(value)]
}

/**
 * No span (name, attribute, link, event, status), no metric attribute, no log record and no
 * resource holds the API key, the webhook secret, a signature, an Idempotency-Key or a body
 * (whole, or any of its `"key":value` leaves), nor the banking instructions: every value is
 * searched for each of them, as they crossed the wire.
 */
function assertNothingSecret(assert: any, run: Run) {
  const signatures = run.toApp.map((exchange) => String(exchange.headers['svc-signature']))
  const idempotencyKeys = run.toService.map((exchange) => exchange.headers['idempotency-key'])
  // The secrets looked for were on the wire, as they are written there.
  assert.isTrue(
    run.toService.every((exchange) => exchange.headers.authorization === `Bearer ${run.apiKey}`)
  )
  assert.isNotEmpty(signatures)
  for (const signature of signatures) assert.match(signature, /^t=\d+,v1=[0-9a-f]{64}$/)
  assert.deepEqual(idempotencyKeys, [run.appKey])
  const bodies = [
    run.appBody,
    run.appAnswer,
    ...run.toService.flatMap((exchange: Exchange) => [exchange.body, exchange.responseBody]),
    ...run.toApp.flatMap((exchange: Exchange) => [exchange.body, exchange.responseBody]),
  ]
  const executed = JSON.parse(run.toService[0].responseBody).data
  assert.exists(executed.bankingInstructions, 'the execute answered banking instructions')
  const needles: Array<{ what: string; text: string }> = [
    { what: 'the API key', text: run.apiKey },
    { what: 'the webhook secret', text: run.secret },
    ...signatures.flatMap((signature) => [
      { what: 'a signature header', text: signature },
      { what: 'a signature', text: signature.split('v1=')[1] },
    ]),
    ...idempotencyKeys.map((key) => ({ what: 'an Idempotency-Key', text: String(key) })),
    ...bodies.map((body) => ({ what: `a body (${body.slice(0, 40)}...)`, text: body })),
    ...bodies
      .flatMap(fragments)
      .map((fragment) => ({ what: `a body's ${fragment}`, text: fragment })),
    ...Object.entries(executed.bankingInstructions as Record<string, unknown>)
      .filter(([, value]) => String(value).length >= 6)
      .map(([key, value]) => ({ what: `the banking instructions' ${key}`, text: String(value) })),
  ]
  for (const needle of needles) assert.isAbove(needle.text.length, 5, needle.what)

  const places: Array<{ where: string; value: unknown }> = []
  for (const span of run.collector.spans) {
    const where = `span "${span.name}" (${span.scope})`
    places.push(
      { where: `${where} name`, value: span.name },
      { where: `${where} attributes`, value: span.attributes },
      { where: `${where} links`, value: span.links.map((link) => link.attributes) },
      { where: `${where} events`, value: span.events },
      { where: `${where} status`, value: span.status.message },
      { where: `${where} resource`, value: span.resource }
    )
  }
  for (const point of run.collector.points) {
    places.push({ where: `metric ${point.metric} (${point.scope})`, value: point.attributes })
  }
  for (const log of run.collector.logs) {
    places.push({ where: `log (${log.scope})`, value: [log.body, log.attributes] })
  }
  const found = new Set<string>()
  for (const { where, value } of places) {
    for (const text of textsOf(value)) {
      for (const needle of needles) {
        if (text.includes(needle.text)) found.add(`${where} holds ${needle.what}`)
      }
    }
  }
  const leaks = [...found]
  assert.deepEqual(leaks, [], `${leaks.length} leaks: ${leaks.slice(0, 8).join('; ')}`)
}

/**
 * The plugin's instruments as the processes reported them on exit, summed over processes:
 * each delivery received once (stored), applied once, the statuses the ledger told entered
 * once each, one execute that succeeded, one call of the service; nothing else. No attribute
 * holds an id.
 */
function assertMeasured(assert: any, run: Run, told: CollectedSpan[]) {
  const ours = run.collector.points.filter((point) => point.scope === SCOPE)
  const received = run.deliveries.length
  const statuses = [...new Set(told.map((notice) => notice.attributes['payouts.status']))]
  assert.includeMembers(statuses, ['pending', 'completed'])
  const expected: Record<string, number> = {
    'payouts.webhook.deliveries {"payouts.outcome":"stored"}': received,
    'payouts.webhook.ack.duration {"payouts.outcome":"stored"}': received,
    'payouts.inbox.rows_applied {"payouts.inbox.path":"transaction"}': received,
    ...Object.fromEntries(
      statuses.map((status) => [`payouts.payout.transitions {"payouts.status":"${status}"}`, 1])
    ),
    'payouts.execute.outcomes {"payouts.flow":"fiat_to_fiat","payouts.key_origin":"app","payouts.outcome":"succeeded"}': 1,
    'payouts.client.request.duration {"http.request.method":"POST","http.response.status_code":200,"http.route":"/rfq/execute"}':
      run.toService.length,
  }
  // The backlog gauges are samples (every 15 s at most): not what this run did.
  const counted = ours.filter((point) => point.type !== 'gauge')
  assert.deepEqual(Object.fromEntries(finalValues(counted)), expected)

  // Each where the work was done: received in the web process, applied where it is applied.
  const inProcess = (pid: number) =>
    Object.fromEntries(
      finalValues(counted.filter((point) => point.resource['process.pid'] === pid))
    )
  assert.equal(
    inProcess(run.web.pid)['payouts.webhook.deliveries {"payouts.outcome":"stored"}'],
    received
  )
  assert.equal(
    inProcess(run.applier.pid)['payouts.inbox.rows_applied {"payouts.inbox.path":"transaction"}'],
    received
  )

  const attributes = JSON.stringify(ours.map((point) => point.attributes))
  assert.notMatch(attributes, /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i)
  assert.notInclude(attributes, 'dlv_')
}

test.group(`Observability | @adonisjs/otel in a real host app (${TEST_DB})`, () => {
  test('inline: one payout executed over HTTP and completed by webhooks, traced and measured by the web process', async ({
    assert,
    cleanup,
  }) => {
    const run = await runPayout(cleanup, 'inline')
    const { notices } = assertTraced(assert, run)
    assertTemplates(assert, run)
    assertNothingSecret(assert, run)
    assertMeasured(assert, run, notices)
  }).timeout(60_000)

  test('worker mode: received by the web process, applied by node ace payouts:work, whose batches link to the web requests', async ({
    assert,
    cleanup,
  }) => {
    const run = await runPayout(cleanup, 'worker')
    const { notices } = assertTraced(assert, run)
    assertTemplates(assert, run)
    assertNothingSecret(assert, run)
    assertMeasured(assert, run, notices)
    // Two processes, each its own telemetry: the worker's batches are in traces of its own.
    const processes = new Set(run.collector.spans.map(pidOf))
    assert.sameMembers([...processes], [run.web.pid, run.worker!.pid])
  }).timeout(60_000)
})
