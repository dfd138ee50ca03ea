import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync, rmSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { stripVTControlCharacters } from 'node:util'
import { test } from '@japa/runner'
import { DEMO_ROOT, freePort, installDemo } from '../../scripts/demo_runner.ts'

/** The project's TypeScript compiler (the demo has the same version as a dev dependency). */
const TSC = fileURLToPath(import.meta.resolve('typescript/bin/tsc'))

/** The demo's own suite has at least these many tests (examples/demo/tests). */
const DEMO_TESTS = 13

/**
 * The env of the demo's `npm test`: this process's, less what would point the demo at
 * another app, database or service. Its .env.test and its emulator decide the rest.
 */
function demoTestEnv(port: number, dbFile: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env }
  for (const key of Object.keys(env)) {
    if (/^(NODE_ENV|HOST|PORT|APP_KEY|LOG_LEVEL|DB_|PG_|REDIS_|PAYOUTS_)/.test(key)) delete env[key]
  }
  return { ...env, PORT: String(port), DB_FILE: dbFile, FORCE_COLOR: '0' }
}

test.group('Demo | the example app tests itself', () => {
  test('npm test in examples/demo passes its suite', async ({ assert, cleanup }) => {
    // SVC_DEMO_INSTALLED=1: the package is already built and installed in examples/demo.
    if (!process.env.SVC_DEMO_INSTALLED) await installDemo(() => {})
    const dbFile = `tmp/test-${process.pid}.sqlite`
    cleanup(() => {
      for (const suffix of ['', '-wal', '-shm'])
        rmSync(`${DEMO_ROOT}${dbFile}${suffix}`, { force: true })
    })

    const child = spawn('npm', ['test', '--silent'], {
      cwd: DEMO_ROOT,
      env: demoTestEnv(await freePort(), dbFile),
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout!.on('data', (chunk) => (output += chunk))
    child.stderr!.on('data', (chunk) => (output += chunk))
    cleanup(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    })
    const [code] = await once(child, 'exit')
    const text = stripVTControlCharacters(output)

    assert.equal(code, 0, text)
    const summary = text.match(/^\s*Tests\s+(.*)$/m)
    assert.isNotNull(summary, text)
    const passed = summary![1].match(/(\d+) passed/)
    assert.isAtLeast(Number(passed?.[1] ?? 0), DEMO_TESTS, text)
    assert.notInclude(summary![1], 'failed')
  }).timeout(300_000)
})

test.group('Demo | the example app type-checks', () => {
  test('tsc --noEmit in examples/demo finds no error', async ({ assert }) => {
    if (!process.env.SVC_DEMO_INSTALLED) await installDemo(() => {})
    const child = spawn(process.execPath, [TSC, '--noEmit', '-p', 'tsconfig.json'], {
      cwd: DEMO_ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout!.on('data', (chunk) => (output += chunk))
    child.stderr!.on('data', (chunk) => (output += chunk))
    const [code] = await once(child, 'exit')
    assert.equal(code, 0, output)
  }).timeout(180_000)
})

test.group('Docs | docs/testing.md', () => {
  test('its complete test file is the example app’s, verbatim', async ({ assert }) => {
    const doc = readFileSync(new URL('../../docs/testing.md', import.meta.url), 'utf8')
    const file = readFileSync(
      new URL('../../examples/demo/tests/functional/payouts.spec.ts', import.meta.url),
      'utf8'
    )
    const block = doc.match(
      /<!-- the file: examples\/demo\/tests\/functional\/payouts\.spec\.ts -->\n```ts\n([\s\S]*?)```\n<!-- end of the file -->/
    )
    assert.isNotNull(block, 'docs/testing.md has no embedded test file')
    assert.equal(block![1], file)
  })
})
