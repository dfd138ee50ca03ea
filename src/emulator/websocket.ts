import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import { WebSocketServer, type WebSocket } from 'ws'
import { API_KEY_PATTERN } from '../schemas/common.ts'
import type { EmulatorState } from './state.ts'

/**
 * The close code for a socket whose key is refused: at authentication, or later when the key
 * is revoked or a rotated key expires (docs/spec-gaps.md).
 */
export const AUTH_CLOSE_CODE = 4001

interface Client {
  accountId: string | null
  apiKey: string | null
}

/**
 * The /ws endpoint: the first message must be `{ type: 'auth', apiKey }` within the
 * deadline (10 s by default) or the socket is closed; afterwards the socket receives the
 * events of the key's account, in the webhook envelope, until its key stops being valid.
 */
export class EventSocketServer {
  #wss = new WebSocketServer({ noServer: true })
  #clients = new Map<WebSocket, Client>()
  /** New connections are refused (`refuseNew`), until `acceptNew()`. */
  #refusing = false

  constructor(
    private state: EmulatorState,
    private authTimeoutMs: number
  ) {
    this.#wss.on('connection', (socket) => this.#onConnection(socket))
  }

  /** Handles an HTTP upgrade on /ws or /api/ws; other paths are refused. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer) {
    const path = new URL(req.url ?? '/', 'http://emulator').pathname
    if ((path !== '/ws' && path !== '/api/ws') || this.#refusing) {
      socket.destroy()
      return
    }
    this.#wss.handleUpgrade(req, socket, head, (ws) => this.#wss.emit('connection', ws, req))
  }

  #onConnection(socket: WebSocket) {
    const client: Client = { accountId: null, apiKey: null }
    this.#clients.set(socket, client)
    const deadline = setTimeout(
      () => socket.close(AUTH_CLOSE_CODE, 'authentication timeout'),
      this.authTimeoutMs
    )
    socket.on('close', () => {
      clearTimeout(deadline)
      this.#clients.delete(socket)
    })
    socket.on('message', (data) => {
      if (client.accountId) return
      let message: { type?: unknown; apiKey?: unknown }
      try {
        message = JSON.parse(String(data))
      } catch {
        message = {}
      }
      const key = typeof message.apiKey === 'string' ? message.apiKey : ''
      const record = this.state.validKey(key)
      if (message.type !== 'auth' || !API_KEY_PATTERN.test(key) || !record) {
        socket.send(JSON.stringify({ type: 'auth.error', error: 'authentication failed' }))
        socket.close(AUTH_CLOSE_CODE, 'authentication failed')
        return
      }
      clearTimeout(deadline)
      client.accountId = record.accountId
      client.apiKey = key
      socket.send(JSON.stringify({ type: 'auth.ok' }))
    })
  }

  /**
   * Sends an event envelope, unchanged (its `createdAt` is emulated time, as in the webhook;
   * no signature here, so no wall clock), to every authenticated socket of the account whose
   * key is still valid; a socket whose key was revoked or has expired is closed instead.
   */
  broadcast(accountId: string, envelope: object) {
    this.closeInvalidKeys()
    const payload = JSON.stringify(envelope)
    for (const [socket, client] of this.#clients) {
      if (client.accountId === accountId && socket.readyState === socket.OPEN) socket.send(payload)
    }
  }

  /**
   * Closes every authenticated socket whose key is no longer valid (revoked, or a rotated
   * key past its 7 days), with {@link AUTH_CLOSE_CODE}: the spec's revocation reaches open
   * sockets too, well within its 30 s drain.
   */
  closeInvalidKeys() {
    for (const [socket, client] of this.#clients) {
      if (client.apiKey === null || this.state.validKey(client.apiKey)) continue
      client.accountId = null
      client.apiKey = null
      socket.close(AUTH_CLOSE_CODE, 'api key revoked or expired')
    }
  }

  /** Cuts every connection (reconnect tests). */
  dropAll() {
    for (const socket of this.#clients.keys()) socket.terminate()
  }

  /** Refuses new connections until `acceptNew()` (a test's window with nobody listening). */
  refuseNew() {
    this.#refusing = true
  }

  acceptNew() {
    this.#refusing = false
  }

  get authenticatedCount() {
    let count = 0
    for (const client of this.#clients.values()) if (client.accountId) count++
    return count
  }

  /** Cuts every connection and stops accepting new ones. */
  async close() {
    this.dropAll()
    await new Promise<void>((resolve) => this.#wss.close(() => resolve()))
  }
}
