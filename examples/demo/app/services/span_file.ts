import { appendFileSync, mkdirSync, readdirSync, readFileSync, renameSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { SpanKind, SpanStatusCode } from '@opentelemetry/api'
import { ExportResultCode, hrTimeToMilliseconds, type ExportResult } from '@opentelemetry/core'
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base'

/** A finished span as the demo's sink writes it: one JSON line. */
export interface SpanLine {
  name: string
  /** The demo process that made it: `web`, `worker`, or the ace command's name. */
  process: string
  pid: number
  kind: keyof typeof SpanKind
  traceId: string
  spanId: string
  parentSpanId: string | null
  links: Array<{ traceId: string; spanId: string }>
  /** Epoch milliseconds. */
  startMs: number
  durationMs: number
  status: 'unset' | 'ok' | 'error'
  attributes: Record<string, unknown>
}

/**
 * Where the demo's processes write their spans: `tmp/spans-<PORT>/`, one folder per demo
 * (its database is `tmp/demo-<PORT>.sqlite`). Read when called: by then the app has loaded
 * `.env` into `process.env`, so the web process, the worker and `node ace demo:trace` agree.
 */
export function spansDirectory() {
  const port = process.env.PORT ?? '3333'
  return fileURLToPath(new URL(`../../tmp/spans-${port}/`, import.meta.url))
}

/**
 * This process's name in the spans: `web` (bin/server.ts), `worker` (`node ace
 * payouts:work`), or the command `node ace` runs.
 */
export function processName(argv = process.argv) {
  if (/server\.[jt]s$/.test(argv[1] ?? '')) return 'web'
  const command = argv.slice(2).find((arg) => !arg.startsWith('-'))
  if (command === 'payouts:work') return 'worker'
  return command ?? 'ace'
}

function toLine(span: ReadableSpan, name: string): SpanLine {
  const context = span.spanContext()
  return {
    name: span.name,
    process: name,
    pid: process.pid,
    kind: SpanKind[span.kind] as keyof typeof SpanKind,
    traceId: context.traceId,
    spanId: context.spanId,
    parentSpanId: span.parentSpanContext?.spanId ?? null,
    links: span.links.map((link) => ({
      traceId: link.context.traceId,
      spanId: link.context.spanId,
    })),
    startMs: hrTimeToMilliseconds(span.startTime),
    durationMs: hrTimeToMilliseconds(span.duration),
    status:
      span.status.code === SpanStatusCode.ERROR
        ? 'error'
        : span.status.code === SpanStatusCode.OK
          ? 'ok'
          : 'unset',
    attributes: span.attributes,
  }
}

/**
 * The demo's span sink: appends each finished span as a JSON line to this process's own
 * file (`<process>-<pid>.jsonl` in `spansDirectory()`), so the web process and the worker
 * never write to one file. A file that would pass `maxBytes` becomes `<name>.1.jsonl`
 * (replacing the previous one) and a new one starts: at most twice `maxBytes` per process.
 * A real app sends its spans to a collector instead (OTLP, `destinations` of @adonisjs/otel).
 */
export class SpanFileExporter implements SpanExporter {
  #file?: string
  #bytes = 0
  #maxBytes: number
  #process: string

  constructor(options: { maxBytes?: number; process?: string } = {}) {
    this.#maxBytes = options.maxBytes ?? 2 * 1024 * 1024
    this.#process = options.process ?? processName()
  }

  #open() {
    const directory = spansDirectory()
    mkdirSync(directory, { recursive: true })
    const name = `${this.#process.replace(/[^\w-]/g, '_')}-${process.pid}`
    this.#file = join(directory, `${name}.jsonl`)
    return this.#file
  }

  export(spans: ReadableSpan[], done: (result: ExportResult) => void) {
    try {
      const text = spans.map((span) => JSON.stringify(toLine(span, this.#process)) + '\n').join('')
      const file = this.#file ?? this.#open()
      const bytes = Buffer.byteLength(text)
      if (this.#bytes > 0 && this.#bytes + bytes > this.#maxBytes) {
        renameSync(file, file.replace(/\.jsonl$/, '.1.jsonl'))
        this.#bytes = 0
      }
      appendFileSync(file, text)
      this.#bytes += bytes
      done({ code: ExportResultCode.SUCCESS })
    } catch (error) {
      done({ code: ExportResultCode.FAILED, error: error as Error })
    }
  }

  async shutdown() {}

  async forceFlush() {}
}

/** Every span the demo's processes wrote, skipping a line being written. */
export function readSpans(directory = spansDirectory()): SpanLine[] {
  let files: string[]
  try {
    files = readdirSync(directory).filter((file) => file.endsWith('.jsonl'))
  } catch {
    return []
  }
  const spans: SpanLine[] = []
  for (const file of files) {
    let text: string
    try {
      text = readFileSync(join(directory, file), 'utf8')
    } catch {
      continue // rotated meanwhile: its spans are in the .1 file
    }
    for (const line of text.split('\n')) {
      if (!line) continue
      try {
        spans.push(JSON.parse(line) as SpanLine)
      } catch {}
    }
  }
  return spans
}
