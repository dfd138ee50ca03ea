import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { test } from '@japa/runner'
import { context, metrics, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { MeterProvider, MetricReader, type MetricData } from '@opentelemetry/sdk-metrics'
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base'
import { request } from 'undici'
import { PayoutsInstrumentation } from '../../src/otel/main.ts'
import { signPayload } from '../../src/signature/main.ts'
import { channels, traced } from '../../src/tracing/channels.ts'
import { TEST_API_KEY } from '../helpers/app.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'
import { partsOf } from '../../src/service/payouts_service.ts'

const REPO = fileURLToPath(new URL('../../', import.meta.url))
const file = (path: string) => pathToFileURL(join(REPO, path)).href

/** A reader that exports nothing: the test collects when it wants to look. */
class ManualReader extends MetricReader {
  protected async onShutdown() {}
  protected async onForceFlush() {}
}

/**
 * OpenTelemetry as an app's SDK would set it: the AsyncLocalStorage context manager, a tracer
 * provider exporting to memory, a meter provider read by hand; all three global, all three
 * taken down in cleanup so that other specs run without them.
 */
function otelSdk(cleanup: (fn: () => Promise<void>) => void) {
  const contextManager = new AsyncLocalStorageContextManager().enable()
  context.setGlobalContextManager(contextManager)
  const exporter = new InMemorySpanExporter()
  const tracerProvider = new BasicTracerProvider({
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  })
  trace.setGlobalTracerProvider(tracerProvider)
  const reader = new ManualReader()
  const meterProvider = new MeterProvider({ readers: [reader] })
  metrics.setGlobalMeterProvider(meterProvider)
  cleanup(async () => {
    await tracerProvider.shutdown()
    await meterProvider.shutdown()
    trace.disable()
    metrics.disable()
    context.disable()
  })
  return {
    spans: () => exporter.getFinishedSpans(),
    meterProvider,
    /** The plugin's instruments as collected now. */
    async metrics() {
      const { resourceMetrics, errors } = await reader.collect()
      if (errors.length > 0) throw errors[0]
      const scoped = resourceMetrics.scopeMetrics.filter(
        (scope) => scope.scope.name === '@svc/adonis-payouts'
      )
      return new Collected(scoped.flatMap((scope) => scope.metrics))
    },
  }
}

/** Sums of counters and counts of histograms, over the points whose attributes match. */
class Collected {
  constructor(readonly all: MetricData[]) {}

  points(name: string, attributes: Record<string, unknown> = {}) {
    const metric = this.all.find((candidate) => candidate.descriptor.name === name)
    return (metric?.dataPoints ?? []).filter((point) =>
      Object.entries(attributes).every(([key, value]) => point.attributes[key] === value)
    ) as Array<{ attributes: Record<string, unknown>; value: any }>
  }

  sum(name: string, attributes: Record<string, unknown> = {}) {
    return this.points(name, attributes).reduce((total, point) => total + point.value, 0)
  }

  count(name: string, attributes: Record<string, unknown> = {}) {
    return this.points(name, attributes).reduce((total, point) => total + point.value.count, 0)
  }

  descriptor(name: string) {
    return this.all.find((candidate) => candidate.descriptor.name === name)?.descriptor
  }
}

function instrument(cleanup: (fn: () => void) => void, config = {}) {
  const instrumentation = new PayoutsInstrumentation(config)
  cleanup(() => instrumentation.disable())
  return instrumentation
}

const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i
const named = (spans: ReadableSpan[], name: string) => spans.filter((span) => span.name === name)
const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId
const idOf = (span: ReadableSpan) => span.spanContext().spanId

/** Everything a span exports: its name, attributes, events, status and links. */
function exported(spans: ReadableSpan[]) {
  return JSON.stringify(
    spans.map((span) => ({
      name: span.name,
      attributes: span.attributes,
      events: span.events.map((event) => ({ name: event.name, attributes: event.attributes })),
      status: span.status,
      links: span.links.map((link) => link.attributes ?? {}),
    }))
  )
}

async function forgedDelivery(url: string) {
  const forged = JSON.stringify({
    type: 'payout.created',
    createdAt: new Date().toISOString(),
    data: {},
  })
  const refused = await request(`${url}/webhooks/payouts`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'svc-delivery-id': 'dlv_forged_1',
      'svc-event-type': 'payout.created',
      'svc-signature': signPayload('whsec_not_ours', Math.floor(Date.now() / 1000), forged),
    },
    body: forged,
  })
  await refused.body.text()
  return refused.statusCode
}

test.group(`Observability | OpenTelemetry instrumentation in a host app (${TEST_DB})`, () => {
  test('an execute and its webhooks give spans and metrics, with templates and nothing secret', async ({
    assert,
    cleanup,
  }) => {
    const otel = otelSdk(cleanup)
    const app = await startHttpApp(cleanup, { webhook: { secret: 'whsec_configured_secret' } })
    const fake = await app.payouts.fake()
    cleanup(() => app.payouts.restore())
    instrument(cleanup)
    const { payout } = await app.payouts.execute(
      {
        fromCurrency: 'USD',
        toCurrency: 'MXN',
        amount: 321,
        recipientId: fake.seedRecipient().id,
        userPaymentMethodId: fake.paymentMethodId,
        reference: 'order-secret-ref-77',
      },
      { idempotencyKey: 'payout-order-77' }
    )
    await fake.complete(payout)
    assert.equal(await forgedDelivery(app.url), 400)
    const spans = otel.spans()

    // The execute, and the service call made inside it as its child.
    const [execute, ...moreExecutes] = named(spans, 'payouts execute')
    assert.lengthOf(moreExecutes, 0)
    assert.equal(execute.kind, SpanKind.INTERNAL)
    assert.deepInclude(execute.attributes, {
      'payouts.key_origin': 'app',
      'payouts.payout.id': payout.payoutUuid,
      'payouts.flow': 'fiat_to_fiat',
      'payouts.outcome': 'succeeded',
    })
    assert.isNumber(execute.attributes['payouts.intent.id'])
    const clientCalls = spans.filter((span) => span.name.startsWith('payouts client '))
    const sent = clientCalls.filter((span) => parentOf(span) === idOf(execute))
    assert.lengthOf(sent, 1, 'the execute request is a child of the execute span')
    assert.equal(sent[0].kind, SpanKind.CLIENT)
    assert.equal(sent[0].spanContext().traceId, execute.spanContext().traceId)
    assert.equal(sent[0].attributes['http.request.method'], 'POST')
    assert.equal(sent[0].name, `payouts client POST ${sent[0].attributes['http.route']}`)
    assert.oneOf(sent[0].attributes['http.response.status_code'], [200, 201])

    // Every delivery at the route: the fake's stored, the forged one rejected.
    const received = named(spans, 'payouts webhook receive')
    const stored = received.filter((span) => span.attributes['payouts.outcome'] === 'stored')
    assert.isAbove(stored.length, 1, 'the fake delivered through the route')
    for (const span of stored) {
      assert.equal(span.kind, SpanKind.INTERNAL)
      assert.deepInclude(span.attributes, {
        'messaging.system': 'svc-payouts-webhooks',
        'messaging.operation.type': 'receive',
        'http.response.status_code': 200,
      })
      assert.isString(span.attributes['messaging.message.id'])
    }
    const forged = received.find(
      (span) => span.attributes['messaging.message.id'] === 'dlv_forged_1'
    )
    assert.deepInclude(forged!.attributes, {
      'payouts.outcome': 'rejected',
      'payouts.reason': 'no_matching_signature',
      'http.response.status_code': 400,
    })

    // The batches that applied them: root spans of their own, each delivery in one of them.
    const batches = named(spans, 'payouts inbox batch')
    assert.isAbove(batches.length, 0)
    const deliveryIds = stored.map((span) => span.attributes['messaging.message.id'] as string)
    const processed = batches.flatMap(
      (span) => span.attributes['payouts.inbox.delivery_ids'] as string[]
    )
    assert.includeMembers(processed, deliveryIds)
    for (const span of batches) {
      assert.equal(span.kind, SpanKind.CONSUMER)
      assert.isUndefined(parentOf(span), 'a batch is a root span')
      assert.isAtLeast(span.attributes['messaging.batch.message_count'] as number, 1)
    }

    // The changes told: the creation inside the execute that made it, one completion.
    const told = named(spans, 'payouts notify').filter(
      (span) => span.attributes['payouts.payout.id'] === payout.payoutUuid
    )
    const withEvent = (name: string) =>
      told.filter((span) => (span.attributes['payouts.events'] as string[]).includes(name))
    const [created, ...moreCreated] = withEvent('payouts:created')
    assert.lengthOf(moreCreated, 0)
    assert.equal(parentOf(created), idOf(execute), 'the creation is told inside the execute')
    const completed = withEvent('payouts:completed')
    assert.lengthOf(completed, 1)
    assert.equal(completed[0].attributes['payouts.status'], 'completed')
    // Told after the batch's COMMIT, in the batch's trace (not the request's that woke it).
    const batchOf = batches.find(
      (span) =>
        (span.attributes['payouts.inbox.delivery_ids'] as string[]).length > 0 &&
        idOf(span) === parentOf(completed[0])
    )
    assert.exists(batchOf, 'the completion is told inside the batch that applied it')
    for (const span of told) {
      assert.equal(span.kind, SpanKind.INTERNAL)
      assert.equal(span.status.code, SpanStatusCode.UNSET)
      assert.equal(span.attributes['payouts.listener_failures'], 0)
    }

    // Templates only in names and routes; nothing secret anywhere.
    for (const span of spans) {
      assert.isTrue(span.name.startsWith('payouts '), span.name)
      for (const text of [
        span.name,
        span.attributes['http.route'],
        span.attributes['url.template'],
      ]) {
        if (text === undefined) continue
        assert.notMatch(String(text), UUID, `${span.name}: no id`)
        for (const id of [...deliveryIds, 'dlv_forged_1']) assert.notInclude(String(text), id)
      }
    }
    assert.isTrue(clientCalls.every((span) => typeof span.attributes['http.route'] === 'string'))
    const everything = exported(spans)
    for (const secret of [
      TEST_API_KEY,
      fake.webhookSecret,
      'whsec_configured_secret',
      'v1=',
      'order-secret-ref-77',
      'payout-order-77',
    ]) {
      assert.notInclude(everything, secret)
    }

    // The metrics say the same.
    const measured = await otel.metrics()
    assert.equal(
      measured.sum('payouts.webhook.deliveries', { 'payouts.outcome': 'stored' }),
      stored.length
    )
    assert.equal(
      measured.sum('payouts.webhook.deliveries', {
        'payouts.outcome': 'rejected',
        'payouts.reason': 'no_matching_signature',
      }),
      1
    )
    assert.equal(measured.count('payouts.webhook.ack.duration'), received.length)
    assert.equal(measured.sum('payouts.inbox.rows_applied'), stored.length)
    assert.equal(measured.sum('payouts.inbox.dead_letters'), 0)
    assert.equal(measured.sum('payouts.payout.transitions', { 'payouts.status': 'completed' }), 1)
    assert.equal(measured.sum('payouts.execute.outcomes'), 1)
    assert.equal(
      measured.sum('payouts.execute.outcomes', {
        'payouts.outcome': 'succeeded',
        'payouts.key_origin': 'app',
      }),
      1
    )
    assert.equal(measured.count('payouts.client.request.duration'), clientCalls.length)
    assert.equal(
      measured.count('payouts.client.request.duration', {
        'http.request.method': 'POST',
        'http.route': sent[0].attributes['http.route'],
      }),
      1
    )
    assert.equal(measured.sum('payouts.listener.failures'), 0)
    assert.equal(measured.descriptor('payouts.webhook.ack.duration')?.unit, 's')
    assert.equal(measured.descriptor('payouts.webhook.deliveries')?.unit, '{delivery}')
    // No id of any kind among the instruments' attributes.
    const attributes = JSON.stringify(
      measured.all.flatMap((metric) => metric.dataPoints.map((point) => point.attributes))
    )
    assert.notMatch(attributes, UUID)
    for (const id of [...deliveryIds, 'dlv_forged_1']) assert.notInclude(attributes, id)
  }).timeout(60_000)

  test('a failed execute is an error span with its code, never its message', async ({
    assert,
    cleanup,
  }) => {
    const otel = otelSdk(cleanup)
    const app = await startHttpApp(cleanup)
    const fake = await app.payouts.fake()
    cleanup(() => app.payouts.restore())
    instrument(cleanup)
    const input = {
      fromCurrency: 'USD',
      toCurrency: 'MXN',
      amount: 55,
      recipientId: fake.seedRecipient().id,
      userPaymentMethodId: fake.paymentMethodId,
    }
    await app.payouts.execute(input, { idempotencyKey: 'order-key-reused-9' })
    // The same key with another body: refused, and the error's message names the key.
    const error = await app.payouts
      .execute({ ...input, amount: 56 }, { idempotencyKey: 'order-key-reused-9' })
      .catch((caught) => caught)
    assert.equal(error.code, 'E_PAYOUTS_IDEMPOTENCY_KEY_REUSED')
    assert.include(error.message, 'order-key-reused-9')

    const [, refused] = named(otel.spans(), 'payouts execute')
    assert.equal(refused.status.code, SpanStatusCode.ERROR)
    assert.equal(refused.attributes['error.type'], 'E_PAYOUTS_IDEMPOTENCY_KEY_REUSED')
    assert.equal(refused.attributes['payouts.outcome'], 'error')
    assert.deepEqual(
      refused.events.map((event) => event.attributes),
      [{ 'exception.type': 'E_PAYOUTS_IDEMPOTENCY_KEY_REUSED' }]
    )
    assert.notInclude(exported(otel.spans()), 'order-key-reused-9')
    const measured = await otel.metrics()
    assert.equal(measured.sum('payouts.execute.outcomes', { 'payouts.outcome': 'succeeded' }), 1)
    assert.equal(measured.sum('payouts.execute.outcomes', { 'payouts.outcome': 'error' }), 1)
  }).timeout(60_000)

  test('disabled, or never constructed, it makes no span and leaves no subscriber', async ({
    assert,
    cleanup,
  }) => {
    const otel = otelSdk(cleanup)
    const app = await startHttpApp(cleanup)
    const fake = await app.payouts.fake()
    cleanup(() => app.payouts.restore())
    const instrumentation = instrument(cleanup)
    assert.isTrue(Object.values(channels).every((channel) => channel.hasSubscribers))
    instrumentation.disable()
    assert.isFalse(instrumentation.isEnabled())
    for (const channel of Object.values(channels)) assert.isFalse(channel.hasSubscribers)
    const disabled = instrument(cleanup, { enabled: false })
    assert.isFalse(disabled.isEnabled())
    assert.isFalse(channels.execute.hasSubscribers)

    const { payout } = await app.payouts.execute({
      fromCurrency: 'USD',
      toCurrency: 'MXN',
      amount: 10,
      recipientId: fake.seedRecipient().id,
      userPaymentMethodId: fake.paymentMethodId,
    })
    await fake.complete(payout)
    assert.isTrue(app.events.some((event) => event.name === 'payouts:completed'))
    assert.deepEqual(otel.spans(), [])
    assert.deepEqual((await otel.metrics()).all, [])

    // Enabled again: spans again.
    instrumentation.enable()
    assert.isTrue(instrumentation.isEnabled())
    await fake.fail(
      (
        await app.payouts.execute({
          fromCurrency: 'USD',
          toCurrency: 'MXN',
          amount: 11,
          recipientId: fake.seedRecipient().id,
          userPaymentMethodId: fake.paymentMethodId,
        })
      ).payout
    )
    assert.lengthOf(named(otel.spans(), 'payouts execute'), 1)
  }).timeout(60_000)

  test('the inbox backlog gauges report a sample of the rows waiting, read only while instrumented', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup, { webhook: { processing: 'worker' } })
    const { inbox, db } = await partsOf(app.payouts)
    const statements: string[] = []
    const table = `${app.payouts.config.ledger.tablePrefix}webhook_deliveries`
    db.connection()
      .getWriteClient()
      .on('query', (query: { sql: string }) => {
        // count( and min(: the backlog's aggregates (not the `account` column of an insert).
        if (query.sql.includes(table) && /\b(count|min)\(/i.test(query.sql)) {
          statements.push(query.sql)
        }
      })
    for (const id of ['dlv_b1', 'dlv_b2', 'dlv_b3']) {
      await inbox.insert({
        deliveryId: id,
        eventType: 'payout.created',
        rawBody: Buffer.from('{}'),
        signatureHeader: 't=1,v1=x',
        source: 'webhook',
      })
    }
    // Not instrumented: the worker's step reads no backlog.
    await app.payouts.drainInbox({ maxBatches: 0 })
    await new Promise((resolve) => setTimeout(resolve, 50))
    assert.deepEqual(statements, [])

    const otel = otelSdk(cleanup)
    instrument(cleanup)
    await app.payouts.drainInbox({ maxBatches: 0 })
    let measured = await otel.metrics()
    for (let i = 0; i < 50 && measured.points('payouts.inbox.backlog').length === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20))
      measured = await otel.metrics()
    }
    assert.equal(measured.points('payouts.inbox.backlog')[0]?.value, 3)
    // Each account's backlog under its name (docs/accounts.md): this app's one account.
    assert.deepEqual(measured.points('payouts.inbox.backlog')[0]?.attributes, {
      'payouts.account': 'main',
    })
    assert.isAtLeast(measured.points('payouts.inbox.oldest_age')[0]?.value, 0)
    assert.equal(measured.descriptor('payouts.inbox.oldest_age')?.unit, 's')
    assert.isAbove(statements.length, 0, 'read while instrumented')
  })
})

test.group('Observability | OpenTelemetry instrumentation on the channels', () => {
  const getPayout = () => ({
    endpoint: 'getPayout',
    method: 'GET',
    route: '/payouts/{id}',
    attempts: 0,
  })

  test('made before the SDK starts, it traces through it and measures once given its meter provider', async ({
    assert,
    cleanup,
  }) => {
    // config/otel.ts builds it before @adonisjs/otel starts the SDK, which then sets the
    // meter provider on each instrumentation.
    const instrumentation = instrument(cleanup)
    const otel = otelSdk(cleanup)
    await traced(
      channels.jobRun,
      () => ({ job: 'prune' }),
      async () => {}
    )
    assert.deepEqual((await otel.metrics()).all, [], 'the meter of the API had no provider yet')
    instrumentation.setMeterProvider(otel.meterProvider)
    await traced(
      channels.jobRun,
      () => ({ job: 'prune' }),
      async () => {}
    )

    assert.deepEqual(
      otel.spans().map((span) => span.name),
      ['payouts job prune', 'payouts job prune']
    )
    const measured = await otel.metrics()
    assert.equal(
      measured.sum('payouts.job.runs', { 'payouts.job': 'prune', 'payouts.outcome': 'succeeded' }),
      1
    )
    assert.equal(measured.count('payouts.job.duration', { 'payouts.job': 'prune' }), 1)
  })

  test('a job is a root span linked to the active one; its calls and the app spans inside are children', async ({
    assert,
    cleanup,
  }) => {
    const otel = otelSdk(cleanup)
    instrument(cleanup)
    const tracer = trace.getTracer('host-app')
    const outer = tracer.startSpan('host work')
    const answered = await context.with(trace.setSpan(context.active(), outer), () =>
      traced(
        channels.jobRun,
        () => ({ job: 'reconcile' }),
        async () => {
          await traced(channels.clientRequest, getPayout, async (call) => {
            call!.attempts = 3
            call!.retryReason = '429'
            call!.status = 200
          })
          tracer.startSpan('app span inside the job').end()
          throw new Error('reconcile failed with a message that stays out')
        }
      ).catch((error: Error) => error.message)
    )
    assert.match(answered, /stays out/)
    const executed = await context.with(trace.setSpan(context.active(), outer), () =>
      traced(
        channels.execute,
        () => ({ keyOrigin: 'plugin' as const }),
        async () => 'the result'
      )
    )
    assert.equal(executed, 'the result')
    outer.end()

    const spans = otel.spans()
    const [job] = named(spans, 'payouts job reconcile')
    assert.isUndefined(parentOf(job), 'a job run is a root span')
    assert.notEqual(job.spanContext().traceId, outer.spanContext().traceId)
    assert.deepEqual(
      job.links.map((link) => link.context.spanId),
      [outer.spanContext().spanId]
    )
    assert.equal(job.status.code, SpanStatusCode.ERROR)
    assert.equal(job.attributes['error.type'], 'Error')
    const [call] = named(spans, 'payouts client GET /payouts/{id}')
    assert.equal(parentOf(call), idOf(job))
    assert.deepInclude(call.attributes, {
      'http.route': '/payouts/{id}',
      'http.request.method': 'GET',
      'http.response.status_code': 200,
      'http.request.resend_count': 2,
      'payouts.retry.reason': '429',
    })
    assert.equal(parentOf(named(spans, 'app span inside the job')[0]), idOf(job))
    const [execute] = named(spans, 'payouts execute')
    assert.equal(parentOf(execute), outer.spanContext().spanId, 'an execute joins the request')
    assert.notInclude(exported(spans), 'stays out')

    const measured = await otel.metrics()
    assert.equal(measured.sum('payouts.client.retries', { 'payouts.retry.reason': '429' }), 2)
    assert.equal(
      measured.count('payouts.client.request.duration', {
        'http.route': '/payouts/{id}',
        'http.response.status_code': 200,
      }),
      1
    )
    assert.equal(
      measured.sum('payouts.job.runs', {
        'payouts.job': 'reconcile',
        'payouts.outcome': 'failed',
        'error.type': 'Error',
      }),
      1
    )
  })

  test('listener failures and dead letters are counted; a 503 answered is an error span', async ({
    assert,
    cleanup,
  }) => {
    const otel = otelSdk(cleanup)
    instrument(cleanup)
    await traced(
      channels.notify,
      () => ({
        payoutId: 'p-1',
        eventId: '17',
        events: ['payouts:status_updated'],
        eventKeys: ['17:payouts:status_updated'],
        status: 'processing',
        step: 'initiated',
        previousStatus: 'processing',
      }),
      async (told) => void (told!.listenerFailures = 2)
    )
    await traced(
      channels.inboxBatch,
      () => ({ path: 'transaction' as const, deliveryIds: ['d1', 'd2', 'd3'] }),
      async (batch) => {
        batch!.rows = 3
        batch!.dead = 1
      }
    )
    await traced(
      channels.webhookReceive,
      () => ({ eventType: 'payout.status_updated', deliveryId: 'd4' }),
      async (delivery) => {
        delivery!.outcome = 'unavailable'
        delivery!.status = 503
      }
    )
    const spans = otel.spans()
    assert.equal(named(spans, 'payouts notify')[0].status.code, SpanStatusCode.ERROR)
    assert.equal(named(spans, 'payouts webhook receive')[0].status.code, SpanStatusCode.ERROR)
    assert.equal(named(spans, 'payouts inbox batch')[0].attributes['payouts.inbox.dead'], 1)
    const measured = await otel.metrics()
    assert.equal(measured.sum('payouts.listener.failures'), 2)
    assert.equal(measured.sum('payouts.payout.transitions'), 0, 'a step within processing')
    assert.equal(
      measured.sum('payouts.inbox.rows_applied', { 'payouts.inbox.path': 'transaction' }),
      2
    )
    assert.equal(measured.sum('payouts.inbox.dead_letters'), 1)
    assert.equal(
      measured.sum('payouts.webhook.deliveries', { 'payouts.outcome': 'unavailable' }),
      1
    )
  })

  test('with no SDK registered it costs the work nothing but no-ops', async ({
    assert,
    cleanup,
  }) => {
    instrument(cleanup)
    const value = await traced(
      channels.execute,
      () => ({ keyOrigin: 'app' as const }),
      async () => 42
    )
    assert.equal(value, 42)
    await assert.rejects(
      () =>
        traced(
          channels.jobRun,
          () => ({ job: 'escrow' }),
          async () => {
            throw new Error('kept')
          }
        ),
      'kept'
    )
  })
})

test.group('Observability | the OpenTelemetry entry is loaded only by who imports it', () => {
  test('the package, its provider and its channels load no @opentelemetry module', async ({
    assert,
    cleanup,
  }) => {
    const folder = await mkdtemp(join(tmpdir(), 'payouts-otel-'))
    cleanup(() => rm(folder, { recursive: true, force: true }))
    const recorder = join(folder, 'recorder.mjs')
    await writeFile(
      recorder,
      `import { registerHooks } from 'node:module'
import { appendFileSync } from 'node:fs'
registerHooks({
  resolve(specifier, context, next) {
    const resolved = next(specifier, context)
    appendFileSync(${JSON.stringify(join(folder, 'modules.txt'))}, resolved.url + '\\n')
    return resolved
  },
})
`
    )
    const loaded = async (entries: string[]) => {
      await writeFile(join(folder, 'modules.txt'), '')
      const code = entries.map((entry) => `await import(${JSON.stringify(file(entry))})`)
      const child = spawn(
        process.execPath,
        [
          '--import=@poppinss/ts-exec',
          `--import=${pathToFileURL(recorder).href}`,
          '--input-type=module',
          '-e',
          code.join('\n'),
        ],
        { cwd: REPO, stdio: ['ignore', 'ignore', 'pipe'] }
      )
      let errors = ''
      child.stderr!.on('data', (chunk) => (errors += chunk))
      const [exitCode] = await once(child, 'exit')
      assert.equal(exitCode, 0, errors)
      return (await readFile(join(folder, 'modules.txt'), 'utf8')).split('\n').filter(Boolean)
    }
    const plugin = await loaded([
      'index.ts',
      'providers/payouts_provider.ts',
      'src/tracing/channels.ts',
    ])
    assert.isAbove(plugin.length, 20, 'the recorder saw the modules')
    assert.deepEqual(
      plugin.filter((url) => url.includes('/@opentelemetry/')),
      []
    )
    const entry = await loaded(['src/otel/main.ts'])
    assert.isTrue(entry.some((url) => url.includes('/@opentelemetry/api/')))
  }).timeout(60_000)
})
