import { randomBytes } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { PayoutStatus, PayoutStep } from '../schemas/common.ts'
import { buildRoutes, confirmDeposit, type ApiResult } from './api.ts'
import { EmulatorClock, type ClockOptions } from './clock.ts'
import { CHAIN_IDS } from './coverage.ts'
import { Faults, type FaultConfig } from './faults.ts'
import { Lifecycle } from './lifecycle.ts'
import { RateLimits } from './rate_limits.ts'
import { createHandler } from './server.ts'
import {
  ALL_SCOPES,
  EmulatorState,
  payoutView,
  recipientView,
  type PayoutRecord,
  type Scope,
} from './state.ts'
import { WebhookDispatcher } from './webhooks.ts'
import { EventSocketServer } from './websocket.ts'

export type { ClockOptions } from './clock.ts'
export type { FaultConfig } from './faults.ts'
export { ALL_SCOPES, type Scope } from './state.ts'

export interface EmulatorOptions {
  port?: number
  host?: string
  clock?: ClockOptions
  /** Emulated time between two lifecycle steps. */
  stepIntervalMs?: number
  /** Emulated time before automatic detection sees an escrow deposit. */
  escrowDetectionDelayMs?: number
  /** Allow http://127.0.0.1 and localhost webhook targets (development only). */
  allowInsecureWebhooks?: boolean
  /** Real milliseconds a webhook receiver may take (spec: 10 s). */
  webhookTimeoutMs?: number
  /** Real milliseconds a socket may stay silent before auth (spec: 10 s). */
  wsAuthTimeoutMs?: number
  /** `false` turns rate limits off; a number multiplies every bucket (load tests). */
  rateLimits?: false | number
  /** Seed of the fault PRNG. */
  seed?: number
  /** A fixed key for the default account, instead of a random one. */
  apiKey?: string
}

const DEFAULT_ACCOUNT = 'acct_default'

/**
 * A stateful, in-memory emulator of the Cross-Border Payout Service over real HTTP and
 * WebSocket, with a controllable clock and faults. See README "Testing a host app".
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
  #server: Server
  #sockets: EventSocketServer

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
  }) {
    this.#server = parts.server
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
    const state = new EmulatorState(clock)
    const faults = new Faults(options.seed ?? 42)
    const webhooks = new WebhookDispatcher({
      clock,
      faults,
      allowInsecureLoopback: options.allowInsecureWebhooks ?? true,
      receiverTimeoutMs: options.webhookTimeoutMs ?? 10_000,
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
      allowInsecureWebhooks: options.allowInsecureWebhooks ?? true,
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
    const apiKey = options.apiKey ?? state.issueKey(DEFAULT_ACCOUNT)
    if (options.apiKey) {
      state.keys.set(options.apiKey, {
        key: options.apiKey,
        accountId: DEFAULT_ACCOUNT,
        scopes: new Set(ALL_SCOPES),
        revoked: false,
        expiresAt: null,
      })
      state.issueKey(DEFAULT_ACCOUNT)
    }
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
    const host = options.host ?? '127.0.0.1'
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(options.port ?? 0, host, () => resolve())
    })
    const { port } = server.address() as AddressInfo
    const baseUrl = `http://${host.includes(':') ? `[${host}]` : host}:${port}`
    return new PayoutsEmulator({
      server,
      baseUrl,
      apiKey,
      clock,
      state,
      webhooks,
      faults,
      sockets,
      admin,
    })
  }

  /** Stops the server, the sockets and every timer. */
  async close() {
    this.clock.close()
    await this.#sockets.close()
    this.#server.closeAllConnections()
    await new Promise<void>((resolve) => this.#server.close(() => resolve()))
    await this.webhooks.settle()
  }
}

/** The emulator's controls, as methods (and over HTTP under /__emulator). */
export class EmulatorAdmin {
  constructor(
    private state: EmulatorState,
    private clock: EmulatorClock,
    private faults: Faults,
    private webhooks: WebhookDispatcher,
    private sockets: EventSocketServer,
    private lifecycle: Lifecycle,
    private detectionDelayMs: number
  ) {}

  /** Turns rate limits off (`false`) or sets their multiplier; fresh buckets either way. */
  setRateLimits: (limits: false | number) => void = () => {}

  /** Moves emulated time forward, firing lifecycle steps and webhook retries. */
  async advance(ms: number) {
    await this.clock.advance(ms)
    await this.webhooks.settle()
  }

  /** Waits until no webhook POST is in flight. */
  settle() {
    return this.webhooks.settle()
  }

  setFaults(config: FaultConfig, seed?: number) {
    this.faults.set(config, seed)
  }

  faultStats() {
    return { ...this.faults.stats, webhooks: { ...this.webhooks.stats } }
  }

  /** Issues a sandbox key (or a live one, to test the environment check) with scopes. */
  issueKey(options: { scopes?: Scope[]; env?: 'test' | 'live'; accountId?: string } = {}) {
    return this.state.issueKey(
      options.accountId ?? DEFAULT_ACCOUNT,
      options.scopes ?? [...ALL_SCOPES],
      options.env ?? 'test'
    )
  }

  /** Rotates a key: the old one works 7 emulated days more. */
  rotateKey(key: string) {
    const record = this.state.keys.get(key)
    if (!record) throw new Error('unknown key')
    const next = this.state.issueKey(record.accountId, [...record.scopes])
    record.expiresAt = this.clock.now() + 7 * 24 * 3600 * 1000
    return next
  }

  revokeKey(key: string) {
    const record = this.state.keys.get(key)
    if (record) record.revoked = true
  }

  /** The account's own payment methods (for userPaymentMethodId). */
  accountPaymentMethods(accountId = DEFAULT_ACCOUNT) {
    return this.state.accountPaymentMethods.get(accountId) ?? []
  }

  get accountPaymentMethodId() {
    return this.accountPaymentMethods()[0].id
  }

  /** Creates a recipient directly (no HTTP, no rate limit). */
  seedRecipient(input: { name?: string; currency?: string } = {}, accountId = DEFAULT_ACCOUNT) {
    return recipientView(
      this.state.createRecipient(accountId, {
        name: input.name ?? 'Test Recipient',
        currency: input.currency ?? 'MXN',
      })
    )
  }

  /**
   * Simulates the on-chain deposit of a stablecoin payout. Automatic detection sees it
   * after the detection delay unless `detect` is false or the missEscrowDetection fault
   * rolls; then only confirm-escrow-deposit moves the quote.
   */
  simulateDeposit(input: {
    quoteId: string
    txHash?: string
    amountAtomic?: bigint | string
    chainId?: number
    to?: string
    detect?: boolean
  }) {
    const quote = this.state.quotes.get(input.quoteId)
    if (!quote || quote.flow !== 'stablecoin_to_fiat') throw new Error('unknown stablecoin quote')
    const txHash = input.txHash ?? `0x${randomBytes(32).toString('hex')}`
    this.state.transactions.set(txHash, {
      txHash,
      to: input.to ?? quote.escrowAddress!,
      amountAtomic:
        input.amountAtomic === undefined ? quote.depositAmountAtomic! : BigInt(input.amountAtomic),
      chainId: input.chainId ?? quote.chainId ?? CHAIN_IDS.polygon,
      confirmedAt: this.clock.now(),
    })
    const missed = input.detect === false || this.faults.roll('missEscrowDetection')
    const tx = this.state.transactions.get(txHash)!
    const matches =
      tx.to === quote.escrowAddress &&
      tx.chainId === quote.chainId &&
      tx.amountAtomic >= quote.depositAmountAtomic!
    if (!missed && matches) {
      this.clock.setTimer(
        () =>
          confirmDeposit({ state: this.state, lifecycle: this.lifecycle }, quote.quoteId, txHash),
        this.detectionDelayMs
      )
    }
    return { txHash, detected: !missed && matches }
  }

  /** Forces a payout's status, with or without an event (reconciliation tests). */
  forcePayoutStatus(
    id: string,
    status: PayoutStatus,
    options: { step?: PayoutStep; emit?: boolean } = {}
  ) {
    const payout =
      this.state.payouts.get(id) ?? this.state.payouts.get(this.state.readIds.get(id) ?? '')
    if (!payout) throw new Error('unknown payout')
    this.lifecycle.force(payout, status, options.step, options.emit ?? true)
    return payoutView(payout)
  }

  payouts() {
    return [...this.state.payouts.values()].map((p) => ({
      ...payoutView(p),
      idempotencyKey: p.idempotencyKey,
      flow: p.flow,
      quoteId: p.quoteId,
    }))
  }

  quote(quoteId: string) {
    return this.state.quotes.get(quoteId)
  }

  dropWebSockets() {
    this.sockets.dropAll()
  }

  get authenticatedSockets() {
    return this.sockets.authenticatedCount
  }

  /** Sizes of every collection (boundedness checks). */
  sizes() {
    return {
      idempotency: this.state.idempotency.size,
      deliveries: this.webhooks.deliveries.size,
      payouts: this.state.payouts.size,
      timers: this.clock.pending,
    }
  }

  /** The same controls over HTTP, for a standalone emulator driven by another process. */
  async http(path: string, method: string, body: any): Promise<ApiResult | null> {
    if (method === 'GET' && path === '/state') {
      return {
        status: 200,
        body: {
          now: this.clock.iso(),
          sizes: this.sizes(),
          faults: this.faultStats(),
          accountPaymentMethods: this.accountPaymentMethods(),
          payouts: this.payouts(),
        },
      }
    }
    if (method !== 'POST') return null
    try {
      switch (path) {
        case '/advance':
          await this.advance(Number(body.ms) || 0)
          return { status: 200, body: { now: this.clock.iso() } }
        case '/faults':
          this.setFaults(body.config ?? body, body.seed)
          return { status: 200, body: { ok: true } }
        case '/keys':
          return { status: 201, body: { apiKey: this.issueKey(body) } }
        case '/deposits':
          return { status: 201, body: this.simulateDeposit(body) }
        case '/recipients':
          return { status: 201, body: this.seedRecipient(body) }
        case '/payouts/status':
          return { status: 200, body: this.forcePayoutStatus(body.id, body.status, body) }
        case '/websockets/drop':
          this.dropWebSockets()
          return { status: 200, body: { ok: true } }
        default:
          return null
      }
    } catch (error) {
      return { status: 400, body: { error: (error as Error).message } }
    }
  }
}
