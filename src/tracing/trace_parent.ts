/**
 * The trace context the plugin stores with what it processes later (an inbox row, an
 * execution intent): the W3C `traceparent` of the context active when it was stored, read
 * through `@opentelemetry/api` (no-ops without an SDK: nothing is stored then), and read back
 * as the span context the later work's span links to. Loaded with the service's parts, never
 * by the package's entry, its provider or its channels.
 */
import {
  context,
  isSpanContextValid,
  propagation,
  TraceFlags,
  type SpanContext,
} from '@opentelemetry/api'

/** A W3C traceparent of version 00: version, trace id, parent span id, flags (55 characters). */
const TRACE_PARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

/** The value itself when it is a W3C traceparent, else null: only such a value is stored. */
export function traceParentOrNull(value: unknown): string | null {
  return typeof value === 'string' && TRACE_PARENT.test(value) ? value : null
}

/**
 * The active context's traceparent, as the app's propagator writes it (the W3C one of the
 * OpenTelemetry SDK and `@adonisjs/otel`); null without an SDK, without an active span, or
 * with a propagator that writes no `traceparent`.
 */
export function activeTraceParent(): string | null {
  const carrier: Record<string, string> = {}
  propagation.inject(context.active(), carrier)
  return traceParentOrNull(carrier.traceparent)
}

/** The span context a stored traceparent names (remote: another process may have made it). */
export function remoteSpanContext(traceParent: unknown): SpanContext | undefined {
  const match = typeof traceParent === 'string' ? TRACE_PARENT.exec(traceParent) : null
  if (!match) return undefined
  const spanContext: SpanContext = {
    traceId: match[1],
    spanId: match[2],
    traceFlags: Number.parseInt(match[3], 16) & TraceFlags.SAMPLED,
    isRemote: true,
  }
  return isSpanContextValid(spanContext) ? spanContext : undefined
}
