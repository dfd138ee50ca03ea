import { lookup } from 'node:dns/promises'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Dispatcher } from 'undici'
import type { WebhookLookup } from '../schemas/webhook_urls.ts'
import { EmulatorAdmin } from './admin.ts'
import { buildRoutes } from './api.ts'
import { EmulatorClock, type ClockOptions } from './clock.ts'
import { Faults } from './faults.ts'
import { listenInProcess } from './in_process.ts'
import { Lifecycle } from './lifecycle.ts'
import { RateLimits } from './rate_limits.ts'
import { createHandler } from './server.ts'
import { DEFAULT_ACCOUNT, EmulatorState, type PayoutRecord } from './state.ts'
import { WebhookDispatcher } from './webhooks.ts'
import { EventSocketServer } from './websocket.ts'

/** The base URL of an in-process emulator: a reserved name that resolves nowhere. */
export const IN_PROCESS_BASE_URL = 'http://payouts-emulator.invalid'

/** Options of `PayoutsEmulator.start(...)`. */
export interface EmulatorOptions {
  port?: number
  host?: string
  clock?: ClockOptions
  /** Emulated time between two lifecycle steps. */
  stepIntervalMs?: number
  /** Emulated time before automatic detection sees an escrow deposit. */
  escrowDetectionDelayMs?: number
  /**
   * Development only: accept loopback webhook targets (127.0.0.0/8, ::1, localhost), over
   * http too. Off by default, as strict as the service; private, link-local and metadata
   * hosts stay refused either way.
   */
  allowInsecureWebhooks?: boolean
  /** Resolves webhook host names at creation and before each POST (default: `node:dns`). */
  lookup?: WebhookLookup
  /** Real milliseconds a webhook receiver may take (spec: 10 s). */
  webhookTimeoutMs?: number
  /** Real milliseconds a socket may stay silent before auth (spec: 10 s). */
  wsAuthTimeoutMs?: number
  /** `false` turns rate limits off; a number multiplies every bucket (load tests). */
  rateLimits?: false | number
  /**
   * Seed of the fault PRNG (42 without one) and of the stable ids: with a seed, the default
   * key (unless `apiKey` is given), the accounts' payment methods and the recipients seeded
   * through the admin are the same at every start.
   */
  seed?: number
  /** A fixed key for the default account, instead of a random one. */
  apiKey?: string
  /**
   * Serve on a socket only this process reaches (no TCP port): `baseUrl` is then a name that
   * resolves nowhere, and `dispatcher` is the undici dispatcher that reaches the emulator
   * (pass it to the client). `payouts.fake()` uses it.
   */
  inProcess?: boolean
  /**
   * How webhook POSTs travel (default: an undici Agent that connects only to the addresses the
   * URL rule just checked). `payouts.fake()` passes one that reaches the app in-process.
   */
  webhookDispatcher?: Dispatcher
}

/**
 * A stateful, in-memory emulator of the Cross-Border Payout Service over real HTTP and
 * WebSocket, with a controllable clock and faults. See README "Testing your app".
 */
export class PayoutsEmulator {
  readonly baseUrl: string
  readonly wsUrl: string
  readonly apiKey: string
  readonly clock: EmulatorClock
  readonly state: EmulatorState
  readonly webhooks: WebhookDispatcher
  readonly faults: Faults
  readonly admin: EmulatorAdmin
  /** With `inProcess`: the undici dispatcher that reaches this emulator. */
  readonly dispatcher?: Dispatcher
  #server: Server
  #sockets: EventSocketServer
  #closeDispatcher?: () => Promise<void>

  private constructor(parts: {
    server: Server
    baseUrl: string
    apiKey: string
    clock: EmulatorClock
    state: EmulatorState
    webhooks: WebhookDispatcher
    faults: Faults
    sockets: EventSocketServer
    admin: EmulatorAdmin
    inProcess?: { dispatcher: Dispatcher; close: () => Promise<void> }
  }) {
    this.#server = parts.server
    this.dispatcher = parts.inProcess?.dispatcher
    this.#closeDispatcher = parts.inProcess?.close
    this.baseUrl = parts.baseUrl
    this.wsUrl = parts.baseUrl.replace(/^http/, 'ws') + '/ws'
    this.apiKey = parts.apiKey
    this.clock = parts.clock
    this.state = parts.state
    this.webhooks = parts.webhooks
    this.faults = parts.faults
    this.#sockets = parts.sockets
    this.admin = parts.admin
  }

  /** Starts the emulator; `port: 0` picks a free port. */
  static async start(options: EmulatorOptions = {}): Promise<PayoutsEmulator> {
    const clock = new EmulatorClock(options.clock ?? { mode: 'real' })
    const state = new EmulatorState(clock, options.seed)
    const faults = new Faults(options.seed ?? 42)
    const webhooks = new WebhookDispatcher({
      clock,
      faults,
      allowInsecureLoopback: options.allowInsecureWebhooks ?? false,
      lookup: options.lookup ?? ((hostname) => lookup(hostname, { all: true })),
      receiverTimeoutMs: options.webhookTimeoutMs ?? 10_000,
      dispatcher: options.webhookDispatcher,
    })
    const sockets = new EventSocketServer(state, options.wsAuthTimeoutMs ?? 10_000)
    const emit = (payout: PayoutRecord, type: 'payout.created' | 'payout.status.updated') => {
      const data =
        type === 'payout.created'
          ? {
              payoutId: payout.payoutId,
              transactionType: payout.flow,
              payoutAmount: payout.payoutAmount,
              payoutCurrency: payout.payoutCurrency,
              sourceCurrency: payout.sourceCurrency,
              recipientId: payout.recipientId,
              status: 'pending',
              createdAt: payout.createdAt,
            }
          : {
              payoutId: faults.roll('readIdRate')
                ? (faults.stats.readIds++, payout.readId)
                : payout.payoutId,
              status: payout.status,
              provider: 'emulator-rail',
              step: payout.step,
              stepChangedAt: clock.iso(),
            }
      // Emulated time, like the payout's createdAt and stepChangedAt inside it: it dates the
      // event in the emulated world, where the ledger records it as the change's time. Only
      // the signature's timestamp is wall-clock time (webhooks.ts): a receiver checks it.
      const envelope = { type, createdAt: clock.iso(), data }
      webhooks.publish(payout.accountId, type, envelope)
      sockets.broadcast(payout.accountId, envelope)
    }
    const lifecycle = new Lifecycle(clock, emit, options.stepIntervalMs ?? 2000)
    const deps = {
      state,
      clock,
      lifecycle,
      webhooks,
      allowInsecureWebhooks: options.allowInsecureWebhooks ?? false,
      emit,
    }
    const admin = new EmulatorAdmin(
      state,
      clock,
      faults,
      webhooks,
      sockets,
      lifecycle,
      options.escrowDetectionDelayMs ?? 30_000
    )
    const apiKey = state.addKey(options.apiKey ?? state.defaultKey(), DEFAULT_ACCOUNT)
    const httpDeps = {
      state,
      clock,
      faults,
      rateLimits:
        options.rateLimits === false ? null : new RateLimits(clock, options.rateLimits ?? 1),
      routes: buildRoutes(deps),
      admin: (path: string, method: string, body: unknown) => admin.http(path, method, body),
    }
    admin.setRateLimits = (limits) => {
      httpDeps.rateLimits = limits === false ? null : new RateLimits(clock, limits)
    }
    const handler = createHandler(httpDeps)
    const server = createServer((req, res) => {
      handler(req, res).catch(() => {
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ error: 'internal error' }))
      })
    })
    server.on('upgrade', (req, socket, head) => sockets.upgrade(req, socket, head))
    const parts = { server, apiKey, clock, state, webhooks, faults, sockets, admin }
    if (options.inProcess) {
      const inProcess = await listenInProcess(server, 'emulator')
      return new PayoutsEmulator({ ...parts, baseUrl: IN_PROCESS_BASE_URL, inProcess })
    }
    const host = options.host ?? '127.0.0.1'
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(options.port ?? 0, host, () => resolve())
    })
    const { port } = server.address() as AddressInfo
    const baseUrl = `http://${host.includes(':') ? `[${host}]` : host}:${port}`
    return new PayoutsEmulator({ ...parts, baseUrl })
  }

  /** Stops the server, the sockets and every timer. */
  async close() {
    this.clock.close()
    await this.#sockets.close()
    this.#server.closeAllConnections()
    await new Promise<void>((resolve) => this.#server.close(() => resolve()))
    await this.webhooks.close()
    await this.#closeDispatcher?.()
  }
}
