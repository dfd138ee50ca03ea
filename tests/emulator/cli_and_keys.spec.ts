import { spawn } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { test } from '@japa/runner'
import { AceFactory } from '@adonisjs/core/factories'
import { WebSocket } from 'undici'
import PayoutsEmulatorCommand from '../../commands/payouts_emulator.ts'
import {
  EMULATOR_FLAGS,
  emulatorOptions,
  LOOPBACK_WEBHOOKS_NOTICE,
  resolveEmulatorFlags,
} from '../../src/emulator/cli_options.ts'
import { api, execute, fiatBody, opened, startEmulator, waitFor } from './helpers.ts'
import { TS_HOOKS } from '../helpers/ts_hooks.ts'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

/** The emulator's command line as a child process. */
function spawnCli(args: string[]) {
  return spawn(process.execPath, [TS_HOOKS, 'src/emulator/cli.ts', ...args], {
    cwd: ROOT,
  })
}

/** Runs the emulator's command line; resolves when it exits. */
function runCli(args: string[]) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawnCli(args)
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => (stdout += chunk))
    child.stderr.on('data', (chunk) => (stderr += chunk))
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

/** Starts the command line, returns its banner once printed, then stops it with SIGTERM. */
function bannerOf(args: string[]) {
  return new Promise<string>((resolve, reject) => {
    const child = spawnCli(args)
    let stdout = ''
    let stderr = ''
    child.stderr.on('data', (chunk) => (stderr += chunk))
    child.stdout.on('data', (chunk) => {
      stdout += chunk
      if (stdout.includes('Stop with Ctrl-C')) child.kill('SIGTERM')
    })
    child.on('close', (code) => {
      if (stdout.includes('Stop with Ctrl-C')) resolve(stdout)
      else reject(new Error(`the emulator exited (${code}) before its banner: ${stderr}`))
    })
  })
}

/** The banner without its URLs (port 0 picks a new port each start). */
const withoutUrls = (banner: string) => banner.replace(/(http|ws):\/\/\S+/g, 'URL')

/** A socket authenticated with `key`: the messages it receives and its close code. */
async function authenticatedSocket(
  cleanup: (fn: () => Promise<void>) => void,
  emu: { wsUrl: string },
  key: string
) {
  const socket = new WebSocket(emu.wsUrl)
  cleanup(async () => socket.close())
  const seen = { messages: [] as any[], closed: null as number | null }
  socket.addEventListener('message', (e) => seen.messages.push(JSON.parse(String(e.data))))
  socket.addEventListener('close', (e) => (seen.closed = e.code))
  await opened(socket)
  socket.send(JSON.stringify({ type: 'auth', apiKey: key }))
  await waitFor(() => seen.messages.length > 0)
  return seen
}

test.group('Emulator | Key revocation reaches open sockets', () => {
  test('Authentication 8: revoking a key closes its authenticated socket with 4001 and its requests get 401', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const key = emu.admin.issueKey()
    const socket = await authenticatedSocket(cleanup, emu, key)
    assert.deepEqual(socket.messages[0], { type: 'auth.ok' })

    const revoked = await api(emu, 'POST', '/__emulator/keys/revoke', {
      key: null,
      body: { apiKey: key },
    })
    assert.equal(revoked.status, 200)
    await waitFor(() => socket.closed !== null)
    assert.equal(socket.closed, 4001)
    assert.equal((await api(emu, 'GET', '/payouts', { key })).status, 401)
    await execute(emu, fiatBody(emu))
    assert.lengthOf(socket.messages, 1, 'no event after the revocation')
    assert.equal(emu.admin.authenticatedSockets, 0)
  })

  test('Authentication 7: a socket of a rotated key is closed once the old key expires', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const key = emu.admin.issueKey()
    const socket = await authenticatedSocket(cleanup, emu, key)
    emu.admin.rotateKey(key)
    await emu.admin.advance(7 * 24 * 3600 * 1000 + 1000)
    await waitFor(() => socket.closed !== null)
    assert.equal(socket.closed, 4001)
  })
})

test.group('Emulator | Dropping sockets (reconnect tests)', () => {
  test('refuseNew: sockets are cut and new ones refused until accepted again, over HTTP too', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const first = await authenticatedSocket(cleanup, emu, emu.apiKey)
    const dropped = await api(emu, 'POST', '/__emulator/websockets/drop', {
      key: null,
      body: { refuseNew: true },
    })
    assert.equal(dropped.status, 200)
    await waitFor(() => first.closed !== null)
    // Refused: the upgrade is cut, the socket never opens.
    const refused = new WebSocket(emu.wsUrl)
    cleanup(async () => refused.close())
    const outcome = await new Promise<string>((resolve) => {
      refused.addEventListener('open', () => resolve('open'))
      refused.addEventListener('close', () => resolve('closed'))
    })
    assert.equal(outcome, 'closed')
    assert.equal(emu.admin.authenticatedSockets, 0)
    const accepted = await api(emu, 'POST', '/__emulator/websockets/accept', { key: null })
    assert.equal(accepted.status, 200)
    const again = await authenticatedSocket(cleanup, emu, emu.apiKey)
    assert.deepEqual(again.messages[0], { type: 'auth.ok' })
    assert.equal(emu.admin.authenticatedSockets, 1)
    // Without refuseNew a drop lets the next socket in at once.
    emu.admin.dropWebSockets()
    const next = await authenticatedSocket(cleanup, emu, emu.apiKey)
    assert.deepEqual(next.messages[0], { type: 'auth.ok' })
  })
})

test.group('Emulator | Command line', () => {
  test('--help prints the usage of every flag and exits 0', async ({ assert }) => {
    const { code, stdout, stderr } = await runCli(['--help'])
    assert.equal(code, 0, stderr)
    assert.match(stdout, /^Usage: svc-payouts-emulator \[options\]/)
    for (const flag of EMULATOR_FLAGS) assert.include(stdout, `--${flag.name}`)
    assert.equal(stderr, '')
  })

  test('docs/emulator.md shows the --help output verbatim', async ({ assert }) => {
    const { stdout } = await runCli(['--help'])
    const doc = await readFile(new URL('../../docs/emulator.md', import.meta.url), 'utf8')
    assert.include(doc, '```\n' + stdout + '```')
  })

  test('an unknown flag prints one line on stderr and exits 2', async ({ assert }) => {
    const { code, stdout, stderr } = await runCli(['--nope'])
    assert.equal(code, 2)
    assert.equal(stdout, '')
    assert.lengthOf(stderr.trimEnd().split('\n'), 1)
    assert.include(stderr, '--nope')
  })

  test('two starts with the same --seed give the same key, recipient and payment methods', async ({
    assert,
  }) => {
    const first = await bannerOf(['--port', '0', '--seed', '7'])
    const second = await bannerOf(['--port', '0', '--seed', '7'])
    assert.equal(withoutUrls(second), withoutUrls(first))
    assert.match(first, /API key: +sk_test_[A-Za-z0-9_-]{43}/)
    assert.match(first, /Recipient: +[0-9a-f-]{36}/)
    assert.match(first, /userPaymentMethodId [0-9a-f-]{36}/)
    assert.match(first, /walletAddress 0x[0-9a-f]{40}/)
    const other = await bannerOf(['--port', '0', '--seed', '8'])
    assert.notEqual(withoutUrls(other), withoutUrls(first))
  }).timeout(30_000)

  test('--api-key keeps the given key across starts', async ({ assert }) => {
    const key = `sk_test_${'k'.repeat(43)}`
    const first = await bannerOf(['--port', '0', '--api-key', key, '--seed', '3'])
    const second = await bannerOf(['--port', '0', '--api-key', key, '--seed', '3'])
    assert.include(first, key)
    assert.equal(withoutUrls(second), withoutUrls(first))
  }).timeout(30_000)

  test('the command line delivers to loopback and says so; --strict-webhooks refuses it as the service does', async ({
    assert,
  }) => {
    const lenient = await bannerOf(['--port', '0', '--seed', '5'])
    assert.include(lenient, LOOPBACK_WEBHOOKS_NOTICE)
    const strict = await bannerOf(['--port', '0', '--seed', '5', '--strict-webhooks'])
    assert.notInclude(strict, LOOPBACK_WEBHOOKS_NOTICE)
    assert.isTrue(emulatorOptions(resolveEmulatorFlags({})).allowInsecureWebhooks)
    assert.isFalse(
      emulatorOptions(resolveEmulatorFlags({ 'strict-webhooks': true })).allowInsecureWebhooks
    )
  }).timeout(30_000)

  test('node ace payouts:emulator takes the same flags and prints the same banner', async ({
    assert,
    cleanup,
  }) => {
    assert.deepEqual(
      PayoutsEmulatorCommand.flags.map((flag) => flag.flagName),
      EMULATOR_FLAGS.map((flag) => flag.name)
    )
    const ace = await new AceFactory().make(new URL('../../', import.meta.url), {
      importer: () => {},
    })
    ace.ui.switchMode('raw')
    const command = await ace.create(PayoutsEmulatorCommand, ['--port', '0', '--seed', '7'])
    await command.exec()
    cleanup(() => command.stop())
    command.assertSucceeded()
    const logs = command.logger
      .getLogs()
      .map((log) => log.message)
      .join('\n')
    const cli = await bannerOf(['--port', '0', '--seed', '7'])
    assert.equal(withoutUrls(logs.trim()), withoutUrls(cli.trim()))
  }).timeout(30_000)

  test('node ace payouts:emulator reads --strict-webhooks=1 as on, =0 as off, and refuses =maybe or a stray word', async ({
    assert,
    cleanup,
  }) => {
    const ace = await new AceFactory().make(new URL('../../', import.meta.url), {
      importer: () => {},
    })
    ace.ui.switchMode('raw')
    /** Runs the command; answers it and the lines it logged (the log is emptied after). */
    const start = async (args: string[]) => {
      const command = await ace.create(PayoutsEmulatorCommand, ['--port', '0', ...args])
      await command.exec()
      cleanup(() => command.stop())
      const logs = command.logger.getLogs().map((log) => log.message)
      command.logger.flushLogs()
      return { command, logs }
    }
    for (const args of [['--strict-webhooks=1'], ['--strict-webhooks=yes', '--seed', '2']]) {
      const strict = await start(args)
      strict.command.assertSucceeded()
      assert.notInclude(strict.logs.join('\n'), LOOPBACK_WEBHOOKS_NOTICE, args.join(' '))
    }
    const lenient = await start(['--strict-webhooks=0'])
    lenient.command.assertSucceeded()
    assert.include(lenient.logs.join('\n'), LOOPBACK_WEBHOOKS_NOTICE)

    for (const [args, reason] of [
      [['--strict-webhooks=maybe'], /--strict-webhooks takes no value.*"maybe"/],
      [['--strict-webhooks', 'false'], /Unknown argument "false"/],
    ] as const) {
      const refused = await start([...args])
      assert.equal(refused.command.exitCode, 2)
      assert.lengthOf(refused.logs, 1, refused.logs.join('\n'))
      assert.match(refused.logs[0], reason)
      assert.notInclude(refused.logs[0], 'listening', 'nothing started')
    }
  }).timeout(30_000)
})
