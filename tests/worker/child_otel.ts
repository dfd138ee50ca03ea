/**
 * OpenTelemetry in a child process of the worker suite, set up as an app's `otel.ts` would:
 * the AsyncLocalStorage context manager, the W3C propagator, a tracer provider and the
 * plugin's instrumentation. Each finished span is appended to a JSONL file as `SpanLine`, for
 * the parent to read.
 */
import { appendFileSync } from 'node:fs'
import { context, propagation, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { ExportResultCode, W3CTraceContextPropagator } from '@opentelemetry/core'
import {
  BasicTracerProvider,
  SimpleSpanProcessor,
  type ReadableSpan,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-base'
import { PayoutsInstrumentation } from '../../src/otel/main.ts'

/** A finished span as the child writes it. */
export interface SpanLine {
  name: string
  traceId: string
  spanId: string
  parentSpanId: string | null
  links: Array<{ traceId: string; spanId: string }>
  attributes: Record<string, unknown>
}

function toLine(span: ReadableSpan): SpanLine {
  return {
    name: span.name,
    traceId: span.spanContext().traceId,
    spanId: span.spanContext().spanId,
    parentSpanId: span.parentSpanContext?.spanId ?? null,
    links: span.links.map((link) => ({
      traceId: link.context.traceId,
      spanId: link.context.spanId,
    })),
    attributes: span.attributes,
  }
}

/** Traces this process into `file`, one line per finished span. */
export function traceToFile(file: string) {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
  propagation.setGlobalPropagator(new W3CTraceContextPropagator())
  const exporter: SpanExporter = {
    export(spans, done) {
      for (const span of spans) appendFileSync(file, JSON.stringify(toLine(span)) + '\n')
      done({ code: ExportResultCode.SUCCESS })
    },
    async shutdown() {},
  }
  trace.setGlobalTracerProvider(
    new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  )
  return new PayoutsInstrumentation()
}
