import { inspect } from 'node:util'
import type { HttpRouterService } from '@adonisjs/core/types'
import type { PayoutsClient } from '../client/main.ts'
import type { HttpContext } from '@adonisjs/core/http'
import { redactCredentials } from '../client/redact.ts'
import type { ExecuteInput } from '../client/payouts_client.ts'
import type { PayoutsConfig } from '../define_config.ts'
import debug from '../debug.ts'
import { E_PAYOUTS_FEATURE_DISABLED } from '../errors.ts'
import type { HeartbeatName } from '../health/heartbeats.ts'
import type { EscrowDeposits } from '../ledger/escrow_deposits.ts'
import type { BatchOptions, ExecutedBatch } from '../ledger/payout_batches.ts'
import type { IntentState } from '../models/execution_intent.ts'
import type { ReplayFilter } from './inbox_view.ts'
import type { RecipientsMirror } from '../ledger/recipients_mirror.ts'
import type { PayoutsFake, PayoutsFakeOptions } from '../testing/payouts_fake.ts'
import type { SecretStore } from '../webhooks/secret_store.ts'
import type { WebhookReceivedEvent, WebhookType, WithEventKey } from '../types/events.ts'
import { BackgroundWork } from './background_work.ts'
import { LiveConnection, type PayoutsConnection } from './connection.ts'
import { PayoutsNotifier, type ChannelAuthorizers, type ChannelBroadcaster } from './notifier.ts'
import { TransmitChannels } from './transmit_channels.ts'
import { webhookSubscriptions } from './webhook_subscriptions.ts'
import type { PayoutsServiceDeps, ServiceParts } from './wiring.ts'
import { safeError } from '../safe_error.ts'

export type { ChannelAuthorizers, ChannelBroadcaster } from './notifier.ts'
export type { PayoutsServiceDeps, ServiceParts } from './wiring.ts'

/**
 * @internal The parts behind a service (its ledger, inbox, processor, ...): the plugin's own
 * tests and benchmarks reach in here. An app uses the service's methods.
 */
export let partsOf: (service: PayoutsService) => Promise<ServiceParts>

/**
 * The plugin's entry point inside an AdonisJS app: a configured client, the ledger,
 * the webhook route and its inbox. Resolved as `payouts.manager` or injected by class.
 * A thin adapter: the parts are wired once on the connection in use (`wiring.ts`), what the
 * app hears is `notifier.ts`; docs/architecture.md follows an event through them.
 */
export class PayoutsService {
  readonly config: PayoutsConfig
  #deps: PayoutsServiceDeps
  /** The configured service; `#connection` is it unless `fake()` put its emulator there. */
  #live: LiveConnection
  #connection: PayoutsConnection
  #parts?: Promise<ServiceParts>
  #notifier: PayoutsNotifier
  #background: BackgroundWork
  #channels: TransmitChannels

  constructor(config: PayoutsConfig, deps: PayoutsServiceDeps) {
    this.config = config
    this.#deps = deps
    this.#live = new LiveConnection(config, deps.logger, deps.createClient)
    this.#connection = this.#live
    this.#notifier = new PayoutsNotifier({ config, logger: deps.logger, emitter: deps.emitter })
    this.#channels = new TransmitChannels({ config, notifier: this.#notifier, ...deps })
    this.#background = new BackgroundWork({
      config,
      logger: deps.logger,
      parts: () => this.#partsOf(),
      host: { lockManager: deps.lockManager, redisConnection: deps.redisConnection },
      jobs: {
        reconcile: () => this.reconcile(),
        escrow: () => this.escrow.confirmDue(),
        recover: () => this.recover(),
        prune: () => this.prune(),
      },
      catchUp: () => this.reconcile({ staleAfterMs: 0 }),
    })
  }

  /** The framework-free API client, created on first use (the fake's while faked). */
  get client(): PayoutsClient {
    return this.#connection.client
  }

  /**
   * Swaps the service's client for an in-process emulator bound to this app until
   * `restore()`, the way `mail.fake()` swaps the mailer: no network, no port. Its webhooks
   * are signed and posted into this app's own route, so the receiver, the inbox, the
   * ledger, the app's listeners and its Transmit channels run as in production. The handle
   * it returns controls lifecycles, faults and time, and asserts what reached the service.
   * Faking again restores first. See docs/testing.md.
   */
  async fake(options: PayoutsFakeOptions = {}): Promise<PayoutsFake> {
    await this.restore()
    const { PayoutsFake } = await import('../testing/payouts_fake.ts')
    const fake = await PayoutsFake.start(
      {
        config: this.config,
        httpServer: this.#deps.httpServer,
        // Without a ledger there is no inbox: the deliveries were answered, nothing to process.
        drainInbox: () => (this.#ledgerEnabled() ? this.drainInbox() : Promise.resolve(0)),
        // The deliveries answered: their payouts:webhook_received listeners done.
        deliveriesTold: async () => {
          if (!this.#ledgerEnabled()) return
          const { receiver } = await this.#partsOf()
          await receiver.told()
        },
        // `await using`: restores this service (every account, on the manager) unless
        // another fake replaced this one since.
        restore: async (connection) => {
          if (this.#connection === connection) await this.restore()
        },
      },
      options
    )
    await this.#use(fake.connection)
    return fake
  }

  /** Puts the real client back after `fake()` and stops the fake (a no-op when not faked). */
  async restore() {
    const fake = this.#connection
    if (fake === this.#live) return
    await this.#use(this.#live)
    await fake.close()
  }

  /**
   * Switches the connection the service talks to. The parts built on the former one (they
   * hold its client) are dropped once their processing is idle; the next call builds them
   * again on this one.
   */
  async #use(connection: PayoutsConnection) {
    const parts = await this.#parts?.catch(() => null)
    await parts?.processor.idle()
    await parts?.release()
    this.#parts = undefined
    this.#connection = connection
  }

  static {
    partsOf = (service) => service.#partsOf()
  }

  /** The parts behind the service, built once on first use (wiring and Lucid loaded lazily). */
  #partsOf(): Promise<ServiceParts> {
    const { database } = this.#deps
    if (!this.config.ledger.enabled || !database) {
      return Promise.reject(new E_PAYOUTS_FEATURE_DISABLED(['ledger']))
    }
    if (!this.#parts) {
      const connection = this.#connection
      const building = import('./wiring.ts').then(({ buildParts }) =>
        buildParts({
          config: this.config,
          deps: { ...this.#deps, database },
          connection,
          notifier: this.#notifier,
        })
      )
      // A build that failed (a database that did not answer its account check) is not kept:
      // the next call builds again, so a transient fault never disables the service.
      building.catch(() => {
        if (this.#parts === building) this.#parts = undefined
      })
      this.#parts = building
    }
    return this.#parts
  }

  /**
   * Authorizes the payout channels on Transmit and starts re-broadcasting every applied
   * change there. Without a callback for a channel, nobody may listen to it. With the relay
   * on (`transmit.relay`), the changes go out from each web process's relay, not from the
   * process that applied them; in a web process the relay takes its cursor at once, so what
   * commits from here on goes out (the server listens before the app is ready).
   */
  registerChannels(transmit: ChannelBroadcaster, authorizers: ChannelAuthorizers = {}) {
    this.#channels.register(transmit, authorizers)
  }

  /**
   * Marks this process as one serving Transmit's subscribers (the provider calls it in a
   * web process): with the relay on, it follows the ledger and broadcasts every change here,
   * from now, once the channels are registered.
   */
  async relayBroadcasts() {
    await this.#channels.serveSubscribers()
  }

  /**
   * Executes a payout through the ledger: intent first (crash-safe), then the API call,
   * then the local row. `ownerId` ties it to a user or tenant of the host app. Give the
   * request's own `idempotencyKey` (an `Idempotency-Key` header, `payout-order-<id>`) so that a
   * retried request answers the same payout instead of sending a second one.
   */
  async execute(
    input: ExecuteInput,
    options: { ownerId?: string | null; idempotencyKey?: string } = {}
  ) {
    const { executor } = await this.#partsOf()
    debug('execute sending (owner %s)', options.ownerId ?? 'none')
    const executed = await executor.execute(input, options)
    debug('execute stored: payout %s is %s', executed.payout.payoutUuid, executed.payout.status)
    return executed
  }

  /**
   * Executes many payouts as one batch through the ledger, none ever twice: chunks of at most
   * 100 rows, each one execute-batch request under a key derived from the batch's
   * (`idempotencyKey`, yours: `payroll-2026-05`), every chunk's intent committed before the
   * first request. The same key and rows again send only what was not sent; other rows under
   * the key are refused. Every row comes back with its outcome (`created` with its payout,
   * `refused` with the service's code, ...); each payout made fires `payouts:created`.
   * See docs/mass-payouts.md.
   */
  async executeBatch(rows: ExecuteInput[], options: BatchOptions = {}): Promise<ExecutedBatch> {
    const { executor } = await this.#partsOf()
    debug('execute batch sending: %d rows (owner %s)', rows?.length, options.ownerId ?? 'none')
    const batch = await executor.executeBatch(rows, options)
    debug('execute batch answered: %o', batch.counts)
    return batch
  }

  /**
   * A batch as the ledger holds it, by the key it was executed with: every row's outcome and
   * the payouts made (null when the ledger holds no chunk of it). Sends nothing.
   */
  async findBatch(idempotencyKey: string): Promise<ExecutedBatch | null> {
    const { executor } = await this.#partsOf()
    return executor.findBatch(idempotencyKey)
  }

  /** Recipients through the API, mirrored in the host app's table. */
  readonly recipients = {
    create: (...args: Parameters<RecipientsMirror['create']>) =>
      this.#partsOf().then(({ recipients }) => recipients.create(...args)),
    /**
     * Many at once through `POST /recipients/bulk` (100 to a request, each under
     * `<idempotencyKey>-c<n>`), each mirrored as `create` mirrors one; in the order given.
     */
    createMany: (...args: Parameters<RecipientsMirror['createMany']>) =>
      this.#partsOf().then(({ recipients }) => recipients.createMany(...args)),
    update: (...args: Parameters<RecipientsMirror['update']>) =>
      this.#partsOf().then(({ recipients }) => recipients.update(...args)),
    delete: (...args: Parameters<RecipientsMirror['delete']>) =>
      this.#partsOf().then(({ recipients }) => recipients.delete(...args)),
    sync: (...args: Parameters<RecipientsMirror['sync']>) =>
      this.#partsOf().then(({ recipients }) => recipients.sync(...args)),
  }

  /** Re-sends unknown execution intents with their original key (see PayoutExecutor). */
  async recover(options?: { olderThanMs?: number; limit?: number }) {
    const { executor } = await this.#partsOf()
    return this.#background.recorded('job:recover', executor.recover(options))
  }

  /**
   * Fires the app events of changes that a process killed between COMMIT and its events
   * left un-notified, under their original eventKey. The inbox worker runs it on its
   * interval; call it from your own worker when `webhook.retryIntervalMs` is 0.
   */
  async renotify(options?: { olderThanMs?: number; limit?: number }) {
    const { ledger } = await this.#partsOf()
    return ledger.renotify(options)
  }

  /**
   * Secrets the webhook route accepts now: the configured current one, the configured
   * previous one until its `previousSecretValidUntil`, and the current secret of each
   * subscription stored by payouts:webhooks:create / rotate-secret (never a rotated-out one).
   * `maxAgeMs`: the stored ones are read again unless read within this time.
   */
  async webhookSecrets(now = Date.now(), options: { maxAgeMs?: number } = {}): Promise<string[]> {
    if (this.#ledgerEnabled()) {
      const { acceptedSecrets } = await this.#partsOf()
      return acceptedSecrets.list(now, options)
    }
    const { AcceptedSecrets } = await import('../webhooks/accepted_secrets.ts')
    return new AcceptedSecrets(this.config.webhook, this.#connection.webhookSecrets, null).list(now)
  }

  #ledgerEnabled(): boolean {
    return this.config.ledger.enabled && Boolean(this.#deps.database)
  }

  /**
   * Webhook subscriptions whose secrets this app keeps (encrypted with APP_KEY). A secret
   * rotated out or deleted here is refused at once by this instance, and by the others
   * within the secret cache's lifetime (30 s).
   */
  readonly webhooks = webhookSubscriptions(
    () => this.client,
    () => this.#secretStore()
  )

  async #secretStore(): Promise<SecretStore> {
    const { secrets } = await this.#partsOf()
    if (!secrets) throw new E_PAYOUTS_FEATURE_DISABLED(['encryption (APP_KEY)'])
    return secrets
  }

  /**
   * Adds `POST <webhook.path>` to the host app (like `transmit.registerRoutes()`), named
   * `payouts.webhook` (or `as`). The provider makes the bodyparser skip it, so the signature
   * is checked over raw bytes.
   */
  async registerRoutes(router: HttpRouterService, options: { as?: string } = {}) {
    return router
      .post(this.config.webhook.path, (ctx) => this.#receive(ctx))
      .as(options.as ?? 'payouts.webhook')
  }

  /** One delivery, through the receiver built with the parts (503 when they cannot be). */
  async #receive(ctx: HttpContext) {
    let parts: ServiceParts
    try {
      parts = await this.#partsOf()
    } catch (error) {
      this.#deps.logger.error({ err: safeError(error) }, 'payouts webhook not stored')
      return ctx.response.status(503).send({ error: 'temporarily unavailable' })
    }
    return parts.receiver.handle(ctx)
  }

  /**
   * Listens to `payouts:webhook_received` for one delivery type, mapped or not, of this
   * service's account (the manager's: the default one's), its `data` typed by
   * `PayoutsWebhookTypes`. Answers the function that stops listening (README, Events).
   */
  onWebhook<Type extends WebhookType>(
    type: Type,
    handler: (event: WithEventKey<WebhookReceivedEvent<Type>>) => void | Promise<void>
  ): () => void {
    return this.#notifier.onWebhook(type, handler)
  }

  /** Reads quiet non-terminal payouts and applies what the service says (source `poll`). */
  async reconcile(options?: { staleAfterMs?: number }) {
    const { reconciler } = await this.#partsOf()
    return this.#background.recorded('job:reconcile', reconciler.run(options))
  }

  /** The escrow fallback: record the deposit you sent; the job confirms only when allowed. */
  readonly escrow = {
    recordDeposit: (...args: Parameters<EscrowDeposits['record']>) =>
      this.#partsOf().then(({ escrowDeposits }) => escrowDeposits.record(...args)),
    /** Runs the fallback once, now. */
    confirmDue: () =>
      this.#partsOf().then(({ escrow }) => this.#background.recorded('job:escrow', escrow.run())),
  }

  /**
   * Starts the jobs (reconcile, escrow fallback, recovery) on intervals, each guarded by
   * a lock (the app's `@adonisjs/lock` store, Redis with `jobs.redis`, or the app's
   * database) so it runs once per interval across all instances.
   */
  async startJobs() {
    return this.#background.startJobs()
  }

  /** The WebSocket URL: configured, or ws(s)://<host of baseUrl>/ws. */
  websocketUrl(): string {
    if (this.config.events.websocketUrl) return this.config.events.websocketUrl
    const base = new URL(this.config.baseUrl)
    return `${base.protocol === 'https:' ? 'wss:' : 'ws:'}//${base.host}/ws`
  }

  /**
   * Connects the WebSocket source: its events go into the same inbox as webhooks (keyed
   * by a hash of the message), and after every reconnect a catch-up reconciliation reads
   * the payouts that may have changed while the socket was down. `onStored` replaces the
   * processing kick after each stored message (the worker wakes its own loop).
   */
  async startStream(options: { onStored?: () => void } = {}) {
    return this.#background.startStream(this.websocketUrl(), options.onStored)
  }

  /** Requeues stored deliveries and processes them now (see `payouts:replay`). */
  async replayInbox(filter: ReplayFilter) {
    const { inbox } = await this.#partsOf()
    const { replayDeliveries } = await import('./inbox_view.ts')
    return replayDeliveries(inbox, () => this.drainInbox(), filter)
  }

  /**
   * The health report (ledger counts and ages, service reachability) that `payouts:status`
   * prints and `PayoutsCheck` gives AdonisJS health checks.
   */
  async health() {
    const { readHealth } = await import('../health/report.ts')
    const ledger = this.#ledgerEnabled() ? await this.#partsOf() : null
    return readHealth({
      config: this.config,
      environment: this.client.environment,
      db: ledger?.db ?? null,
      reachability: await this.#connection.reachability(),
      watchingSince: this.#background.startedAt,
    })
  }

  /**
   * Removes processed inbox rows and finished execution intents past their retention, in
   * bounded batches (`payouts:prune`, the worker's prune job); with `dryRun` only counts
   * them. Dead letters only with `deadLetters`; the ledger never.
   */
  async prune(options: { dryRun?: boolean; deadLetters?: boolean } = {}) {
    const { db } = await this.#partsOf()
    const { createPruner } = await import('../ledger/pruning.ts')
    const pruning = createPruner(db, this.config).prune(options)
    return options.dryRun ? pruning : this.#background.recorded('job:prune', pruning)
  }

  /**
   * Processes every due inbox row now, or at most `maxBatches` batches (the worker takes one
   * at a time); returns how many rows were handled.
   */
  async drainInbox(options: { maxBatches?: number } = {}) {
    const { processor } = await this.#partsOf()
    await processor.idle()
    const handled = await processor.drain(options)
    void this.#background.sampleBacklog()
    return handled
  }

  /**
   * Stored webhook and stream deliveries, newest first, by state and/or delivery id (what
   * `payouts:deliveries` lists and `payouts:replay --id` checks).
   */
  async deliveries(filter: { states?: string[]; ids?: string[]; limit?: number } = {}) {
    const { db } = await this.#partsOf()
    const { listInboxDeliveries } = await import('./inbox_view.ts')
    return listInboxDeliveries(db, this.config, filter)
  }

  /**
   * Execution intents as an operator sees them (`payouts:intents`): the open ones (or those
   * in `states`), one settled after a human's check at the service (`sent`: it made the
   * payout; `not-sent`: it did not), or one re-sent with its key inside the service's window.
   */
  readonly intents = {
    list: (options: { states?: IntentState[]; limit?: number } = {}) =>
      this.#intentsDesk().then(({ desk, OPEN_INTENT_STATES }) =>
        desk.list(options.states?.length ? options.states : OPEN_INTENT_STATES, options.limit ?? 50)
      ),
    resolve: (id: number, as: 'sent' | 'not-sent') =>
      this.#intentsDesk().then(({ desk }) => desk.resolve(id, as)),
    retry: (id: number) => this.#intentsDesk().then(({ desk }) => desk.retry(id)),
  }

  async #intentsDesk() {
    const { executor } = await this.#partsOf()
    const { IntentsDesk, OPEN_INTENT_STATES } = await import('./intents_desk.ts')
    return { desk: new IntentsDesk(executor, this.config.ledger.connection), OPEN_INTENT_STATES }
  }

  /**
   * Records that `name` ran now, for health's heartbeats line (the worker's loop beats as
   * `worker`; the jobs beat on their own). Bounded by `health.timeoutMs`; never rejects.
   */
  heartbeat(name: HeartbeatName, options?: { atMostEveryMs?: number }): Promise<void> {
    return this.#background.beat(name, options)
  }

  /**
   * Retries due inbox rows on an interval in this process (rows survive restarts in the
   * database, so a restarted app picks up where the last one stopped).
   */
  startInboxWorker(intervalMs = this.config.webhook.retryIntervalMs) {
    this.#background.startInboxWorker(intervalMs)
  }

  /** What JSON.stringify shows: never the key or a secret. */
  toJSON() {
    return {
      account: this.config.account,
      environment: this.config.environment,
      baseUrl: redactCredentials(this.config.baseUrl),
      faked: this.#connection.faked,
    }
  }

  [inspect.custom]() {
    return `PayoutsService ${inspect(this.toJSON())}`
  }

  /** Closes sockets and timers; called by the provider on shutdown. */
  async close() {
    await this.restore()
    await this.#channels.close()
    await this.#background.stop()
    if (this.#parts) {
      const parts = await this.#parts.catch(() => null)
      await parts?.processor.idle()
      await parts?.release()
    }
    await this.#live.close()
  }
}
