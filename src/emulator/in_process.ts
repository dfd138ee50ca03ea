import { randomBytes } from 'node:crypto'
import { rmSync } from 'node:fs'
import type { Server } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Agent } from 'undici'

/**
 * A local socket path no other process can guess, for an HTTP server that only this
 * process talks to: no TCP port, no network. Linux: an abstract socket (no file at all);
 * Windows: a named pipe; elsewhere a socket file in the temp folder.
 */
export function inProcessSocketPath(name: string): string {
  const id = `svc-payouts-${name}-${process.pid}-${randomBytes(6).toString('hex')}`
  if (process.platform === 'linux') return `\0${id}`
  if (process.platform === 'win32') return `\\\\?\\pipe\\${id}`
  return join(tmpdir(), `${id}.sock`)
}

/**
 * Serves `server` on a fresh in-process socket path and answers the undici dispatcher that
 * reaches it whatever the URL's host: real HTTP over a local socket, so timeouts, resets
 * and keep-alive behave as over TCP.
 */
export async function listenInProcess(server: Server, name: string) {
  const socketPath = inProcessSocketPath(name)
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(socketPath, () => {
      server.off('error', reject)
      resolve()
    })
  })
  const dispatcher = new Agent({ connect: { socketPath } })
  return {
    socketPath,
    dispatcher,
    /** Closes the dispatcher's connections (the server is closed by its owner). */
    async close() {
      await dispatcher.close()
      if (!socketPath.startsWith('\0') && !socketPath.startsWith('\\\\')) {
        rmSync(socketPath, { force: true })
      }
    },
  }
}
