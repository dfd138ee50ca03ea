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

/** How long a rotated key keeps working (spec, Authentication 7). */
const ROTATION_GRACE_MS = 7 * 24 * 3600 * 1000

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

  /** Replaces the fault configuration (all off with `{}`); a seed restarts the PRNG. */
  setFaults(config: FaultConfig, seed?: number) {
    this.faults.set(config, seed)
  }

  /** Counters of the faults injected and of the webhook attempts. */
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

  /**
   * Rotates a key: the old one works 7 emulated days more; then its requests get 401 and its
   * open sockets are closed.
   */
  rotateKey(key: string) {
    const record = this.state.keys.get(key)
    if (!record) throw new Error('unknown key')
    const next = this.state.issueKey(record.accountId, [...record.scopes])
    record.expiresAt = this.clock.now() + ROTATION_GRACE_MS
    this.clock.setTimer(() => this.sockets.closeInvalidKeys(), ROTATION_GRACE_MS)
    return next
  }

  /**
   * Revokes a key at once: its requests get 401 and its open sockets are closed with 4001
   * (the spec allows a 30 s drain; the emulator takes none).
   */
  revokeKey(key: string) {
    const record = this.state.keys.get(key)
    if (!record) throw new Error('unknown key')
    record.revoked = true
    this.sockets.closeInvalidKeys()
  }

  /** The account's own payment methods (for userPaymentMethodId). */
  accountPaymentMethods(accountId = DEFAULT_ACCOUNT) {
    return this.state.accountPaymentMethods.get(accountId) ?? []
  }

  get accountPaymentMethodId() {
    return this.accountPaymentMethods()[0].id
  }

  /**
   * Creates a recipient directly (no HTTP, no rate limit). With the emulator's `seed`, the
   * n-th recipient seeded gets the same ids at every start.
   */
  seedRecipient(input: { name?: string; currency?: string } = {}, accountId = DEFAULT_ACCOUNT) {
    return recipientView(
      this.state.createRecipient(
        accountId,
        { name: input.name ?? 'Test Recipient', currency: input.currency ?? 'MXN' },
        true
      )
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

  /**
   * Every payout of every account, with its Idempotency-Key (an execute's), or the key of the
   * execute-batch request that made it and its row there (`batchKey`, `batchIndex`), its
   * flow and quote.
   */
  payouts() {
    return [...this.state.payouts.values()].map((p) => ({
      ...payoutView(p),
      idempotencyKey: p.idempotencyKey,
      batchKey: p.batchKey,
      batchIndex: p.batchIndex,
      flow: p.flow,
      quoteId: p.quoteId,
    }))
  }

  /**
   * Every execute-batch request processed (replays under its key are not), oldest first: its
   * account, key, and per row the payout made or the code it was refused with.
   */
  batches() {
    return this.state.batches.map((batch) => ({ ...batch, rows: [...batch.rows] }))
  }

  /** A quote's record (stablecoin: escrow address, deposit amount, chain). */
  quote(quoteId: string) {
    return this.state.quotes.get(quoteId)
  }

  /** Every webhook delivery of every account, oldest first, as the API shows them. */
  deliveries() {
    return [...this.webhooks.deliveries.values()].map((d) => this.webhooks.view(d))
  }

  /** Replays a delivery as a fresh attempt (no rate limit); answers the new delivery. */
  replayDelivery(id: string) {
    const delivery = this.webhooks.deliveries.get(id)
    const replay = delivery && this.webhooks.replay(delivery)
    if (!replay) throw new Error('unknown delivery or subscription')
    return this.webhooks.view(replay)
  }

  /**
   * Cuts every WebSocket connection (reconnect tests). `refuseNew`: new connections are
   * refused too, until `acceptWebSockets()`, so a test decides when nobody listens.
   */
  dropWebSockets(options: { refuseNew?: boolean } = {}) {
    if (options.refuseNew) this.sockets.refuseNew()
    this.sockets.dropAll()
  }

  /** Accepts WebSocket connections again after `dropWebSockets({ refuseNew: true })`. */
  acceptWebSockets() {
    this.sockets.acceptNew()
  }

  /** Sockets authenticated with a still-valid key. */
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

  /**
   * The same controls over HTTP under /__emulator, for a standalone emulator driven by another
   * process (docs/emulator.md lists them). Answers null for an unknown call (404).
   */
  async http(path: string, method: string, body: any): Promise<ApiResult | null> {
    const ok = (result: unknown = { ok: true }, status = 200) => ({ status, body: result })
    try {
      if (method === 'GET') {
        switch (path) {
          case '/state':
            return ok({
              now: this.clock.iso(),
              sizes: this.sizes(),
              faults: this.faultStats(),
              accountPaymentMethods: this.accountPaymentMethods(),
              payouts: this.payouts(),
              batches: this.batches(),
            })
          case '/faults':
            return ok({ config: this.faults.config, stats: this.faultStats() })
          case '/webhooks/deliveries':
            return ok({ data: this.deliveries() })
          default:
            return null
        }
      }
      if (method !== 'POST') return null
      switch (path) {
        case '/advance':
          await this.advance(Number(body.ms) || 0)
          return ok({ now: this.clock.iso() })
        case '/faults':
          this.setFaults(body.config ?? body, body.seed)
          return ok()
        case '/keys':
          return ok({ apiKey: this.issueKey(body) }, 201)
        case '/keys/rotate':
          return ok({ apiKey: this.rotateKey(body.apiKey) }, 201)
        case '/keys/revoke':
          this.revokeKey(body.apiKey)
          return ok()
        case '/deposits':
          return ok(this.simulateDeposit(body), 201)
        case '/recipients':
          return ok(this.seedRecipient(body, body.accountId), 201)
        case '/payouts/status':
          return ok(this.forcePayoutStatus(body.id, body.status, body))
        case '/webhooks/replay':
          return ok(this.replayDelivery(body.id), 202)
        case '/websockets/drop':
          this.dropWebSockets({ refuseNew: body?.refuseNew === true })
          return ok()
        case '/websockets/accept':
          this.acceptWebSockets()
          return ok()
        default:
          return null
      }
    } catch (error) {
      return { status: 400, body: { error: (error as Error).message } }
    }
  }
}
