import { execFileSync } from 'node:child_process'
import { readdirSync, readlinkSync } from 'node:fs'
import { test } from '@japa/runner'
import { PayoutsNetworkError, PayoutsTimeoutError } from '../../src/client/errors.ts'
import { PayoutsClient } from '../../src/client/main.ts'
import { PayoutsEmulator } from '../../src/emulator/main.ts'

/** This process's listening TCP sockets, from /proc (Linux), as "ip:port" in hex. */
function listeningTcpPorts(): Set<string> {
  const ports = new Set<string>()
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    // Read one descriptor at a time: one that closes meanwhile (a socket of an earlier test
    // being torn down) is skipped, where `ls -l` failed the whole listing.
    const inodes = new Set<string>()
    for (const fd of readdirSync(`/proc/${process.pid}/fd`)) {
      try {
        const inode = /socket:\[(\d+)\]/.exec(readlinkSync(`/proc/${process.pid}/fd/${fd}`))?.[1]
        if (inode) inodes.add(inode)
      } catch {}
    }
    let table = ''
    try {
      table = execFileSync('cat', [file], { encoding: 'utf8' })
    } catch {
      continue
    }
    for (const line of table.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/)
      // st 0A is LISTEN; column 9 is the socket's inode.
      if (cols[3] === '0A' && inodes.has(cols[9])) ports.add(cols[1])
    }
  }
  return ports
}

test.group('Emulator | in process (no TCP port)', () => {
  test('serves its API through its dispatcher only; opens no TCP port', async ({
    assert,
    cleanup,
  }) => {
    const before = listeningTcpPorts()
    const emu = await PayoutsEmulator.start({ inProcess: true, rateLimits: false })
    cleanup(() => emu.close())
    assert.deepEqual(
      [...listeningTcpPorts()].filter((p) => !before.has(p)),
      []
    )
    assert.equal(emu.baseUrl, 'http://payouts-emulator.invalid')

    const client = new PayoutsClient({
      apiKey: emu.apiKey,
      baseUrl: emu.baseUrl,
      rateLimiter: false,
      dispatcher: emu.dispatcher,
    })
    cleanup(() => client.close())
    const recipient = await client.recipients.create({ name: 'Ana', currency: 'MXN' })
    assert.equal(emu.state.recipients.get(recipient.id)?.name, 'Ana')

    // Without the dispatcher the same URL reaches nothing.
    const lost = new PayoutsClient({
      apiKey: emu.apiKey,
      baseUrl: emu.baseUrl,
      rateLimiter: false,
      retry: { maxRetries: 0 },
    })
    cleanup(() => lost.close())
    await assert.rejects(() => lost.recipients.list(), PayoutsNetworkError)
  })

  test('faults behave as over TCP: a reset is a network error, a held request a timeout', async ({
    assert,
    cleanup,
  }) => {
    const emu = await PayoutsEmulator.start({ inProcess: true, rateLimits: false })
    cleanup(() => emu.close())
    const client = new PayoutsClient({
      apiKey: emu.apiKey,
      baseUrl: emu.baseUrl,
      rateLimiter: false,
      dispatcher: emu.dispatcher,
      timeoutMs: 300,
      retry: { maxRetries: 0 },
    })
    cleanup(() => client.close())
    emu.admin.setFaults({ resetRate: 1 })
    await assert.rejects(() => client.recipients.list(), PayoutsNetworkError)
    emu.admin.setFaults({ timeoutRate: 1, timeoutHoldMs: 2000 })
    await assert.rejects(() => client.recipients.list(), PayoutsTimeoutError)
    assert.equal(emu.admin.faultStats().resets, 1)
    assert.equal(emu.admin.faultStats().timeouts, 1)
  })
})
