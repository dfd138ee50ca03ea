import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { DatabaseSync } from 'node:sqlite'
import { test } from '@japa/runner'
import { DEMO_ROOT, EXIT_WITH_PARENT, freePort, startDemo } from '../../scripts/demo_runner.ts'
import { listen } from '../worker/helpers.ts'

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))

function alive(pid: number) {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

test.group('Demo runner | the app never outlives its parent', () => {
  test('a SIGKILLed parent takes the linked app with it; an unlinked one is orphaned', async ({
    assert,
    cleanup,
  }) => {
    // A parent starting two children the way startDemoApp does, one without the preload.
    const parent = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `
        import { spawn } from 'node:child_process'
        const start = (preload) => spawn(process.execPath, [
          '--import=@poppinss/ts-exec', ...preload, '-e', 'setInterval(() => {}, 1000)',
        ], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
        const linked = start(['--import=${EXIT_WITH_PARENT}'])
        const unlinked = start([])
        console.log(JSON.stringify({ linked: linked.pid, unlinked: unlinked.pid }))
        setInterval(() => {}, 1000)
        `,
      ],
      { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'] }
    )
    const [line] = (await once(parent.stdout!, 'data')) as [Buffer]
    const pids = JSON.parse(line.toString()) as { linked: number; unlinked: number }
    cleanup(() => {
      for (const pid of [parent.pid!, pids.linked, pids.unlinked]) {
        if (alive(pid)) process.kill(pid, 'SIGKILL')
      }
    })
    // Give both children time to load the preload before the parent dies.
    await new Promise((resolve) => setTimeout(resolve, 1500))
    assert.isTrue(alive(pids.linked) && alive(pids.unlinked))

    parent.kill('SIGKILL')
    const deadline = Date.now() + 15_000
    while (alive(pids.linked) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    assert.isFalse(alive(pids.linked), 'the linked child exits with its parent')
    assert.isTrue(alive(pids.unlinked), 'without the link, the child runs on')
  }).timeout(30_000)
})

test.group('Demo runner | a worker beside the web process', () => {
  test('a payout executed through the app is applied by the worker, which stops with the demo', async ({
    assert,
    cleanup,
  }) => {
    const workerLines: string[] = []
    const demo = await startDemo({
      removeOnStop: true,
      port: await freePort(),
      stepIntervalMs: 300,
      // The app's warnings and errors, in the log of a failed run.
      output: 'inherit',
      log: () => {},
      workerLog: (line) => workerLines.push(line),
    })
    cleanup(() => demo.stop())
    // A browser of the demo, as the page subscribes: no Redis, the web process relays.
    const { received } = await listen(cleanup, demo.url, 'payouts/owners/demo-tenant')

    const executed = await fetch(`${demo.url}/api/payouts`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ flow: 'fiat_to_fiat', amount: 120 }),
    })
    const answer = await executed.text()
    assert.equal(executed.status, 200, answer)
    const { payoutId } = JSON.parse(answer) as { payoutId: string }

    let status: string | undefined
    const deadline = Date.now() + 60_000
    while (status !== 'completed' && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 300))
      const payouts = (await (await fetch(`${demo.url}/api/payouts`)).json()) as any[]
      status = payouts.find((payout) => payout.payoutUuid === payoutId)?.status
    }
    assert.equal(status, 'completed')
    // Every change the worker applied reached the subscriber on the web process, once each.
    await new Promise((resolve) => setTimeout(resolve, 1000))
    const heard = received.map(({ message }) => message).filter((m) => m.payoutId === payoutId)
    const eventIds = heard.map((message) => message.eventId)
    assert.isAbove(heard.length, 2, JSON.stringify(heard))
    assert.equal(new Set(eventIds).size, eventIds.length, 'no change twice')
    assert.deepEqual(
      eventIds,
      [...eventIds].sort((a, b) => Number(a) - Number(b))
    )
    assert.equal(heard.at(-1).status, 'completed')

    // The webhooks that moved it were stored by the app and processed by the worker.
    const batches = workerLines
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line))
      .filter((entry) => entry.msg === 'payouts worker batch')
    assert.isAbove(
      batches.reduce((sum, entry) => sum + entry.processed, 0),
      0,
      workerLines.join('\n')
    )

    const health = (await (await fetch(`${demo.url}/api/health`)).json()) as any
    assert.equal(health.checks.inboxBacklog.status, 'ok')

    // Two processes on one file: in WAL mode (the demo's pool hook) readers never wait.
    const db = new DatabaseSync(`${DEMO_ROOT}tmp/demo-${new URL(demo.url).port}.sqlite`)
    cleanup(() => db.close())
    assert.equal((db.prepare('PRAGMA journal_mode').get() as any).journal_mode, 'wal')

    await demo.stop()
    assert.isNotNull(demo.worker.child.exitCode ?? demo.worker.child.signalCode)
    assert.isNotNull(demo.app.child.exitCode ?? demo.app.child.signalCode)
  }).timeout(240_000)
})
