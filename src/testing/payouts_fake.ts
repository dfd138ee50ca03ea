import { AssertionError } from 'node:assert'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { inspect } from 'node:util'
import { PayoutsClient } from '../client/main.ts'
import type { PayoutsConfig } from '../define_config.ts'
import { E_PAYOUTS_FAKE } from '../errors.ts'
import type { Reachability } from '../health/reachability.ts'
import type { PayoutsConnection } from '../service/connection.ts'
import { PayoutsEmulator } from '../emulator/emulator.ts'
import type { FaultConfig } from '../emulator/faults.ts'
import { listenInProcess } from '../emulator/in_process.ts'
import { DEFAULT_ACCOUNT, recipientView } from '../emulator/state.ts'
import type { Dispatcher } from 'undici'
import {
  TERMINAL_STATUSES,
  WEBHOOK_EVENT_TYPES,
  type PayoutStatus,
  type PayoutStep,
} from '../schemas/common.ts'

/** What `payouts.fake()` accepts. */
export interface PayoutsFakeOptions {
  /** Faults from the start (the emulator's; change them later with `fake.faults()`). */
  faults?: FaultConfig
  /** Seed of the fault PRNG and of the emulator's stable ids (reproducible runs). */
  seed?: number
  /** Emulated time between two lifecycle steps when `advance()` drives them (2000 ms). */
  stepIntervalMs?: number
  /** Emulated time before automatic detection sees an escrow deposit (30 s). */
  escrowDetectionDelayMs?: number
  /**
   * Real milliseconds the client waits for an answer before it retries (2000 ms; the
   * configured `timeoutMs` is for the real service). Retries do not wait between attempts.
   */
  timeoutMs?: number
}

/** A payout as the fake's methods take it: its UUID, its read id, or a ledger row. */
export type PayoutRef = string | { payoutUuid: string } | { payoutId: string }

/** A payout as the service (the fake) holds it: what the app sent it. */
export type ExecutedPayout = ReturnType<PayoutsEmulator['admin']['payouts']>[number]

/** A recipient as the service (the fake) holds it. */
export type CreatedRecipient = ReturnType<typeof recipientView>

/** Fields to match (each must be equal), or a predicate. */
export type Match<T> = Partial<T> | ((item: T) => boolean)

/** What the fake needs from the app and the service it is bound to. */
export interface FakeBinding {
  config: PayoutsConfig
  /** The app's HTTP server (`server` in the container): deliveries go through it. */
  httpServer?: () => Promise<{
    boot(): Promise<void>
    handle(req: IncomingMessage, res: ServerResponse): unknown
  }>
  /** Processes every stored delivery now (the service's `drainInbox`). */
  drainInbox: () => Promise<unknown>
}

/** The host of the fake's own subscription: a reserved name, reached in-process only. */
const FAKE_APP_ORIGIN = 'https://app.payouts-fake.invalid'

/**
 * Webhook POSTs into the app's in-process server whatever their URL's scheme and host: plain
 * HTTP over the local socket (no TLS, no DNS); the Host header is still the URL's host.
 */
function intoTheApp(app: Dispatcher): Dispatcher {
  return app.compose((dispatch) => (options, handler) => {
    const { host } = new URL(String(options.origin))
    return dispatch({ ...options, origin: `http://${host}` }, handler)
  })
}

const describe = (value: unknown) => inspect(value, { depth: 4, breakLength: 100 })

/**
 * The handle `payouts.fake()` returns: the in-process emulator the app's service now talks
 * to, lifecycle control, webhook delivery into the app's own route (signed, through the
 * real receiver, inbox and ledger, so the app's listeners and Transmit channels run as in
 * production), the emulator's faults, and assertions on what reached the service.
 *
 * Every method that moves a payout returns once the deliveries it caused were answered by
 * the app and processed by its inbox (see `settle`).
 */
export class PayoutsFake {
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
    const { config } = binding
    if (!binding.httpServer) {
      throw new E_PAYOUTS_FAKE([
        'the app has no HTTP server binding: payouts.fake() delivers webhooks through it',
      ])
    }
    const httpServer = await binding.httpServer()
    // The app's server boots (commits its routes) at the first delivery, not before: a test
    // may still register routes after faking.
    const appServer = createServer((req, res) => {
      httpServer
        .boot()
        .then(() => httpServer.handle(req, res))
        .catch((error) => {
          if (!res.headersSent) res.writeHead(500)
          res.end(String(error))
        })
    })
    const app = await listenInProcess(appServer, 'app')
    const closeApp = async () => {
      appServer.closeAllConnections()
      await new Promise((resolve) => appServer.close(resolve))
      await app.close()
    }
    try {
      // The service's rules, unrelaxed: the app's calls are refused as the service refuses
      // them (an http, localhost or private webhook URL included). Only the transport is
      // in-process, and no name is resolved: every webhook host stands for the app.
      const emulator = await PayoutsEmulator.start({
        inProcess: true,
        clock: { mode: 'manual' },
        seed: options.seed,
        stepIntervalMs: options.stepIntervalMs,
        escrowDetectionDelayMs: options.escrowDetectionDelayMs,
        rateLimits: false,
        lookup: async () => [],
        webhookDispatcher: intoTheApp(app.dispatcher),
      })
      if (options.faults) emulator.admin.setFaults(options.faults, options.seed)
      // The fake's own subscription is made inside the emulator, not through the API the app
      // calls, with a URL the rule accepts; its POSTs reach the app's route in-process.
      // Without the ledger the app has no inbox to deliver to: nothing is subscribed.
      const subscription = config.ledger.enabled
        ? emulator.webhooks.createSubscription(DEFAULT_ACCOUNT, {
            url: `${FAKE_APP_ORIGIN}${config.webhook.path}`,
            events: [...WEBHOOK_EVENT_TYPES],
            label: 'payouts.fake()',
          })
        : null
      // The app's client as configured: what it refuses before sending, it refuses here too.
      const client = new PayoutsClient({
        apiKey: emulator.apiKey,
        baseUrl: emulator.baseUrl,
        environment: 'sandbox',
        timeoutMs: options.timeoutMs ?? 2000,
        retry: { ...config.retry, baseDelayMs: 0, jitter: 0 },
        rateLimiter: false,
        paths: config.paths,
        allowInsecureLoopbackWebhooks: config.allowInsecureLoopbackWebhooks,
        dispatcher: emulator.dispatcher,
        sleep: () => new Promise((resolve) => setImmediate(resolve)),
      })
      return new PayoutsFake({
        emulator,
        client,
        webhookSecret: subscription?.secret ?? '',
        binding,
        closeApp,
      })
    } catch (error) {
      await closeApp()
      throw error
    }
  }

  /**
   * Lets every due delivery reach the app, waits for the app's answers, then processes
   * the app's inbox. Throws when the app refused a delivery (no route, a bad secret, ...),
   * naming the delivery and the status it answered.
   */
  async settle() {
    this.#live()
    await this.emulator.admin.advance(0)
    await this.emulator.admin.settle()
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

  /** Every recipient the app created at the service (seeded ones are not counted). */
  recipients(): CreatedRecipient[] {
    this.#live()
    return [...this.emulator.state.recipients.values()]
      .filter((r) => r.accountId === DEFAULT_ACCOUNT && !this.#seeded.has(r.id))
      .map((recipient) => recipientView(recipient))
  }

  /** Fails unless the service holds a payout (matching `match`). */
  assertExecuted(match?: Match<ExecutedPayout>) {
    const payouts = this.executed()
    if (payouts.some(matcher(match))) return
    fail({
      message: match
        ? `Expected a payout matching ${describe(match)} to be executed; the ${payouts.length} executed: ${describe(payouts.map(summary))}`
        : 'Expected a payout to be executed; none was',
      expected: [match ?? 'a payout'],
      actual: payouts.map(summary),
      operator: 'assertExecuted',
    })
  }

  /** Fails when the service holds a payout (matching `match`). */
  assertNotExecuted(match?: Match<ExecutedPayout>) {
    const found = this.executed().filter(matcher(match))
    if (found.length === 0) return
    fail({
      message: `Expected no payout${match ? ` matching ${describe(match)}` : ''} to be executed; ${found.length} was: ${describe(found.map(summary))}`,
      expected: [],
      actual: found.map(summary),
      operator: 'assertNotExecuted',
    })
  }

  /** Fails unless the service holds exactly `count` payouts (matching `match`). */
  assertExecutedCount(count: number, match?: Match<ExecutedPayout>) {
    const found = this.executed().filter(matcher(match))
    if (found.length === count) return
    fail({
      message: `Expected ${count} executed payout(s)${match ? ` matching ${describe(match)}` : ''}; found ${found.length}: ${describe(found.map(summary))}`,
      expected: count,
      actual: found.length,
      operator: 'assertExecutedCount',
    })
  }

  /** Fails unless the escrow deposit of the quote (or of any quote) is confirmed. */
  assertEscrowConfirmed(quoteId?: string) {
    this.#live()
    const quotes = [...this.emulator.state.quotes.values()].filter(
      (quote) => quote.flow === 'stablecoin_to_fiat' && (!quoteId || quote.quoteId === quoteId)
    )
    if (quotes.some((quote) => quote.status === 'deposit_confirmed')) return
    const seen = quotes.map((quote) => ({ quoteId: quote.quoteId, status: quote.status }))
    fail({
      message: quoteId
        ? `Expected the escrow deposit of quote ${quoteId} to be confirmed; ${seen.length ? `it is ${seen[0].status}` : 'the service has no such stablecoin quote'}`
        : `Expected an escrow deposit to be confirmed; the stablecoin quotes: ${describe(seen)}`,
      expected: [{ quoteId: quoteId ?? 'any', status: 'deposit_confirmed' }],
      actual: seen,
      operator: 'assertEscrowConfirmed',
    })
  }

  /** Fails unless the service holds a recipient (matching `match`). */
  assertRecipientCreated(match?: Match<CreatedRecipient>) {
    const recipients = this.recipients()
    if (recipients.some(matcher(match))) return
    fail({
      message: match
        ? `Expected a recipient matching ${describe(match)} to be created; the ${recipients.length} created: ${describe(recipients.map((r) => ({ id: r.id, name: r.name, currency: r.currency })))}`
        : 'Expected a recipient to be created; none was',
      expected: [match ?? 'a recipient'],
      actual: recipients,
      operator: 'assertRecipientCreated',
    })
  }

  /** Stops the emulator and the in-process route (`payouts.restore()` calls it). */
  async close() {
    if (this.#closed) return
    this.#closed = true
    await this.client.close()
    await this.emulator.close()
    await this.#closeApp()
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

function matcher<T extends object>(match?: Match<T>): (item: T) => boolean {
  if (!match) return () => true
  if (typeof match === 'function') return match
  return (item) =>
    Object.entries(match).every(([key, value]) => {
      const actual = (item as Record<string, unknown>)[key]
      return typeof value === 'object' && value !== null
        ? inspect(actual) === inspect(value)
        : actual === value
    })
}

function summary(payout: ExecutedPayout) {
  const shown = {
    payoutId: payout.payoutId,
    status: payout.status,
    sourceAmount: payout.sourceAmount,
    sourceCurrency: payout.sourceCurrency,
    payoutAmount: payout.payoutAmount,
    payoutCurrency: payout.payoutCurrency,
    recipientId: payout.recipientId,
    reference: payout.reference,
  }
  return Object.fromEntries(Object.entries(shown).filter(([, value]) => value !== undefined))
}

function fail(options: { message: string; expected: unknown; actual: unknown; operator: string }) {
  throw new AssertionError(options)
}
