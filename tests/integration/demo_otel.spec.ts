import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { DatabaseSync } from 'node:sqlite'
import { test } from '@japa/runner'
import { DEMO_ROOT, demoEnv, freePort, startDemo } from '../../scripts/demo_runner.ts'

/** A span of the demo's trace route (examples/demo/app/services/payout_trace.ts). */
interface TraceNode {
  name: string
  process: string
  traceId: string
  spanId: string
  startMs: number
  links: Array<{ traceId: string; spanId: string }>
  attributes: Record<string, unknown>
  children: TraceNode[]
  linked: TraceNode[]
}

interface Sample {
  name: string
  labels: Record<string, string>
  value: number
}

/** The samples of a Prometheus text exposition (`name{label="value",...} number`). */
function samples(text: string): Sample[] {
  return text
    .split('\n')
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => {
      const [, name, labels = '', value] = /^([\w:]+)(?:\{(.*)\})? (\S+)/.exec(line)!
      const pairs = [...labels.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map(([, k, v]) => [k, v])
      return { name, labels: Object.fromEntries(pairs), value: Number(value) }
    })
}

/** The sum of the samples of `name` that have `labels`; undefined when there is none. */
function sum(all: Sample[], name: string, labels: Record<string, string> = {}) {
  const matching = all.filter(
    (sample) =>
      sample.name === name && Object.entries(labels).every(([k, v]) => sample.labels[k] === v)
  )
  return matching.length === 0 ? undefined : matching.reduce((total, s) => total + s.value, 0)
}

async function scrape(url: string) {
  const response = await fetch(url)
  return { response, samples: samples(await response.text()) }
}

/** Every node of the trees, depth first, linked traces included. */
function* walk(nodes: TraceNode[]): Generator<TraceNode> {
  for (const node of nodes) {
    yield node
    yield* walk(node.linked)
    yield* walk(node.children)
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, ms = 15_000) {
  const deadline = Date.now() + ms
  let value = await read()
  while (!done(value) && Date.now() < deadline) {
    await sleep(300)
    value = await read()
  }
  return value
}

test.group('Demo | OpenTelemetry', () => {
  test('both processes answer Prometheus text that matches the ledger, and one tree follows a payout from the web process to the worker', async ({
    assert,
    cleanup,
  }) => {
    const demo = await startDemo({
      removeOnStop: true,
      port: await freePort(),
      stepIntervalMs: 300,
      output: 'inherit',
      log: () => {},
    })
    cleanup(() => demo.stop())
    const port = new URL(demo.url).port

    const executed = await fetch(`${demo.url}/api/payouts`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ flow: 'fiat_to_fiat', amount: 120 }),
    })
    const answer = await executed.text()
    assert.equal(executed.status, 200, answer)
    const { payoutId } = JSON.parse(answer) as { payoutId: string }
    const rows = await until(
      async () => (await (await fetch(`${demo.url}/api/payouts`)).json()) as any[],
      (list) => list.find((row) => row.payoutUuid === payoutId)?.status === 'completed',
      60_000
    )
    const row = rows.find((candidate) => candidate.payoutUuid === payoutId)
    assert.equal(row?.status, 'completed')

    // The worker: what it applied (its last change counted once the change was told), and
    // its backlog gauge, which reports the last sample (one every 15 s at most): a sample
    // taken before the last delivery was applied reads 1 until the next one.
    const worker = await until(
      () => scrape(demo.workerMetricsUrl),
      ({ samples: all }) =>
        sum(all, 'payouts_payout_transitions_total', { payouts_status: 'completed' }) === 1 &&
        sum(all, 'payouts_inbox_backlog') === 0,
      60_000
    )
    assert.equal(worker.response.status, 200)
    assert.match(worker.response.headers.get('content-type')!, /^text\/plain/)
    const db = new DatabaseSync(`${DEMO_ROOT}tmp/demo-${port}.sqlite`, {
      readOnly: true,
      timeout: 20_000,
    })
    cleanup(() => db.close())
    const count = (sql: string) => (db.prepare(sql).get() as { n: number }).n
    const stored = count('SELECT count(*) AS n FROM svc_webhook_deliveries')
    const processed = count(
      "SELECT count(*) AS n FROM svc_webhook_deliveries WHERE state = 'processed'"
    )
    assert.isAbove(stored, 2)
    assert.equal(processed, stored, 'every stored delivery was applied')
    assert.equal(
      sum(worker.samples, 'payouts_payout_transitions_total', { payouts_status: 'completed' }),
      1
    )
    assert.equal(sum(worker.samples, 'payouts_inbox_rows_applied_total'), processed)
    assert.equal(sum(worker.samples, 'payouts_inbox_backlog'), 0)
    assert.isUndefined(
      sum(worker.samples, 'payouts_webhook_deliveries_total'),
      'the worker receives no webhook'
    )

    // The web process: the execute and every delivery it received and stored.
    const web = await scrape(demo.metricsUrl)
    assert.equal(web.response.status, 200)
    assert.match(web.response.headers.get('content-type')!, /^text\/plain/)
    assert.equal(
      sum(web.samples, 'payouts_execute_outcomes_total', {
        payouts_outcome: 'succeeded',
        payouts_flow: 'fiat_to_fiat',
      }),
      1
    )
    assert.equal(
      sum(web.samples, 'payouts_webhook_deliveries_total', { payouts_outcome: 'stored' }),
      stored
    )
    const accepted = [...demo.emulator.webhooks.deliveries.values()].filter(
      (delivery) => delivery.status === 'succeeded'
    )
    assert.equal(stored, accepted.length, 'the emulator delivered each once')
    assert.equal(
      sum(web.samples, 'payouts_client_request_duration_count', {
        http_route: '/rfq/execute',
      }),
      1
    )
    assert.isUndefined(
      sum(web.samples, 'payouts_inbox_rows_applied_total'),
      'the web process applies none (worker mode)'
    )

    // A refused request claiming one of the payout's delivery ids: its receive span (outcome
    // rejected) carries that id, and must not join the payout's tree.
    const claimed = (
      db.prepare('SELECT delivery_id FROM svc_webhook_deliveries LIMIT 1').get() as any
    ).delivery_id as string
    const spoof = await fetch(`${demo.url}/webhooks/payouts`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'svc-delivery-id': claimed,
        'svc-event-type': 'payout.status.updated',
        'svc-signature': 't=1,v1=00',
      },
      body: '{}',
    })
    assert.equal(spoof.status, 400)
    // The span files are written every 500 ms.
    await sleep(1500)

    // One payout's tree: the execute in the web process with its call of the service, then
    // each webhook received there, the worker's batch that applied it linked under it.
    const traceUrl = `${demo.url}/api/payouts/${payoutId}/trace`
    const trace = await until(
      async () => (await (await fetch(traceUrl)).json()) as { traces: TraceNode[] },
      ({ traces }) =>
        [...walk(traces)].some(
          (node) =>
            node.name === 'payouts notify' && node.attributes['payouts.status'] === 'completed'
        )
    )
    const nodes = [...walk(trace.traces)]
    const execute = nodes.find((node) => node.name === 'payouts execute')
    assert.exists(execute, JSON.stringify(trace))
    assert.equal(execute!.process, 'web')
    assert.equal(execute!.attributes['payouts.payout.id'], payoutId)
    assert.include(
      execute!.children.map((child) => child.name),
      'payouts client POST /rfq/execute'
    )
    const request = trace.traces.find((root) => root.traceId === execute!.traceId)
    assert.equal(request?.name, 'POST /api/payouts', 'the execute runs in its HTTP request')

    const receives = nodes.filter((node) => node.name === 'payouts webhook receive')
    const batches = receives.flatMap((receive) =>
      receive.linked.map((batch) => ({ receive, batch }))
    )
    assert.isNotEmpty(batches)
    // Every delivery of the payout (one that changed nothing too): its receive, its batch.
    const deliveryIds = (
      db.prepare('SELECT delivery_id FROM svc_webhook_deliveries').all() as any[]
    )
      .map((delivery) => delivery.delivery_id as string)
      .sort()
    assert.deepEqual(
      receives.map((receive) => receive.attributes['messaging.message.id']).sort(),
      deliveryIds,
      'each delivery once: the refused request that claimed one is not in the tree'
    )
    assert.isTrue(receives.every((receive) => receive.attributes['payouts.outcome'] === 'stored'))
    assert.deepEqual(
      batches
        .flatMap(({ batch }) => batch.attributes['payouts.inbox.delivery_ids'] as string[])
        .sort(),
      deliveryIds
    )
    for (const { receive, batch } of batches) {
      assert.equal(receive.process, 'web')
      assert.equal(batch.name, 'payouts inbox batch')
      assert.equal(batch.process, 'worker')
      assert.notEqual(batch.traceId, receive.traceId, 'a batch is a trace of its own')
      assert.deepInclude(batch.links, { traceId: receive.traceId, spanId: receive.spanId })
    }
    // The changes the worker told, in order: the payout's timeline as the webhooks moved it.
    const told = batches
      .flatMap(({ batch }) => batch.children)
      .filter((node) => node.name === 'payouts notify')
      .toSorted((a, b) => a.startMs - b.startMs)
    assert.deepEqual(
      told.map((node) => node.attributes['payouts.step']),
      row.timeline
        .filter((change: { source: string }) => change.source === 'webhook')
        .map((change: { step: string }) => change.step)
    )
    for (const node of told) assert.equal(node.attributes['payouts.payout.id'], payoutId)
    assert.equal(told.at(-1)!.attributes['payouts.status'], 'completed')

    // The same tree in the terminal: node ace demo:trace <payoutId>.
    const ace = spawn(
      process.execPath,
      ['--import=@poppinss/ts-exec', 'bin/console.ts', 'demo:trace', payoutId],
      {
        cwd: DEMO_ROOT,
        env: demoEnv({
          PORT: port,
          DB_FILE: `tmp/demo-${port}.sqlite`,
          PAYOUTS_API_KEY: demo.emulator.apiKey,
          PAYOUTS_BASE_URL: demo.emulator.baseUrl,
          FORCE_COLOR: '0',
        }),
        stdio: ['ignore', 'pipe', 'pipe'],
      }
    )
    let output = ''
    ace.stdout!.on('data', (chunk) => (output += chunk))
    ace.stderr!.on('data', (chunk) => (output += chunk))
    const [code] = await once(ace, 'exit')
    assert.equal(code, 0, output)
    const lines = output.split('\n')
    assert.match(
      lines[0],
      new RegExp(`^Payout ${payoutId}: \\d+ traces, \\d+ spans \\(web, worker\\)`)
    )
    assert.isTrue(
      lines.some((line) => /^└─ \[web\] payouts execute /.test(line)),
      output
    )
    const linked = lines.filter((line) => /^ {3}⇢ \[worker\] payouts inbox batch /.test(line))
    assert.lengthOf(linked, batches.length, output)
    assert.isTrue(
      lines.some((line) => /└─ \[worker\] payouts notify .*payouts\.status=completed/.test(line)),
      output
    )
  }).timeout(240_000)
})
