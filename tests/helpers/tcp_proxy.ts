import { createConnection, createServer, type Server, type Socket } from 'node:net'
import type { AddressInfo } from 'node:net'

/**
 * A TCP proxy on 127.0.0.1 in front of a real server (PostgreSQL in the fault tests), with
 * the faults a network brings:
 * - `stall()`: from now on nothing is forwarded on any open connection or new one, in
 *   either direction, and every socket stays open: a NAT or proxy dropping flows silently.
 *   A connection stalled this way is dead for good, as it would be behind a NAT: neither
 *   end ever hears of the other again, even after its peer closes (until `close()`).
 * - `dropOpen()`: as `stall()`, for the open connections only; new ones are forwarded.
 * - `resetDropped()`: the dropped connections are reset at last; the others go on.
 * - `muteAnswers()`: the server's answers on open connections are lost, requests still pass.
 * - `refuse()`: open connections are reset and new ones refused (the server went away).
 * - `heal()`: new connections are forwarded and accepted again.
 */
export class TcpProxy {
  #server?: Server
  #port = 0
  #stalled = false
  #sockets = new Set<Socket>()
  #pairs = new Set<[Socket, Socket]>()
  /** Connections accepted since the proxy started, stalled ones included. */
  accepted = 0

  constructor(private target: { host: string; port: number }) {}

  get port() {
    return this.#port
  }

  async start(): Promise<number> {
    await this.#listen(0)
    return this.#port
  }

  async #listen(port: number) {
    const server = createServer((client) => this.#accept(client))
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, '127.0.0.1', () => resolve())
    })
    this.#server = server
    this.#port = (server.address() as AddressInfo).port
  }

  #accept(client: Socket) {
    this.accepted++
    const upstream = createConnection(this.target)
    const pair: [Socket, Socket] = [client, upstream]
    for (const socket of pair) {
      this.#sockets.add(socket)
      socket.on('error', () => {})
      socket.on('close', () => {
        this.#sockets.delete(socket)
        // A dropped flow tells the other end nothing.
        if (this.#dropped.has(pair)) return
        this.#pairs.delete(pair)
        client.destroy()
        upstream.destroy()
      })
    }
    client.pipe(upstream)
    upstream.pipe(client)
    this.#pairs.add(pair)
    if (this.#stalled) this.#drop(pair)
  }

  #dropped = new Set<[Socket, Socket]>()

  #drop(pair: [Socket, Socket]) {
    const [client, upstream] = pair
    this.#dropped.add(pair)
    client.unpipe(upstream)
    upstream.unpipe(client)
    client.pause()
    upstream.pause()
  }

  /** Drops every open connection and every new one silently; the sockets stay open. */
  stall() {
    this.#stalled = true
    this.dropOpen()
  }

  /** Drops every open connection silently (the sockets stay open); new ones are forwarded. */
  dropOpen() {
    for (const pair of this.#pairs) if (!this.#dropped.has(pair)) this.#drop(pair)
  }

  /** The connections dropped so far are reset at last (a NAT's entry expired); others go on. */
  resetDropped() {
    for (const pair of this.#dropped) for (const socket of pair) socket.resetAndDestroy()
    this.#dropped.clear()
  }

  /**
   * From now on the server's answers on the open connections are swallowed; what the client
   * sends still reaches the server (a COMMIT lands, its answer is lost).
   */
  muteAnswers() {
    for (const [client, upstream] of this.#pairs) upstream.unpipe(client)
  }

  /** Resets every open connection and refuses new ones. */
  async refuse() {
    const server = this.#server
    this.#server = undefined
    for (const socket of this.#sockets) socket.resetAndDestroy()
    if (server) await new Promise((resolve) => server.close(resolve))
  }

  /** New connections are forwarded (and accepted) again; dropped ones stay dropped. */
  async heal() {
    this.#stalled = false
    if (!this.#server) await this.#listen(this.#port)
  }

  /** Closes everything, dropped connections included. */
  async close() {
    this.#stalled = false
    this.#dropped.clear()
    await this.refuse()
  }
}
