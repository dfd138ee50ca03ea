import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { test } from '@japa/runner'
import { EXIT_WITH_PARENT } from '../../scripts/demo_runner.ts'

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
