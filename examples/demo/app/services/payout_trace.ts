import { readSpans, type SpanLine } from '#services/span_file'

/** A span and what ran inside it, plus the traces that link to it. */
export interface TraceNode extends SpanLine {
  children: TraceNode[]
  /** Work begun by this span elsewhere: the inbox batch that applied a received delivery. */
  linked: TraceNode[]
}

export interface PayoutTrace {
  payoutId: string
  /** The traces of the payout, oldest first: its execute, and each of its webhooks. */
  traces: TraceNode[]
  /** Spans in the trees (hidden ones included when `all`). */
  spanCount: number
  processes: string[]
}

/** The plugin's spans (`payouts execute`, `payouts notify`, ...), as opposed to SQL or HTTP. */
const isPayoutsSpan = (span: SpanLine) => span.name.startsWith('payouts ')

/**
 * One payout's spans, as trees, across the demo's processes. A trace is the payout's when a
 * span of it names the payout (`payouts.payout.id`: its `payouts execute`, each `payouts
 * notify`) or one of its deliveries (`deliveryIds`, from the ledger's events: the `payouts
 * webhook receive` that stored it, the `payouts inbox batch` that applied it). A span that
 * links to a span of another trace (the worker's batch links to the receive of each delivery
 * it applied, in the web process) hangs its trace under that span, one of the payout's
 * deliveries first, and that span's trace joins in.
 *
 * Without `all`, only the plugin's spans and each trace's root are kept (a hidden span's
 * children move up to its nearest kept ancestor): SQL queries, HTTP client calls, and what a
 * batch told of other payouts go.
 */
export function payoutTrace(
  spans: SpanLine[],
  payoutId: string,
  options: { all?: boolean; deliveryIds?: Iterable<string> } = {}
): PayoutTrace {
  const all = options.all ?? false
  const deliveries = new Set(options.deliveryIds ?? [])
  const bySpan = new Map<string, SpanLine>()
  const byTrace = new Map<string, SpanLine[]>()
  for (const span of spans) {
    bySpan.set(span.spanId, span)
    byTrace.set(span.traceId, [...(byTrace.get(span.traceId) ?? []), span])
  }

  // A receive counts only when it stored (or had stored) the delivery: a refused request
  // may claim any delivery id.
  const received = (span: SpanLine) =>
    span.attributes['payouts.outcome'] === 'stored' ||
    span.attributes['payouts.outcome'] === 'duplicate'
  const ofDelivery = (span: SpanLine) =>
    (received(span) && deliveries.has(span.attributes['messaging.message.id'] as string)) ||
    ((span.attributes['payouts.inbox.delivery_ids'] as string[] | undefined) ?? []).some((id) =>
      deliveries.has(id)
    )
  const own = new Set(
    spans
      .filter((span) => span.attributes['payouts.payout.id'] === payoutId || ofDelivery(span))
      .map((span) => span.traceId)
  )
  // A linking trace hangs under one span it links to, whose trace joins the tree.
  const hangs = new Map<string, string[]>()
  const hung = new Set<string>()
  const joined = new Set<string>()
  for (const traceId of own) {
    const targets = byTrace
      .get(traceId)!
      .flatMap((span) => span.links.map((link) => bySpan.get(link.spanId)))
      .filter((target): target is SpanLine => target !== undefined && target.traceId !== traceId)
    const target = targets.find(ofDelivery) ?? targets[0]
    if (!target) continue
    hangs.set(target.spanId, [...(hangs.get(target.spanId) ?? []), traceId])
    hung.add(traceId)
    joined.add(target.traceId)
  }

  let spanCount = 0
  const processes = new Set<string>()
  const building = new Set<string>()
  const treeOf = (traceId: string): TraceNode[] => {
    building.add(traceId)
    const members = byTrace.get(traceId)!.toSorted((a, b) => a.startMs - b.startMs)
    const nodes = new Map(
      members.map((span) => [span.spanId, { ...span, children: [], linked: [] } as TraceNode])
    )
    const inTrace = (spanId: string | null) => (spanId ? nodes.get(spanId) : undefined)
    const otherPayout = (node: TraceNode) =>
      (node.attributes['payouts.payout.id'] ?? payoutId) !== payoutId
    const kept = (node: TraceNode) =>
      !inTrace(node.parentSpanId) || all || (isPayoutsSpan(node) && !otherPayout(node))
    const keptAncestor = (node: TraceNode) => {
      let parent = inTrace(node.parentSpanId)
      while (parent && !kept(parent)) parent = inTrace(parent.parentSpanId)
      return parent
    }
    const roots: TraceNode[] = []
    for (const node of nodes.values()) {
      const shown = kept(node) ? node : keptAncestor(node)!
      for (const linking of hangs.get(node.spanId) ?? []) {
        if (!building.has(linking)) shown.linked.push(...treeOf(linking))
      }
      if (shown !== node) continue
      spanCount++
      processes.add(node.process)
      const parent = keptAncestor(node)
      if (parent) parent.children.push(node)
      else roots.push(node)
    }
    return roots
  }

  const traces = [...new Set([...own, ...joined])]
    .filter((traceId) => !hung.has(traceId))
    .flatMap((traceId) => treeOf(traceId))
    .toSorted((a, b) => a.startMs - b.startMs)
  return { payoutId, traces, spanCount, processes: [...processes].sort() }
}

/**
 * The payout's trees from the spans the demo's processes wrote, its deliveries read from the
 * ledger's events (each records the delivery that brought it, applied or not).
 */
export async function readPayoutTrace(payoutId: string, all = false) {
  const { PayoutEvent } = await import('@svc/adonis-payouts/models')
  const events = await PayoutEvent.query()
    .where('payout_uuid', payoutId)
    .whereNotNull('delivery_id')
    .select('delivery_id')
  const deliveryIds = events.map((event) => event.deliveryId!)
  return payoutTrace(readSpans(), payoutId, { all, deliveryIds })
}

/** Attributes worth a line in the text tree (all of them are in the JSON). */
const SHOWN = [
  'payouts.payout.id',
  'payouts.outcome',
  'payouts.flow',
  'payouts.status',
  'payouts.step',
  'payouts.events',
  'payouts.event_type',
  'messaging.message.id',
  'messaging.batch.message_count',
  'payouts.inbox.path',
  'http.response.status_code',
  'payouts.retry.reason',
  'payouts.job',
]

function describe(node: TraceNode) {
  const shown = SHOWN.filter((key) => node.attributes[key] !== undefined).map((key) => {
    const value = node.attributes[key]
    return `${key}=${Array.isArray(value) ? value.join(',') : String(value)}`
  })
  const status = node.status === 'error' ? ' ERROR' : ''
  return `[${node.process}] ${node.name} (${node.kind.toLowerCase()}, ${node.durationMs.toFixed(1)} ms${status})${shown.length > 0 ? '  ' + shown.join(' ') : ''}`
}

/** The trees as text, one span a line: `├─` a child, `⇢` a linked trace (in the worker). */
export function renderPayoutTrace(trace: PayoutTrace): string {
  if (trace.traces.length === 0) return `No span of payout ${trace.payoutId} yet.`
  const lines = [
    `Payout ${trace.payoutId}: ${trace.traces.length} traces, ${trace.spanCount} spans (${trace.processes.join(', ')})`,
  ]
  const walk = (node: TraceNode, prefix: string, last: boolean, top: boolean, link = false) => {
    const branch = top ? '' : link ? '⇢ ' : last ? '└─ ' : '├─ '
    lines.push(`${prefix}${branch}${describe(node)}${top ? `  trace ${node.traceId}` : ''}`)
    const inner = top ? '' : prefix + (last ? '   ' : '│  ')
    const next = [
      ...node.linked.map((child) => [child, true] as const),
      ...node.children.map((child) => [child, false] as const),
    ]
    next.forEach(([child, isLink], index) =>
      walk(child, inner, index === next.length - 1, false, isLink)
    )
  }
  for (const root of trace.traces) walk(root, '', true, true)
  return lines.join('\n')
}
