import { randomBytes } from 'node:crypto'
import type { PayoutStatus, PayoutStep } from '../schemas/common.ts'
import type { ApiResult } from './api.ts'
import type { EmulatorClock } from './clock.ts'
import { CHAIN_IDS } from './coverage.ts'
import type { Faults, FaultConfig } from './faults.ts'
import { confirmDeposit } from './handlers/rfq.ts'
import type { Lifecycle } from './lifecycle.ts'
import {
  ALL_SCOPES,
  DEFAULT_ACCOUNT,
  payoutView,
  recipientView,
  type EmulatorState,
  type Scope,
} from './state.ts'
import type { WebhookDispatcher } from './webhooks.ts'
import type { EventSocketServer } from './websocket.ts'

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
