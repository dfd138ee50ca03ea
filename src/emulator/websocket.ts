import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import { WebSocketServer, type WebSocket } from 'ws'
import { API_KEY_PATTERN } from '../schemas/common.ts'
import type { EmulatorState } from './state.ts'

/**
 * The /ws endpoint: the first message must be `{ type: 'auth', apiKey }` within the
 * deadline (10 s by default) or the socket is closed; afterwards the socket receives the
 * events of the key's account, in the webhook envelope.
 */
export class EventSocketServer {
  #wss = new WebSocketServer({ noServer: true })
  #clients = new Map<WebSocket, { accountId: string | null }>()

  constructor(
    private state: EmulatorState,
    private authTimeoutMs: number
  ) {
    this.#wss.on('connection', (socket) => this.#onConnection(socket))
  }

  /** Handles an HTTP upgrade on /ws or /api/ws; other paths are refused. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer) {
    const path = new URL(req.url ?? '/', 'http://emulator').pathname
    if (path !== '/ws' && path !== '/api/ws') {
      socket.destroy()
      return
    }
    this.#wss.handleUpgrade(req, socket, head, (ws) => this.#wss.emit('connection', ws, req))
  }

  #onConnection(socket: WebSocket) {
    const client = { accountId: null as string | null }
    this.#clients.set(socket, client)
    const deadline = setTimeout(
      () => socket.close(4001, 'authentication timeout'),
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
      const record = this.state.keys.get(key)
      const now = this.state.clock.now()
      if (
        message.type !== 'auth' ||
        !API_KEY_PATTERN.test(key) ||
        !record ||
        record.revoked ||
        (record.expiresAt !== null && record.expiresAt <= now)
      ) {
        socket.send(JSON.stringify({ type: 'auth.error', error: 'authentication failed' }))
        socket.close(4001, 'authentication failed')
        return
      }
      clearTimeout(deadline)
      client.accountId = record.accountId
      socket.send(JSON.stringify({ type: 'auth.ok' }))
    })
  }

  /**
   * Sends an event envelope to every authenticated socket of the account, unchanged: its
   * `createdAt` is emulated time, as in the webhook (no signature here, so no wall clock).
   */
  broadcast(accountId: string, envelope: object) {
    const payload = JSON.stringify(envelope)
    for (const [socket, client] of this.#clients) {
      if (client.accountId === accountId && socket.readyState === socket.OPEN) socket.send(payload)
    }
  }

  /** Cuts every connection (reconnect tests). */
  dropAll() {
    for (const socket of this.#clients.keys()) socket.terminate()
  }

  get authenticatedCount() {
    let count = 0
    for (const client of this.#clients.values()) if (client.accountId) count++
    return count
  }

  async close() {
    this.dropAll()
    await new Promise<void>((resolve) => this.#wss.close(() => resolve()))
  }
}
