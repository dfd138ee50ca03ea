import type { PayoutsClient } from '../client/main.ts'
import { E_PAYOUTS_FAKE } from '../errors.ts'
import type { Reachability } from '../health/reachability.ts'
import type { PayoutsConnection } from '../service/connection.ts'
import type { PayoutsEmulator } from '../emulator/emulator.ts'
import type { FaultConfig } from '../emulator/faults.ts'
import { DEFAULT_ACCOUNT, recipientView } from '../emulator/state.ts'
import { TERMINAL_STATUSES, type PayoutStatus, type PayoutStep } from '../schemas/common.ts'
import { batchKeyOf } from '../ledger/batch_keys.ts'
import {
  failIfExecuted,
  failUnlessBatchExecuted,
  failUnlessEscrowConfirmed,
  failUnlessExecuted,
  failUnlessExecutedCount,
  failUnlessRecipientCreated,
  type CreatedRecipient,
  type ExecutedPayout,
  type Match,
  type SentBatch,
} from './fake_assertions.ts'
import { startFake, type FakeBinding, type PayoutsFakeOptions } from './fake_start.ts'

export type { CreatedRecipient, ExecutedPayout, Match, SentBatch } from './fake_assertions.ts'
export type { FakeBinding, PayoutsFakeOptions } from './fake_start.ts'

/** A payout as the fake's methods take it: its UUID, its read id, or a ledger row. */
export type PayoutRef = string | { payoutUuid: string } | { payoutId: string }

/**
 * The handle `payouts.fake()` returns: the in-process emulator the app's service now talks
 * to, lifecycle control, webhook delivery into the app's own route (signed, through the
 * real receiver, inbox and ledger, so the app's listeners and Transmit channels run as in
 * production), the emulator's faults, and assertions on what reached the service.
 *
 * Every method that moves a payout returns once the deliveries it caused were answered by
 * the app and processed by its inbox (see `settle`).
 *
 * `await using fake = await payouts.fake()` restores the service when the block ends
 * (`Symbol.asyncDispose`), as `payouts.restore()` does.
 */
export class PayoutsFake implements AsyncDisposable {
  /** The in-process emulator behind the fake: its admin, clock and state. */
  readonly emulator: PayoutsEmulator
  /** The client the service uses while faked (reaches the emulator in-process). */
  readonly client: PayoutsClient
  /** The secret the fake signs its deliveries with; the app's route accepts it while faked. */
  readonly webhookSecret: string
  /**
   * @internal What the service talks to while faked: this emulator's client, the secret its
   * deliveries are signed with, and health's probe through the same client.
   */
  readonly connection: PayoutsConnection
  #binding: FakeBinding
  #closeApp: () => Promise<void>
  #reported = new Set<string>()
  #seeded = new Set<string>()
  #closed = false
  #accounts = new Map<string, PayoutsFake>()

  /** @internal Made by `payouts.fake()`; use that. */
  constructor(parts: {
    emulator: PayoutsEmulator
    client: PayoutsClient
    webhookSecret: string
    binding: FakeBinding
    closeApp: () => Promise<void>
  }) {
    this.emulator = parts.emulator
    this.client = parts.client
    this.webhookSecret = parts.webhookSecret
    this.#binding = parts.binding
    this.#closeApp = parts.closeApp
    const secrets = parts.webhookSecret ? [parts.webhookSecret] : []
    let reachability: Reachability | undefined
    this.connection = {
      client: parts.client,
      webhookSecrets: secrets,
      faked: true,
      reachability: async () => {
        const { Reachability } = await import('../health/reachability.ts')
        reachability ??= new Reachability(parts.binding.config, () => parts.client)
        return reachability
      },
      close: () => this.close(),
    }
  }

  /** Starts the in-process emulator and points its webhooks at the app's own route. */
  static async start(binding: FakeBinding, options: PayoutsFakeOptions = {}) {
    return new PayoutsFake({ ...(await startFake(binding, options)), binding })
  }

  /**
   * Lets every due delivery reach the app, waits for the app's answers and for the
   * `payouts:webhook_received` listeners of what it stored, then processes the app's inbox.
   * Throws when the app refused a delivery (no route, a bad secret, ...), naming the
   * delivery and the status it answered.
   */
  async settle() {
    this.#live()
    await this.emulator.admin.advance(0)
    await this.emulator.admin.settle()
    await this.#binding.deliveriesTold?.()
    await this.#binding.drainInbox()
    this.#reportRefusedDeliveries()
  }

  /** Moves emulated time forward: lifecycle steps, webhook retries, escrow detection. */
  async advance(ms: number) {
    this.#live()
    await this.emulator.admin.advance(ms)
    await this.settle()
  }

  /** Completes the payout (step `delivered`), as the service does when funds arrive. */
  async complete(payout: PayoutRef) {
    this.#live()
    this.#move(payout, 'completed')
    await this.settle()
  }

  /**
   * Fails the payout at its current step (or `step`). The spec's status event has no
   * reason field; the reason is what a read of the payout shows as the running leg's
   * status in `providerMetadata` (`offramp.status`, or `onramp.status` for onramp payouts).
   */
  async fail(payout: PayoutRef, options: { reason?: string; step?: PayoutStep } = {}) {
    this.#live()
    const record = this.#moving(payout, 'failed')
    record.failureStatus = options.reason ?? 'failed'
    this.emulator.admin.forcePayoutStatus(record.payoutId, 'failed', { step: options.step })
    await this.settle()
  }

  /** Cancels the payout: only a `pending` one, as the service (spec, lifecycle). */
  async cancel(payout: PayoutRef) {
    this.#live()
    const record = this.#moving(payout, 'cancelled')
    if (record.status !== 'pending') {
      throw new E_PAYOUTS_FAKE([
        `cannot cancel payout ${record.payoutId}: it is ${record.status}, and the service cancels only pending payouts`,
      ])
    }
    this.emulator.admin.forcePayoutStatus(record.payoutId, 'cancelled')
    await this.settle()
  }

  /**
   * Sends the on-chain deposit of a stablecoin payout. Detection sees it after
   * `escrowDetectionDelayMs` of emulated time (`advance`) unless `detect` is false; then only
   * the app's confirmation (the escrow fallback) moves the quote.
   */
  deposit(quoteId: string, options: { detect?: boolean; txHash?: string } = {}) {
    this.#live()
    return this.emulator.admin.simulateDeposit({ quoteId, ...options })
  }

  /**
   * A recipient the service holds, created directly (no request): its `id` goes into
   * execute bodies as `recipientId`. `recipients()` and `assertRecipientCreated` count only
   * the ones the app created.
   */
  seedRecipient(input: { name?: string; currency?: string } = {}) {
    this.#live()
    const recipient = this.emulator.admin.seedRecipient(input)
    this.#seeded.add(recipient.id)
    return recipient
  }

  /** The account's payment method: the `userPaymentMethodId` of fiat payouts. */
  get paymentMethodId(): string {
    this.#live()
    return this.emulator.admin.accountPaymentMethodId
  }

  /** Replaces the faults (all off with `{}`), e.g. `{ errorRate: 1 }` or `{ webhookDuplicateRate: 1 }`. */
  faults(config: FaultConfig) {
    this.#live()
    this.emulator.admin.setFaults(config)
  }

  /** Every payout the service holds, oldest first. */
  executed(): ExecutedPayout[] {
    this.#live()
    return this.emulator.admin.payouts()
  }

  /**
   * Every batch the app sent, in the order of their first requests: the execute-batch
   * requests the service processed, grouped by batch key (the chunks of one
   * `payouts.executeBatch` are one batch), with their rows and payouts.
   */
  batches(): SentBatch[] {
    this.#live()
    const payouts = new Map(this.executed().map((payout) => [payout.payoutId, payout]))
    const batches = new Map<string | undefined, SentBatch>()
    for (const record of this.emulator.admin.batches()) {
      if (record.accountId !== DEFAULT_ACCOUNT) continue
      const key =
        record.idempotencyKey && (batchKeyOf(record.idempotencyKey) ?? record.idempotencyKey)
      let batch = batches.get(key)
      if (!batch) {
        batch = {
          idempotencyKey: key,
          requests: 0,
          rows: 0,
          created: 0,
          refused: 0,
          refusals: [],
          payouts: [],
        }
        batches.set(key, batch)
      }
      batch.requests++
      batch.rows += record.rows.length
      for (const row of record.rows) {
        if ('code' in row) {
          batch.refused++
          batch.refusals.push(row.code)
        } else {
          batch.created++
          const payout = payouts.get(row.payoutId)
          if (payout) batch.payouts.push(payout)
        }
      }
    }
    return [...batches.values()]
  }

  /** Every recipient the app created at the service (seeded ones are not counted). */
  recipients(): CreatedRecipient[] {
    this.#live()
    return [...this.emulator.state.recipients.values()]
      .filter((r) => r.accountId === DEFAULT_ACCOUNT && !this.#seeded.has(r.id))
      .map((recipient) => recipientView(recipient))
  }

  /** Fails unless the service holds a payout (matching `match`). */
  assertExecuted(match?: Match<ExecutedPayout>) {
    failUnlessExecuted(this.executed(), match)
  }

  /** Fails when the service holds a payout (matching `match`). */
  assertNotExecuted(match?: Match<ExecutedPayout>) {
    failIfExecuted(this.executed(), match)
  }

  /** Fails unless the service holds exactly `count` payouts (matching `match`). */
  assertExecutedCount(count: number, match?: Match<ExecutedPayout>) {
    failUnlessExecutedCount(this.executed(), count, match)
  }

  /**
   * Fails unless the app sent a batch (matching `match`: its `idempotencyKey`, `rows`,
   * `created`, `refused`, `requests`, or a predicate), e.g.
   * `assertBatchExecuted({ idempotencyKey: 'payroll-2026-05', created: 250 })`.
   */
  assertBatchExecuted(match?: Match<SentBatch>) {
    failUnlessBatchExecuted(this.batches(), match)
  }

  /** Fails unless the escrow deposit of the quote (or of any quote) is confirmed. */
  assertEscrowConfirmed(quoteId?: string) {
    this.#live()
    failUnlessEscrowConfirmed(this.emulator.state.quotes.values(), quoteId)
  }

  /** Fails unless the service holds a recipient (matching `match`). */
  assertRecipientCreated(match?: Match<CreatedRecipient>) {
    failUnlessRecipientCreated(this.recipients(), match)
  }

  /**
   * The fake of another account of the app (`payouts.fake()` fakes every account, each with
   * its own emulator): `fake.account('eu').complete(payout)`. Its name is the one in
   * config/payouts.ts; an account the app does not have is refused.
   */
  account(name: string): PayoutsFake {
    const fake = this.#accounts.get(name) ?? (name === this.accountName ? this : undefined)
    if (!fake) {
      const known = [...new Set([this.accountName, ...this.#accounts.keys()])].join(', ')
      throw new E_PAYOUTS_FAKE([`no account "${name}" is faked here (faked: ${known})`])
    }
    return fake
  }

  /** The account this fake stands in for. */
  get accountName(): string {
    return this.#binding.config.account
  }

  /** @internal The fakes of the app's accounts, set by the manager's `fake()`. */
  knowAccounts(fakes: Map<string, PayoutsFake>) {
    this.#accounts = fakes
  }

  /** Stops the emulator and the in-process route (`payouts.restore()` calls it). */
  async close() {
    if (this.#closed) return
    this.#closed = true
    await this.client.close()
    await this.emulator.close()
    await this.#closeApp()
  }

  /**
   * `await using`: when the block ends, the service gets its real connection back (every
   * account's, for the manager's fake), as `payouts.restore()` gives it; a fake another
   * `payouts.fake()` replaced since is only closed. Async only: the restore waits for the
   * inbox's processing and closes the emulator, so there is no `Symbol.dispose`.
   */
  async [Symbol.asyncDispose]() {
    await this.#binding.restore?.(this.connection)
    await this.close()
  }

  /** A restored fake answers nothing: its emulator is gone, and its answers would mislead. */
  #live() {
    if (this.#closed) {
      throw new E_PAYOUTS_FAKE([
        'this fake was restored (payouts.restore(), or payouts.fake() called again, as the Japa plugin does before each test); use the handle the latest payouts.fake() returned, or ctx.payouts',
      ])
    }
  }

  #record(payout: PayoutRef) {
    // A Lucid row keeps its attributes behind getters: read them, do not test with `in`.
    const id =
      typeof payout === 'string'
        ? payout
        : ((payout as { payoutUuid?: string }).payoutUuid ??
          (payout as { payoutId?: string }).payoutId ??
          '')
    const { state } = this.emulator
    const record = state.payouts.get(id) ?? state.payouts.get(state.readIds.get(id) ?? '')
    if (!record) {
      throw new E_PAYOUTS_FAKE([
        `the service has no payout ${id} (executed: ${this.executed().length})`,
      ])
    }
    return record
  }

  #moving(payout: PayoutRef, to: PayoutStatus) {
    const record = this.#record(payout)
    if (TERMINAL_STATUSES.includes(record.status)) {
      throw new E_PAYOUTS_FAKE([
        `cannot move payout ${record.payoutId} to ${to}: it is already ${record.status}`,
      ])
    }
    return record
  }

  #move(payout: PayoutRef, to: PayoutStatus) {
    const record = this.#moving(payout, to)
    this.emulator.admin.forcePayoutStatus(record.payoutId, to)
  }

  /** Deliveries the app answered with something else than 2xx, each reported once. */
  #reportRefusedDeliveries() {
    const refused = this.emulator.admin
      .deliveries()
      .filter(
        (delivery) =>
          delivery.status !== 'succeeded' &&
          delivery.attempts > 0 &&
          !this.#reported.has(`${delivery.id}:${delivery.attempts}`)
      )
    for (const delivery of refused) this.#reported.add(`${delivery.id}:${delivery.attempts}`)
    // Injected faults (drops, a broken receiver on purpose) are the test's business.
    if (refused.length === 0 || hasWebhookFaults(this.emulator.faults.config)) return
    const first = refused[0]
    const status = first.lastStatusCode ?? first.lastError ?? 'no answer'
    // Every subscription delivers into the app, at its URL's path (the fake's own: webhook.path).
    const url = this.emulator.webhooks.subscriptions.get(first.subscriptionId)?.url
    const path = url ? new URL(url).pathname : this.#binding.config.webhook.path
    const ownRoute = path === this.#binding.config.webhook.path
    throw new E_PAYOUTS_FAKE([
      `the app refused ${refused.length} webhook delivery(ies): ${first.eventType} ${first.id} got ${status} from POST ${path}` +
        (first.lastStatusCode === 404 && ownRoute
          ? ' (the route is missing: is `#start/payouts` in the preloads of adonisrc.ts, with `await payouts.registerRoutes(router)` in start/payouts.ts?)'
          : '') +
        (first.lastStatusCode === 404 && !ownRoute
          ? ` (a subscription to ${url}: under the fake, every subscribed URL is this app)`
          : ''),
    ])
  }
}

function hasWebhookFaults(config: FaultConfig) {
  return Object.entries(config).some(([key, value]) => key.startsWith('webhook') && value)
}
