import { test } from '@japa/runner'
import { freePort, startDemo, type RunningDemo } from '../../scripts/demo_runner.ts'

/** Real time the demo runs with the emulator's clock sped up (30 emulated minutes). */
const RUN_MS = 30_000
/** Real time during which payouts are executed; the rest lets the last ones finish. */
const EXECUTE_MS = 18_000
const TERMINAL = ['completed', 'failed', 'cancelled']

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * The demo app with the emulator at 60× for 30 s of real time: the emulated clock runs
 * 30 minutes ahead of the wall clock by the end, yet every webhook delivery verifies on the
 * app's own route and every payout reaches its terminal state in the app's ledger.
 */
test.group('Demo | emulator clock at 60x', (group) => {
  let demo: RunningDemo

  group.setup(async () => {
    demo = await startDemo({
      removeOnStop: true,
      port: await freePort(),
      clock: { mode: 'scaled', scale: 60 },
      // One emulated minute per step: about a second of real time, 7 minutes per payout.
      stepIntervalMs: 60_000,
      output: 'ignore',
      log: () => {},
    })
    return () => demo.stop()
  })

  test('every delivery verifies and every payout reaches its terminal state locally', async ({
    assert,
  }) => {
    const started = Date.now()
    const executions = [
      { flow: 'fiat_to_fiat', expected: 'completed' },
      { flow: 'onramp', expected: 'completed' },
      { flow: 'fiat_to_fiat', reference: 'scenario:fail', expected: 'failed' },
    ]
    const expected = new Map<string, string>()
    for (let i = 0; Date.now() - started < EXECUTE_MS; i++) {
      const { expected: status, ...body } = executions[i % executions.length]
      const response = await fetch(`${demo.url}/api/payouts`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...body, amount: 100 }),
      })
      const answer = (await response.json()) as { payoutId?: string; error?: string }
      assert.equal(response.status, 200, answer.error)
      expected.set(answer.payoutId!, status)
      await sleep(2500)
    }

    const deliveries = () => [...demo.emulator.webhooks.deliveries.values()]
    let rows: any[] = []
    const settled = () =>
      rows.length === expected.size &&
      rows.every((row) => TERMINAL.includes(row.status)) &&
      deliveries().every((d) => d.status === 'succeeded')
    while (Date.now() - started < RUN_MS || !settled()) {
      rows = (await (await fetch(`${demo.url}/api/payouts`)).json()) as any[]
      if (Date.now() - started > RUN_MS + 15_000) break
      await sleep(500)
    }

    assert.isAbove(demo.emulator.clock.now() - Date.now(), 25 * 60_000, 'the clock ran ahead')
    assert.isAtLeast(expected.size, 6)
    assert.deepEqual(
      Object.fromEntries(rows.map((row) => [row.payoutUuid, row.status])),
      Object.fromEntries(expected)
    )
    // The mirror heard each payout through its signed webhooks, not only by polling.
    for (const row of rows) {
      const sources = row.timeline.map((change: { source: string }) => change.source)
      assert.include(sources, 'webhook', row.payoutUuid)
    }
    const all = deliveries()
    assert.isAtLeast(all.length, expected.size * 2)
    const refused = all.filter((d) => d.status !== 'succeeded')
    assert.deepEqual(
      refused.map((d) => ({ id: d.id, status: d.status, code: d.lastStatusCode })),
      [],
      'every delivery is accepted'
    )
  }).timeout(60_000)
})
