import { context, metrics, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics'
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  InMemorySpanExporter,
} from '@opentelemetry/sdk-trace-base'
import { PayoutsInstrumentation } from '../src/otel/main.ts'

/** How the instrumented arms set OpenTelemetry up (bench/otel.ts). */
export const OTEL_SDK = {
  /** BatchSpanProcessor with its default queue (2,048) and batch (512); a batch goes when full. */
  spanProcessor: 'BatchSpanProcessor, default settings',
  /** The in-memory span exporter is counted and emptied this often, so memory stays flat. */
  clearMs: 1000,
  /** PeriodicExportingMetricReader into an in-memory exporter (cumulative), emptied likewise. */
  metricExportMs: 1000,
}

/** What the instrumented process exported so far. */
export interface OtelStats {
  spans: number
  byName: Record<string, number>
  metricExports: number
}

export interface OtelSdk {
  instrumentation: PayoutsInstrumentation
  /** Spans and metric exports since the last reset (flushes the span processor first). */
  stats(): Promise<OtelStats>
  resetStats(): Promise<void>
  /** Everything installed, as when just created (the default). */
  install(): void
  /** Nothing installed: the instrumentation unsubscribed, no global provider or context. */
  uninstall(): void
  shutdown(): Promise<void>
}

/**
 * OpenTelemetry as an app's SDK sets it up (`@adonisjs/otel`, the `NodeSDK`): the
 * AsyncLocalStorage context manager, a tracer provider with a BatchSpanProcessor, a meter
 * provider with a periodic reader, all global, then `new PayoutsInstrumentation()` (enabled
 * when constructed). The exporters keep in memory what a network exporter would send: their
 * content is counted and dropped every second.
 */
export function installOtel(): OtelSdk {
  const contextManager = new AsyncLocalStorageContextManager().enable()
  context.setGlobalContextManager(contextManager)
  const spanExporter = new InMemorySpanExporter()
  const spanProcessor = new BatchSpanProcessor(spanExporter)
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [spanProcessor] })
  trace.setGlobalTracerProvider(tracerProvider)
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
  const meterProvider = new MeterProvider({
    readers: [
      new PeriodicExportingMetricReader({
        exporter: metricExporter,
        exportIntervalMillis: OTEL_SDK.metricExportMs,
      }),
    ],
  })
  metrics.setGlobalMeterProvider(meterProvider)
  const instrumentation = new PayoutsInstrumentation()

  let spans = 0
  let metricExports = 0
  let byName: Record<string, number> = {}
  const drain = () => {
    const finished = spanExporter.getFinishedSpans()
    spans += finished.length
    for (const span of finished) byName[span.name] = (byName[span.name] ?? 0) + 1
    spanExporter.reset()
    metricExports += metricExporter.getMetrics().length
    metricExporter.reset()
  }
  const timer = setInterval(drain, OTEL_SDK.clearMs)
  timer.unref()

  return {
    instrumentation,
    async stats() {
      await spanProcessor.forceFlush()
      drain()
      return { spans, byName: { ...byName }, metricExports }
    },
    async resetStats() {
      await spanProcessor.forceFlush()
      drain()
      spans = 0
      metricExports = 0
      byName = {}
    },
    install() {
      context.setGlobalContextManager(contextManager.enable())
      trace.setGlobalTracerProvider(tracerProvider)
      metrics.setGlobalMeterProvider(meterProvider)
      instrumentation.enable()
    },
    uninstall() {
      instrumentation.disable()
      trace.disable()
      metrics.disable()
      context.disable()
    },
    async shutdown() {
      clearInterval(timer)
      instrumentation.disable()
      await tracerProvider.shutdown()
      await meterProvider.shutdown()
      trace.disable()
      metrics.disable()
      context.disable()
    },
  }
}
