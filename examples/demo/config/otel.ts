import { defineConfig } from '@adonisjs/otel'
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus'
import { BatchSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { PayoutsInstrumentation } from '@svc/adonis-payouts/otel'
import { SpanFileExporter } from '#services/span_file'

/**
 * The Prometheus exporter. With OTEL_EXPORTER_PROMETHEUS_PORT set (the demo sets it for the
 * worker, which has no HTTP server), it serves /metrics on that port by itself; otherwise the
 * web process serves it at GET /metrics (app/controllers/observability_controller.ts).
 */
export const prometheus = new PrometheusExporter({
  host: process.env.OTEL_EXPORTER_PROMETHEUS_HOST ?? '127.0.0.1',
  preventServerStart: !process.env.OTEL_EXPORTER_PROMETHEUS_PORT,
})

/**
 * This file is read by otel.ts before the app starts, for every process and every ace
 * command: it reads process.env, not #start/env (whose validation would run before the
 * command, and `.env` may not exist yet).
 */
export default defineConfig({
  serviceName: 'payouts-demo',
  serviceVersion: '0.0.0',
  environment: process.env.NODE_ENV,
  instrumentations: {
    '@svc/adonis-payouts': new PayoutsInstrumentation(),
    // The page reads the health report every 2 s and holds the Transmit stream open.
    '@opentelemetry/instrumentation-http': { ignoredUrls: ['/api/health', '/__transmit/*'] },
    // SQL inside a traced request or batch, not the worker's polls of an empty inbox.
    '@opentelemetry/instrumentation-knex': { requireParentSpan: true },
  },
  // Metrics: Prometheus only. Spans: the demo's file sink (tmp/spans-<PORT>/), read by the
  // page's Trace button and `node ace demo:trace`. Logs: none exported. Without these, the
  // SDK would export all three over OTLP to localhost:4318, where no collector listens.
  metricReaders: [prometheus],
  spanProcessors: [new BatchSpanProcessor(new SpanFileExporter(), { scheduledDelayMillis: 500 })],
  logRecordProcessors: [],
})
