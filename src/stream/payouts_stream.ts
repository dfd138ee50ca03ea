import { WebSocket } from 'undici'
import debug from '../debug.ts'
import { parseJsonBytes } from '../schemas/events.ts'
import { safeError } from '../safe_error.ts'

/** What the stream hands to the pipeline: the raw bytes of one event message. */
export type StreamMessageHandler = (raw: Buffer) => Promise<void>

/** Where the stream connects, how it authenticates, and where its messages go. */
export interface PayoutsStreamOptions {
  /** wss://host/ws (or ws:// for the emulator). */
  url: string
  apiKey: string
  onMessage: StreamMessageHandler
  /** Runs after every reconnect (not the first connect): catch up on what was missed. */
  onReconnect?: () => Promise<void>
  logger?: { info(obj: object, msg?: string): void; warn(obj: object, msg?: string): void }
  backoff?: { baseMs?: number; maxMs?: number; jitter?: number }
  random?: () => number
}

type State = 'idle' | 'connecting' | 'open' | 'stopped'

/**
 * The WebSocket source of payout events: connects, authenticates with the first message
 * (the service closes a socket that stays silent for 10 s), and reconnects with capped
 * exponential backoff and jitter. Messages go into the same inbox as webhooks.
 */
export class PayoutsStream {
  #options: PayoutsStreamOptions
  #socket?: WebSocket
  #state: State = 'idle'
  #attempt = 0
  #connectedOnce = false
  #timer?: NodeJS.Timeout
  #authenticated = false

  constructor(options: PayoutsStreamOptions) {
    this.#options = options
  }

  get state(): State {
    return this.#state
  }

  get authenticated(): boolean {
    return this.#authenticated
  }

  start() {
    if (this.#state !== 'idle') return
    this.#connect()
  }

  #connect() {
    this.#state = 'connecting'
    debug('stream connecting (attempt %d)', this.#attempt)
    const socket = new WebSocket(this.#options.url)
    this.#socket = socket
    socket.binaryType = 'arraybuffer'
    socket.addEventListener('open', () => {
      this.#state = 'open'
      socket.send(JSON.stringify({ type: 'auth', apiKey: this.#options.apiKey }))
    })
    socket.addEventListener('message', (event) => {
      const raw =
        typeof event.data === 'string'
          ? Buffer.from(event.data, 'utf8')
          : Buffer.from(event.data as ArrayBuffer)
      this.#onMessage(raw).catch((error) =>
        this.#options.logger?.warn(
          { err: safeError(error).message },
          'payouts stream message failed'
        )
      )
    })
    socket.addEventListener('close', (event) => {
      this.#authenticated = false
      if (this.#state === 'stopped') return
      this.#options.logger?.warn({ code: event.code }, 'payouts stream closed; reconnecting')
      this.#scheduleReconnect()
    })
    socket.addEventListener('error', () => {
      // A close event always follows; reconnection is handled there.
    })
  }

  async #onMessage(raw: Buffer) {
    let type: unknown
    try {
      type = (parseJsonBytes(raw) as { type?: unknown } | null)?.type
    } catch {
      type = undefined
    }
    if (type === 'auth.ok') return this.#onAuthenticated()
    if (type === 'auth.error') {
      this.#options.logger?.warn({}, 'payouts stream authentication refused')
      return
    }
    // The reply to auth is not shown in the spec: the first event also proves it.
    if (!this.#authenticated) await this.#onAuthenticated()
    await this.#options.onMessage(raw)
  }

  async #onAuthenticated() {
    if (this.#authenticated) return
    this.#authenticated = true
    this.#attempt = 0
    const reconnected = this.#connectedOnce
    this.#connectedOnce = true
    this.#options.logger?.info({ reconnected }, 'payouts stream authenticated')
    debug('stream authenticated (reconnected: %s)', reconnected)
    if (reconnected && this.#options.onReconnect) await this.#options.onReconnect()
  }

  #scheduleReconnect() {
    const base = this.#options.backoff?.baseMs ?? 1000
    const max = this.#options.backoff?.maxMs ?? 30_000
    const jitter = this.#options.backoff?.jitter ?? 0.2
    const random = this.#options.random ?? Math.random
    const delay = Math.min(max, base * 2 ** this.#attempt) * (1 + jitter * (2 * random() - 1))
    this.#attempt++
    debug('stream reconnects in %d ms', Math.round(delay))
    this.#state = 'connecting'
    this.#timer = setTimeout(() => this.#connect(), Math.max(0, delay))
  }

  /** Closes the socket and cancels any pending reconnect. */
  async stop() {
    this.#state = 'stopped'
    clearTimeout(this.#timer)
    const socket = this.#socket
    if (socket && socket.readyState !== WebSocket.CLOSED) {
      await new Promise<void>((resolve) => {
        socket.addEventListener('close', () => resolve(), { once: true })
        socket.close(1000)
        setTimeout(resolve, 1000).unref()
      })
    }
  }
}
