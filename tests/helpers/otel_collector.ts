/**
 * A tiny OpenTelemetry collector for the specs: OTLP over HTTP with JSON bodies (what
 * `@opentelemetry/exporter-*-otlp-http`, and so `@adonisjs/otel`'s `destinations.otlp`, sends)
 * on 127.0.0.1, a free port. It accepts `POST /v1/traces`, `/v1/metrics` and `/v1/logs`
 * (gzip or not), decodes what came, and keeps it with the resource it came from, so a spec
 * reads the telemetry of real child processes exactly as they exported it.
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { gunzipSync } from 'node:zlib'

/** An attribute value as OTLP/JSON carries it (`AnyValue`). */
interface AnyValue {
  stringValue?: string
  boolValue?: boolean
  intValue?: number | string
  doubleValue?: number
  bytesValue?: string
  arrayValue?: { values?: AnyValue[] }
  kvlistValue?: { values?: KeyValue[] }
}
interface KeyValue {
  key: string
  value?: AnyValue
}

export type Attributes = Record<string, unknown>

/** OTLP's span kinds, by their number on the wire. */
const KINDS = ['UNSPECIFIED', 'INTERNAL', 'SERVER', 'CLIENT', 'PRODUCER', 'CONSUMER'] as const

/** One span as a process exported it. */
export interface CollectedSpan {
  name: string
  kind: (typeof KINDS)[number]
  traceId: string
  spanId: string
  /** Null for a root span. */
  parentSpanId: string | null
  attributes: Attributes
  links: Array<{ traceId: string; spanId: string; attributes: Attributes }>
  events: Array<{ name: string; attributes: Attributes }>
  status: { code: 'UNSET' | 'OK' | 'ERROR'; message?: string }
  /** The instrumentation scope (`@svc/adonis-payouts`, `@opentelemetry/instrumentation-http`). */
  scope: string
  /** The exporting process's resource (`service.name`, `process.pid`, ...). */
  resource: Attributes
}

/** One data point of one instrument, from one export of one process. */
export interface CollectedPoint {
  metric: string
  unit: string
  type: 'sum' | 'gauge' | 'histogram' | 'exponentialHistogram' | 'summary'
  /** A sum's or a gauge's value; a histogram's count. */
  value: number
  attributes: Attributes
  /** When the point was collected (nanoseconds since the epoch, as a bigint). */
  time: bigint
  /** A sum's or a histogram's: each export holds the total so far, or only what is new. */
  temporality: 'cumulative' | 'delta' | null
  scope: string
  resource: Attributes
}

/** One log record. */
export interface CollectedLog {
  body: unknown
  attributes: Attributes
  scope: string
  resource: Attributes
}

function valueOf(value: AnyValue | undefined): unknown {
  if (!value) return undefined
  if (value.stringValue !== undefined) return value.stringValue
  if (value.boolValue !== undefined) return value.boolValue
  if (value.intValue !== undefined) return Number(value.intValue)
  if (value.doubleValue !== undefined) return value.doubleValue
  if (value.bytesValue !== undefined) return value.bytesValue
  if (value.arrayValue) return (value.arrayValue.values ?? []).map(valueOf)
  if (value.kvlistValue) return attributesOf(value.kvlistValue.values)
  return undefined
}

function attributesOf(list: KeyValue[] | undefined): Attributes {
  const attributes: Attributes = {}
  for (const { key, value } of list ?? []) attributes[key] = valueOf(value)
  return attributes
}

const STATUS = ['UNSET', 'OK', 'ERROR'] as const

/** Every span of an `ExportTraceServiceRequest`. */
function spansOf(body: any): CollectedSpan[] {
  return (body.resourceSpans ?? []).flatMap((resourceSpans: any) => {
    const resource = attributesOf(resourceSpans.resource?.attributes)
    return (resourceSpans.scopeSpans ?? []).flatMap((scopeSpans: any) =>
      (scopeSpans.spans ?? []).map((span: any): CollectedSpan => ({
        name: span.name,
        kind: KINDS[span.kind ?? 0],
        traceId: span.traceId,
        spanId: span.spanId,
        parentSpanId: span.parentSpanId || null,
        attributes: attributesOf(span.attributes),
        links: (span.links ?? []).map((link: any) => ({
          traceId: link.traceId,
          spanId: link.spanId,
          attributes: attributesOf(link.attributes),
        })),
        events: (span.events ?? []).map((event: any) => ({
          name: event.name,
          attributes: attributesOf(event.attributes),
        })),
        status: {
          code: STATUS[span.status?.code ?? 0],
          ...(span.status?.message ? { message: span.status.message } : {}),
        },
        scope: scopeSpans.scope?.name ?? '',
        resource,
      }))
    )
  })
}

const TEMPORALITIES: Record<number, CollectedPoint['temporality']> = { 1: 'delta', 2: 'cumulative' }

const POINT_TYPES = ['sum', 'gauge', 'histogram', 'exponentialHistogram', 'summary'] as const

/** Every data point of an `ExportMetricsServiceRequest`. */
function pointsOf(body: any): CollectedPoint[] {
  return (body.resourceMetrics ?? []).flatMap((resourceMetrics: any) => {
    const resource = attributesOf(resourceMetrics.resource?.attributes)
    return (resourceMetrics.scopeMetrics ?? []).flatMap((scopeMetrics: any) =>
      (scopeMetrics.metrics ?? []).flatMap((metric: any) => {
        const type = POINT_TYPES.find((candidate) => metric[candidate])
        if (!type) return []
        return (metric[type].dataPoints ?? []).map((point: any): CollectedPoint => ({
          metric: metric.name,
          unit: metric.unit ?? '',
          type,
          value: Number(point.asInt ?? point.asDouble ?? point.count ?? 0),
          attributes: attributesOf(point.attributes),
          time: BigInt(point.timeUnixNano ?? 0),
          temporality: TEMPORALITIES[metric[type].aggregationTemporality] ?? null,
          scope: scopeMetrics.scope?.name ?? '',
          resource,
        }))
      })
    )
  })
}

/** Every record of an `ExportLogsServiceRequest`. */
function logsOf(body: any): CollectedLog[] {
  return (body.resourceLogs ?? []).flatMap((resourceLogs: any) => {
    const resource = attributesOf(resourceLogs.resource?.attributes)
    return (resourceLogs.scopeLogs ?? []).flatMap((scopeLogs: any) =>
      (scopeLogs.logRecords ?? []).map((record: any): CollectedLog => ({
        body: valueOf(record.body),
        attributes: attributesOf(record.attributes),
        scope: scopeLogs.scope?.name ?? '',
        resource,
      }))
    )
  })
}

/** The collector's address and what it received so far (live arrays). */
export interface OtelCollector {
  /** The OTLP/HTTP base URL (`/v1/<signal>` is appended by the exporters). */
  url: string
  spans: CollectedSpan[]
  points: CollectedPoint[]
  logs: CollectedLog[]
  /** Requests that could not be read as OTLP/JSON (content type, body): should stay empty. */
  refused: string[]
}

/**
 * What the processes measured in the end, per instrument and attributes, summed over the
 * processes (told apart by the resource's `process.pid`): of a cumulative instrument (or a
 * gauge) each process's latest point, of a delta one every export's. Keyed
 * `<instrument> <attributes as JSON, keys sorted>`.
 */
export function finalValues(points: CollectedPoint[]) {
  const latest = new Map<string, CollectedPoint>()
  const totals = new Map<string, number>()
  for (const point of points) {
    const sorted = Object.keys(point.attributes).sort()
    const key = `${point.metric} ${JSON.stringify(point.attributes, sorted)}`
    if (point.temporality === 'delta') {
      totals.set(key, (totals.get(key) ?? 0) + point.value)
      continue
    }
    const perProcess = `${key} ${point.resource['process.pid']}`
    const seen = latest.get(perProcess)
    if (!seen || seen.time <= point.time) latest.set(perProcess, point)
  }
  for (const [perProcess, point] of latest) {
    const key = perProcess.slice(0, perProcess.lastIndexOf(' '))
    totals.set(key, (totals.get(key) ?? 0) + point.value)
  }
  return totals
}

/** Starts the collector; it stops in the test's cleanup. */
export async function startOtelCollector(
  cleanup: (fn: () => Promise<void>) => void
): Promise<OtelCollector> {
  const collected = {
    spans: [] as CollectedSpan[],
    points: [] as CollectedPoint[],
    logs: [] as CollectedLog[],
    refused: [] as string[],
  }
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const what = `${req.method} ${req.url} (${req.headers['content-type']})`
      try {
        if (req.method !== 'POST') throw new Error('not a POST')
        if (!String(req.headers['content-type']).startsWith('application/json')) {
          throw new Error('not JSON')
        }
        let raw = Buffer.concat(chunks)
        if (req.headers['content-encoding'] === 'gzip') raw = gunzipSync(raw)
        const body = JSON.parse(raw.toString('utf8'))
        if (req.url === '/v1/traces') collected.spans.push(...spansOf(body))
        else if (req.url === '/v1/metrics') collected.points.push(...pointsOf(body))
        else if (req.url === '/v1/logs') collected.logs.push(...logsOf(body))
        else throw new Error('unknown signal')
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end('{}')
      } catch (error) {
        collected.refused.push(`${what}: ${(error as Error).message}`)
        res.writeHead(400, { 'content-type': 'application/json' })
        res.end('{}')
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  cleanup(async () => {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  })
  const { port } = server.address() as AddressInfo
  return Object.assign(collected, { url: `http://127.0.0.1:${port}` })
}
