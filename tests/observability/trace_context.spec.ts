import { randomUUID } from 'node:crypto'
import { rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from '@japa/runner'
import { context, propagation, trace, type SpanContext } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { W3CTraceContextPropagator } from '@opentelemetry/core'
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base'
import { tableNames } from '../../src/database/schema.ts'
import { PayoutsInstrumentation } from '../../src/otel/main.ts'
import { partsOf } from '../../src/service/payouts_service.ts'
import { channels, traced } from '../../src/tracing/channels.ts'
import { InboxStore } from '../../src/webhooks/inbox_store.ts'
import { readLog, waitFor } from '../chaos/helpers.ts'
import { connectionConfig, setupDatabase, sqlitePath, TEST_DB } from '../helpers/database.ts'
import { startHttpApp, type HttpApp } from '../helpers/http_app.ts'
import type { SpanLine } from '../worker/child_otel.ts'
import { postEvent, SECRET, spawnChild } from '../worker/helpers.ts'

/**
 * The trace context carried across the inbox and the intents: the W3C traceparent of the
 * request that stored a delivery (of the execute that made an intent) is stored with its row,
 * and the batch that applies the delivery (the recovery that re-sends the intent) links to it,
 * in this process or another.
 */

/**
 * OpenTelemetry as an app's SDK sets it: the AsyncLocalStorage context manager, the W3C
 * propagator, a tracer provider exporting to memory; all global, taken down in cleanup.
 */
function otelSdk(cleanup: (fn: () => Promise<void>) => void) {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
  propagation.setGlobalPropagator(new W3CTraceContextPropagator())
  const exporter = new InMemorySpanExporter()
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  trace.setGlobalTracerProvider(provider)
  cleanup(async () => {
    await provider.shutdown()
    trace.disable()
    propagation.disable()
    context.disable()
  })
  return { spans: () => exporter.getFinishedSpans() }
}

function instrument(cleanup: (fn: () => void) => void) {
  const instrumentation = new PayoutsInstrumentation()
  cleanup(() => instrumentation.disable())
  return instrumentation
}

const named = (spans: ReadableSpan[], name: string) => spans.filter((span) => span.name === name)

/** The traceparent a W3C propagator writes for the span. */
function traceParentOf(spanContext: SpanContext) {
  const flags = spanContext.traceFlags.toString(16).padStart(2, '0')
  return `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`
}

/** A span's links as `traceId-spanId`. */
const linksOf = (span: ReadableSpan) =>
  span.links.map((link) => `${link.context.traceId}-${link.context.spanId}`)
const idsOf = (spanContext: SpanContext) => `${spanContext.traceId}-${spanContext.spanId}`

/** The receive span of each stored delivery, by delivery id. */
function receivedSpans(spans: ReadableSpan[]) {
  return new Map(
    named(spans, 'payouts webhook receive')
      .filter((span) => span.attributes['payouts.outcome'] === 'stored')
      .map((span) => [span.attributes['messaging.message.id'] as string, span])
  )
}

/** The stored traceparent of each delivery of the app's inbox, by delivery id. */
async function storedTraceParents(app: HttpApp) {
  const db = await app.app.container.make('lucid.db')
  const rows: Array<{ delivery_id: string; trace_parent: string | null }> = await db
    .from(tableNames(app.prefix).webhookDeliveries)
    .select('delivery_id', 'trace_parent')
  return new Map(rows.map((row) => [row.delivery_id, row.trace_parent]))
}

/** A fiat payout the fake accepts. */
function fiat(fake: { seedRecipient(): { id: string }; paymentMethodId: string }) {
  return {
    fromCurrency: 'USD',
    toCurrency: 'MXN',
    amount: 120,
    recipientId: fake.seedRecipient().id,
    userPaymentMethodId: fake.paymentMethodId,
  }
}

test.group(`Observability | trace context across the inbox and the intents (${TEST_DB})`, () => {
  test(
    'inline ({path}): the batch links to the request that stored each delivery, not only to the one that started the drain'
  )
    .with([{ path: 'transaction' }, { path: 'row_by_row' }] as const)
    .run(async ({ assert, cleanup }, { path }) => {
      const otel = otelSdk(cleanup)
      instrument(cleanup)
      const app = await startHttpApp(cleanup, { webhook: { secret: SECRET } })
      // The drain the first delivery starts waits before it claims: the second delivery is
      // stored meanwhile and joins its batch, which runs in the first request's context.
      const { inbox } = await partsOf(app.payouts)
      let open!: () => void
      const opened = new Promise<void>((resolve) => (open = resolve))
      const claimDue = inbox.claimDue.bind(inbox)
      const processDue = inbox.processDueInTransaction.bind(inbox)
      inbox.claimDue = async (...args) => {
        await opened
        return claimDue(...args)
      }
      inbox.processDueInTransaction =
        path === 'row_by_row'
          ? () => Promise.reject(new Error('forced row by row'))
          : async (...args) => {
              await opened
              return processDue(...args)
            }
      const ids = [randomUUID(), randomUUID()]
      for (const id of ids)
        await postEvent(app.url, 'payout.created', { payoutId: id }, `dlv_${id}`)
      open()
      await app.payouts.drainInbox()

      const spans = otel.spans()
      const received = receivedSpans(spans)
      assert.sameMembers(
        [...received.keys()],
        ids.map((id) => `dlv_${id}`)
      )
      // Each row holds the traceparent of the request that stored it.
      const stored = await storedTraceParents(app)
      for (const [deliveryId, span] of received) {
        assert.equal(stored.get(deliveryId), traceParentOf(span.spanContext()), deliveryId)
      }
      const [batch, ...more] = named(spans, 'payouts inbox batch')
      assert.lengthOf(more, 0, 'both deliveries in one batch')
      assert.equal(batch.attributes['payouts.inbox.path'], path)
      assert.sameMembers(batch.attributes['payouts.inbox.delivery_ids'] as string[], [
        ...received.keys(),
      ])
      assert.isUndefined(batch.parentSpanContext, 'a batch is a root span')
      // Linked to both requests, each once (the first is also the span the drain ran in).
      assert.sameMembers(
        linksOf(batch),
        [...received.values()].map((span) => idsOf(span.spanContext()))
      )
      const second = received.get(`dlv_${ids[1]}`)!.spanContext()
      const link = batch.links.find((candidate) => idsOf(candidate.context) === idsOf(second))!
      assert.isTrue(link.context.isRemote, 'read back from the row')
      assert.notEqual(batch.spanContext().traceId, second.traceId)
    })

  test('across processes: the worker links the batch it applied to the request the web process stored it in', async ({
    assert,
    cleanup,
  }) => {
    const stamp = `${process.pid}-${Date.now()}`
    const sqliteFile = sqlitePath(`svc-payouts-trace-${stamp}.sqlite`)
    const spansFile = join(tmpdir(), `svc-payouts-trace-spans-${stamp}.jsonl`)
    // Registered first, so it runs last: after the worker is gone and the tables dropped.
    cleanup(async () => {
      await Promise.all([sqliteFile, spansFile].map((file) => rm(file, { force: true })))
    })
    const otel = otelSdk(cleanup)
    instrument(cleanup)
    const base = connectionConfig('trace')
    const connection =
      base.client === 'better-sqlite3' ? { ...base, connection: { filename: sqliteFile } } : base
    const web = await startHttpApp(
      cleanup,
      { webhook: { secret: SECRET, processing: 'worker' } },
      undefined,
      connection
    )
    const payoutId = randomUUID()
    await postEvent(web.url, 'payout.created', { payoutId }, `dlv_${payoutId}`)
    const received = receivedSpans(otel.spans()).get(`dlv_${payoutId}`)!
    assert.exists(received)
    assert.equal(
      (await storedTraceParents(web)).get(`dlv_${payoutId}`),
      traceParentOf(received.spanContext())
    )
    assert.lengthOf(named(otel.spans(), 'payouts inbox batch'), 0, 'the web process applies none')

    // `node ace payouts:work` in another process, traced by its own SDK.
    spawnChild(
      cleanup,
      'worker_app.ts',
      { prefix: web.prefix, batchSize: 10, otelSpansFile: spansFile },
      TEST_DB === 'sqlite' ? { SVC_TEST_SQLITE: sqliteFile } : {}
    )
    const batch = await waitFor(
      'the worker applied the delivery',
      () =>
        (readLog(spansFile) as unknown as SpanLine[]).find(
          (span) =>
            span.name === 'payouts inbox batch' &&
            (span.attributes['payouts.inbox.delivery_ids'] as string[]).includes(`dlv_${payoutId}`)
        ),
      { timeoutMs: 30_000 }
    )
    assert.isNull(batch.parentSpanId)
    assert.notEqual(batch.traceId, received.spanContext().traceId)
    assert.deepEqual(batch.links, [
      { traceId: received.spanContext().traceId, spanId: received.spanContext().spanId },
    ])
  }).timeout(60_000)

  test("a recovery run's span links to the execute whose answer it never had", async ({
    assert,
    cleanup,
  }) => {
    const otel = otelSdk(cleanup)
    instrument(cleanup)
    const app = await startHttpApp(cleanup)
    const fake = await app.payouts.fake()
    cleanup(() => app.payouts.restore())
    fake.faults({ errorRate: 1 })
    const error = await app.payouts
      .execute(fiat(fake), { idempotencyKey: 'order-traced-1' })
      .catch((caught) => caught)
    assert.isAtLeast(error.status, 500)
    const [execute] = named(otel.spans(), 'payouts execute')
    assert.equal(execute.attributes['payouts.outcome'], 'unknown')
    const db = await app.app.container.make('lucid.db')
    const intent = await db.from(tableNames(app.prefix).executionIntents).firstOrFail()
    assert.equal(intent.trace_parent, traceParentOf(execute.spanContext()))

    // Recovery runs later, in a trace of its own (a job's; here the test's).
    fake.faults({})
    const tracer = trace.getTracer('host-app')
    const run = tracer.startSpan('recovery run')
    const summary = await context.with(trace.setSpan(context.active(), run), () =>
      app.payouts.recover({ olderThanMs: 0 })
    )
    run.end()
    assert.deepInclude(summary, { resent: 1, succeeded: 1 })

    const spans = otel.spans()
    const [recovered, ...more] = named(spans, 'payouts recover')
    assert.lengthOf(more, 0)
    assert.equal(recovered.parentSpanContext?.spanId, run.spanContext().spanId)
    assert.notEqual(recovered.spanContext().traceId, execute.spanContext().traceId)
    assert.deepEqual(linksOf(recovered), [idsOf(execute.spanContext())])
    assert.isTrue(recovered.links[0].context.isRemote)
    assert.deepInclude(recovered.attributes, {
      'payouts.intent.id': Number(intent.id),
      'payouts.key_origin': 'app',
      'payouts.outcome': 'succeeded',
    })
    // The request sent again is the recover span's child.
    const resent = spans.filter(
      (span) =>
        span.name.startsWith('payouts client POST') &&
        span.parentSpanContext?.spanId === recovered.spanContext().spanId
    )
    assert.lengthOf(resent, 1)
    assert.notInclude(JSON.stringify(recovered.attributes), 'order-traced-1')
  }).timeout(60_000)

  test('with no OpenTelemetry SDK registered, nothing is stored', async ({ assert, cleanup }) => {
    // Constructed as config/otel.ts would, with no SDK started: no-op tracers, no propagator.
    instrument(cleanup)
    const app = await startHttpApp(cleanup)
    const fake = await app.payouts.fake()
    cleanup(() => app.payouts.restore())
    const { payout } = await app.payouts.execute(fiat(fake))
    await fake.complete(payout)
    const stored = await storedTraceParents(app)
    assert.isAbove(stored.size, 0, 'the fake delivered through the route')
    assert.deepEqual([...new Set(stored.values())], [null])
    const db = await app.app.container.make('lucid.db')
    const intents = await db.from(tableNames(app.prefix).executionIntents).select('trace_parent')
    assert.lengthOf(intents, 1)
    assert.isNull(intents[0].trace_parent)
  }).timeout(60_000)

  test('only a W3C traceparent is stored with a delivery, and read back with its row', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'trace')
    const store = new InboxStore(db, tableNames(prefix).webhookDeliveries)
    const valid = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'
    const given = {
      dlv_valid: valid,
      dlv_upper: valid.toUpperCase(),
      dlv_version: `ff${valid.slice(2)}`,
      dlv_longer: `${valid}-extra`,
      dlv_junk: 'not a traceparent',
      dlv_none: undefined,
    }
    for (const [deliveryId, traceParent] of Object.entries(given)) {
      await store.insert({
        deliveryId,
        eventType: 'payout.created',
        rawBody: Buffer.from('{}'),
        signatureHeader: null,
        source: 'webhook',
        traceParent,
      })
    }
    const claimed = await store.claimDue(new Date(), 10, 60_000)
    assert.deepEqual(Object.fromEntries(claimed.map((row) => [row.deliveryId, row.traceParent])), {
      dlv_valid: valid,
      dlv_upper: null,
      dlv_version: null,
      dlv_longer: null,
      dlv_junk: null,
      dlv_none: null,
    })
  })
})

test.group('Observability | trace context links on the channels', () => {
  test('a batch links to each stored traceparent once, skips what is not one, and stops at 128', async ({
    assert,
    cleanup,
  }) => {
    const otel = otelSdk(cleanup)
    instrument(cleanup)
    const traceParentAt = (index: number) =>
      `00-${index.toString(16).padStart(32, '0')}-${(index + 1).toString(16).padStart(16, '0')}-01`
    const few = [traceParentAt(1), null, traceParentAt(1), 'junk', traceParentAt(2)]
    await traced(
      channels.inboxBatch,
      () => ({
        path: 'transaction' as const,
        deliveryIds: few.map((_, index) => `d${index}`),
        traceParents: few,
      }),
      async () => {}
    )
    const many = Array.from({ length: 200 }, (_, index) => traceParentAt(index + 1))
    await traced(
      channels.inboxBatch,
      () => ({
        path: 'row_by_row' as const,
        deliveryIds: many.map((_, index) => `d${index}`),
        traceParents: many,
      }),
      async () => {}
    )
    const [first, second] = named(otel.spans(), 'payouts inbox batch')
    assert.deepEqual(
      first.links.map((link) => traceParentOf(link.context)),
      [traceParentAt(1), traceParentAt(2)]
    )
    assert.lengthOf(second.links, 128)
    assert.equal(traceParentOf(second.links[127].context), traceParentAt(128))
  })
})
