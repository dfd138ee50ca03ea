import type { Logger } from '@adonisjs/core/logger'
import type { EmitterService, EventsList } from '@adonisjs/core/types'
import type { HttpRouterService } from '@adonisjs/core/types'
import type { Database } from '@adonisjs/lucid/database'
import { PayoutsApiError, PayoutsClient } from '../client/main.ts'
import { isDeadlineError, withDeadline } from '../database/deadline.ts'
import type { ExecuteInput } from '../client/payouts_client.ts'
import type { PayoutsConfig } from '../define_config.ts'
import {
  E_PAYOUTS_FEATURE_DISABLED,
  E_WEBHOOK_ROTATION_UNCONFIRMED,
  E_WEBHOOK_SECRET_NOT_STORED,
  E_WEBHOOK_SUBSCRIPTION_NOT_FOUND,
} from '../errors.ts'
import type { PayoutExecutor } from '../ledger/payout_executor.ts'
import type { PayoutLedger } from '../ledger/payout_ledger.ts'
import type { PayoutChange, PayoutObservation } from '../ledger/vocabulary.ts'
import type { EscrowDeposits } from '../ledger/escrow_deposits.ts'
import type { RecipientsMirror } from '../ledger/recipients_mirror.ts'
import type { Reconciler } from '../jobs/reconciler.ts'
import type { EscrowFallback } from '../jobs/escrow_fallback.ts'
import type { JobLocks } from '../jobs/locks.ts'
import type { JobScheduler } from '../jobs/scheduler.ts'
import type { PayoutsStream } from '../stream/payouts_stream.ts'
import type { InboxProcessor } from '../webhooks/inbox_processor.ts'
import type { InboxStore, InboxVerdict } from '../webhooks/inbox_store.ts'
import type { SecretCipher, SecretStore } from '../webhooks/secret_store.ts'
import type { PayoutChangedEvent } from '../types/events.ts'
import {
  changeEventNames,
  withEventKey,
  type PayoutsEventName,
  type PayoutsEventPayload,
} from './app_events.ts'
import type { EventEnvelope } from '../schemas/events.ts'

/** The part of Transmit the service uses (structural, so Transmit stays optional). */
export interface ChannelBroadcaster<Ctx = any> {
  authorize<Params extends Record<string, string>>(
    channel: string,
    callback: (ctx: Ctx, params: Params) => boolean | Promise<boolean>
  ): void
  broadcast(channel: string, payload?: any): void
}

/** Host-app callbacks deciding who may listen; a missing one denies everybody. */
export interface ChannelAuthorizers<Ctx = any> {
  payout?: (ctx: Ctx, payoutId: string) => boolean | Promise<boolean>
  owner?: (ctx: Ctx, ownerId: string) => boolean | Promise<boolean>
}

/** What the service needs from the host app; all resolved lazily. */
export interface PayoutsServiceDeps {
  logger: Logger
  emitter?: EmitterService
  /** The app's encryption (APP_KEY), for signing secrets stored by the commands. */
  encryption?: () => Promise<SecretCipher>
  /** The app's Lucid database; required by the ledger and the webhook inbox. */
  database?: () => Promise<Database>
}

interface LedgerParts {
  db: Database
  secrets: SecretStore | null
  reconciler: Reconciler
  escrow: EscrowFallback
  escrowDeposits: EscrowDeposits
  ledger: PayoutLedger
  executor: PayoutExecutor
  recipients: RecipientsMirror
  inbox: InboxStore
  processor: InboxProcessor
}

/**
 * The plugin's entry point inside an AdonisJS app: a configured client, the ledger,
 * the webhook route and its inbox. Resolved as `payouts.manager` or injected by class.
 */
export class PayoutsService {
  readonly config: PayoutsConfig
  #deps: PayoutsServiceDeps
  #client?: PayoutsClient
  #parts?: Promise<LedgerParts>
  #inboxTimer?: NodeJS.Timeout
  #transmit?: ChannelBroadcaster
  #stream?: PayoutsStream
  #scheduler?: JobScheduler
  #jobLocks?: JobLocks

  constructor(config: PayoutsConfig, deps: PayoutsServiceDeps) {
    this.config = config
    this.#deps = deps
  }

  /** The framework-free API client, created on first use. */
  get client(): PayoutsClient {
    if (!this.#client) {
      const logger = this.#deps.logger
      this.#client = new PayoutsClient({
        apiKey: this.config.apiKey,
        baseUrl: this.config.baseUrl,
        environment: this.config.environment,
        timeoutMs: this.config.timeoutMs,
        retry: this.config.retry,
        rateLimiter: this.config.clientRateLimiter,
        paths: this.config.paths,
        allowInsecureLoopbackWebhooks: this.config.allowInsecureLoopbackWebhooks,
        logger: {
          debug: (obj, msg) => logger.debug(obj, msg),
          warn: (obj, msg) => logger.warn(obj, msg),
        },
      })
    }
    return this.#client
  }

  /** Ledger, executor and inbox, built once on first use (Lucid loaded lazily). */
  parts(): Promise<LedgerParts> {
    if (!this.config.ledger.enabled || !this.#deps.database) {
      return Promise.reject(new E_PAYOUTS_FEATURE_DISABLED(['ledger']))
    }
    this.#parts ??= this.#buildParts()
    return this.#parts
  }

  async #buildParts(): Promise<LedgerParts> {
    const [
      { configureModels },
      { PayoutLedger },
      { PayoutExecutor },
      { InboxStore },
      { InboxProcessor },
      mapper,
    ] = await Promise.all([
      import('../models/main.ts'),
      import('../ledger/payout_ledger.ts'),
      import('../ledger/payout_executor.ts'),
      import('../webhooks/inbox_store.ts'),
      import('../webhooks/inbox_processor.ts'),
      import('../webhooks/event_mapper.ts'),
    ])
    const { tableNames } = await import('../database/schema.ts')
    const { RecipientsMirror } = await import('../ledger/recipients_mirror.ts')
    const { Reconciler } = await import('../jobs/reconciler.ts')
    const { SecretStore } = await import('../webhooks/secret_store.ts')
    const { EscrowFallback } = await import('../jobs/escrow_fallback.ts')
    const { EscrowDeposits } = await import('../ledger/escrow_deposits.ts')
    const { toChangedEvent } = await import('../ledger/vocabulary.ts')
    const { tablePrefix, connection } = this.config.ledger
    configureModels(tablePrefix, connection)
    const db = await this.#deps.database!()
    const ledger = new PayoutLedger(
      db,
      {
        onChange: (change) => this.#onChange(change, toChangedEvent, escrowDeposits),
        // The owner's listeners missed the payout's changes so far: its current position.
        onOwnerAttached: (change) => this.#broadcast(toChangedEvent(change), { ownerOnly: true }),
        // A deposit the service detected moves with the payout, in the same COMMIT.
        inTransaction: (trx, changes) => escrowDeposits.confirmDetected(trx, changes),
      },
      connection,
      this.config.ledger.transactionTimeoutMs
    )
    const executor = new PayoutExecutor({
      db,
      ledger,
      client: this.client,
      connection,
      transactionTimeoutMs: this.config.ledger.transactionTimeoutMs,
    })
    const inbox = new InboxStore(db, tableNames(tablePrefix).webhookDeliveries, connection, {
      insertTimeoutMs: this.config.webhook.ackTimeoutMs,
      transactionTimeoutMs: this.config.ledger.transactionTimeoutMs,
    })
    // What a stored delivery says about a payout (or why it says nothing).
    const observe = (envelope: EventEnvelope, row: { source: string; deliveryId: string }) =>
      mapper.observationFromEvent(envelope, row.source as 'webhook', row.deliveryId)
    const processor = new InboxProcessor({
      store: inbox,
      logger: this.#deps.logger,
      batchSize: this.config.webhook.processBatchSize,
      stepTimeoutMs: this.config.ledger.transactionTimeoutMs,
      handler: async (envelope, row) => {
        const mapped = observe(envelope, row)
        if ('skip' in mapped) return mapped.skip
        await ledger.apply(mapped.observation)
      },
      // The whole claimed batch in the claiming transaction: its rows are marked done in
      // the same COMMIT as the ledger changes they carry; the hooks run after it.
      batchHandler: async (trx, items) => {
        const verdicts: InboxVerdict[] = []
        const observations: PayoutObservation[] = []
        for (const { envelope, row } of items) {
          let mapped: ReturnType<typeof observe>
          try {
            mapped = observe(envelope, row)
          } catch (error) {
            if (!(error instanceof mapper.PermanentEventError)) throw error
            verdicts.push({ state: 'dead', note: error.message })
            continue
          }
          if ('skip' in mapped) verdicts.push({ state: 'processed', note: mapped.skip })
          else {
            verdicts.push({ state: 'processed', note: null })
            observations.push(mapped.observation)
          }
        }
        const batch = await ledger.applyBatchInTransaction(trx, observations)
        return { verdicts, afterCommit: () => ledger.notifyBatch(batch) }
      },
    })
    const recipients = new RecipientsMirror(this.client, connection)
    const reconciler = new Reconciler({
      db,
      ledger,
      client: this.client,
      connection,
      ...this.config.reconcile,
      stuckAfterMs: this.config.jobs.stuckAfterMs,
      onStuck: (event) => this.#emitSafely('payouts:stuck', event),
    })
    const escrowDeposits = new EscrowDeposits({
      db,
      client: this.client,
      connection,
      maxAttempts: this.config.jobs.escrowMaxAttempts,
      retryBackoffMs: this.config.jobs.escrowRetryBackoffMs,
      onConfirmed: (event) => this.#emitSafely('payouts:escrow_confirmed', event),
      onFailed: (event) => {
        this.#deps.logger.error(
          { quoteId: event.quoteId, attempts: event.attempts, code: event.code },
          'payouts escrow confirmation failed'
        )
        return this.#emitSafely('payouts:escrow_confirmation_failed', event)
      },
    })
    const escrow = new EscrowFallback({
      db,
      deposits: escrowDeposits,
      connection,
      confirmAfterMinutes: this.config.jobs.escrowConfirmAfterMinutes,
    })
    const cipher = await this.#deps.encryption?.()
    const secrets = cipher
      ? new SecretStore(
          db,
          tableNames(tablePrefix).webhookSecrets,
          cipher,
          connection,
          undefined,
          // Half the route's bound: a load given up leaves the other half to answer 503,
          // and a delivery arriving after that starts a fresh load.
          Math.ceil(this.config.webhook.ackTimeoutMs / 2)
        )
      : null
    return {
      db,
      ledger,
      executor,
      recipients,
      reconciler,
      escrow,
      escrowDeposits,
      inbox,
      processor,
      secrets,
    }
  }

  /**
   * One app event, with its key. Its listeners' failure is logged and goes no further: the
   * work it reports is committed (neither undone nor repeated), and the events and broadcasts
   * after it are still attempted. AdonisJS's emitter starts every listener of the event, so a
   * throwing one stops neither the others nor this event's later ones.
   */
  async #emitSafely<Name extends PayoutsEventName>(name: Name, payload: PayoutsEventPayload<Name>) {
    const data = withEventKey(name, payload)
    try {
      const emitting = this.#deps.emitter?.emit(name, data as EventsList[Name])
      if (emitting) {
        await withDeadline(emitting, this.config.events.listenerTimeoutMs, `listeners of ${name}`)
      }
    } catch (error) {
      this.#deps.logger.error(
        { err: error, event: name, eventKey: data.eventKey, timedOut: isDeadlineError(error) },
        'payouts listener failed'
      )
    }
  }

  /** App events and broadcasts, after COMMIT, once per real change; each one attempted. */
  async #onChange(
    change: PayoutChange,
    project: (change: PayoutChange) => PayoutChangedEvent,
    escrow: Pick<EscrowDeposits, 'confirmedBy'>
  ) {
    const event = project(change)
    // The deposit first: the payout moved because the service had it.
    const deposit = await escrow.confirmedBy(change).catch((error) => {
      this.#deps.logger.error({ err: error }, 'payouts escrow detection not read')
      return null
    })
    if (deposit) await this.#emitSafely('payouts:escrow_confirmed', deposit)
    for (const name of changeEventNames(change)) await this.#emitSafely(name, event)
    this.#broadcast(event)
  }

  /**
   * Authorizes the payout channels on Transmit and starts re-broadcasting every applied
   * change there. Without a callback for a channel, nobody may listen to it.
   */
  registerChannels(transmit: ChannelBroadcaster, authorizers: ChannelAuthorizers = {}) {
    const { payoutChannel, ownerChannel } = this.config.transmit
    transmit.authorize<{ payoutId: string }>(payoutChannel, (ctx, params) =>
      authorizers.payout ? authorizers.payout(ctx, params.payoutId) : false
    )
    transmit.authorize<{ ownerId: string }>(ownerChannel, (ctx, params) =>
      authorizers.owner ? authorizers.owner(ctx, params.ownerId) : false
    )
    this.#transmit = transmit
  }

  /** Public fields only, on the payout's channel and its owner's; each channel attempted. */
  #broadcast(event: PayoutChangedEvent, options: { ownerOnly?: boolean } = {}) {
    if (!this.#transmit) return
    const { payoutChannel, ownerChannel } = this.config.transmit
    const payload = JSON.parse(JSON.stringify(event))
    const channels = [
      ...(options.ownerOnly ? [] : [payoutChannel.replace(':payoutId', event.payoutId)]),
      ...(event.ownerId ? [ownerChannel.replace(':ownerId', event.ownerId)] : []),
    ]
    for (const channel of channels) {
      try {
        this.#transmit.broadcast(channel, payload)
      } catch (error) {
        this.#deps.logger.error(
          { err: error, channel, eventId: event.eventId },
          'payouts broadcast failed'
        )
      }
    }
  }

  /**
   * Executes a payout through the ledger: intent first (crash-safe), then the API call,
   * then the local row. `ownerId` ties it to a user or tenant of the host app.
   */
  async execute(input: ExecuteInput, options: { ownerId?: string | null } = {}) {
    const { executor } = await this.parts()
    return executor.execute(input, options)
  }

  /** Recipients through the API, mirrored in the host app's table. */
  readonly recipients = {
    create: async (...args: Parameters<RecipientsMirror['create']>) => {
      const { recipients } = await this.parts()
      return recipients.create(...args)
    },
    update: async (...args: Parameters<RecipientsMirror['update']>) => {
      const { recipients } = await this.parts()
      return recipients.update(...args)
    },
    delete: async (...args: Parameters<RecipientsMirror['delete']>) => {
      const { recipients } = await this.parts()
      return recipients.delete(...args)
    },
    sync: async (...args: Parameters<RecipientsMirror['sync']>) => {
      const { recipients } = await this.parts()
      return recipients.sync(...args)
    },
  }

  /** Re-sends unknown execution intents with their original key (see PayoutExecutor). */
  async recover(options?: { olderThanMs?: number; limit?: number }) {
    const { executor } = await this.parts()
    return executor.recover(options)
  }

  /**
   * Fires the app events of changes that a process killed between COMMIT and its events
   * left un-notified, under their original eventKey. The inbox worker runs it on its
   * interval; call it from your own worker when `webhook.retryIntervalMs` is 0.
   */
  async renotify(options?: { olderThanMs?: number; limit?: number }) {
    const { ledger } = await this.parts()
    return ledger.renotify(options)
  }

  /**
   * Secrets the webhook route accepts now: the configured current one, the configured
   * previous one until its `previousSecretValidUntil`, and the current secret of each
   * subscription stored by payouts:webhooks:create / rotate-secret (never a rotated-out one).
   */
  async webhookSecrets(
    now = Date.now(),
    options: {
      /** Reads the stored secrets again unless read within this time (see the route). */
      maxAgeMs?: number
    } = {}
  ): Promise<string[]> {
    const { secret, previousSecret, previousSecretValidUntil } = this.config.webhook
    const secrets = secret ? [secret] : []
    if (previousSecret && previousSecretValidUntil && Date.parse(previousSecretValidUntil) > now) {
      secrets.push(previousSecret)
    }
    if (this.config.ledger.enabled && this.#deps.database) {
      const { secrets: store } = await this.parts()
      if (store) secrets.push(...(await store.activeSecrets(options)))
    }
    return secrets
  }

  /**
   * Webhook subscriptions whose secrets this app keeps (encrypted with APP_KEY). A secret
   * rotated out or deleted here is refused at once by this instance, and by the others
   * within the secret cache's lifetime (30 s).
   */
  readonly webhooks = {
    create: async (input: {
      url: string
      events?: Array<'payout.created' | 'payout.status.updated'>
      label?: string
    }) => {
      const store = await this.#secretStore()
      const created = await this.client.webhooks.subscriptions.create({
        url: input.url,
        events: input.events ?? ['payout.created', 'payout.status.updated'],
        label: input.label,
      })
      await store.save({ subscriptionId: created.id, url: created.url, secret: created.secret! })
      // The secret is returned once by the service and kept only encrypted.
      return { ...created, secret: undefined }
    },
    list: async () => {
      const store = await this.#secretStore()
      const [remote, local] = await Promise.all([
        this.client.webhooks.subscriptions.list(),
        store.list(),
      ])
      const kept = new Set(local.map((s) => s.subscriptionId))
      return remote.map((s) => ({ ...s, secretStored: kept.has(s.id) }))
    },
    /**
     * Rotates at the service, then stores the new secret in place of the old one, which
     * the service stopped signing with: no overlap. A subscription whose secret is not
     * stored here is refused before the service is asked (`E_WEBHOOK_SECRET_NOT_STORED`).
     */
    rotateSecret: async (subscriptionId: string) => {
      const store = await this.#secretStore()
      if (!(await store.has(subscriptionId))) {
        throw new E_WEBHOOK_SECRET_NOT_STORED([subscriptionId])
      }
      let rotated: Awaited<ReturnType<PayoutsClient['webhooks']['subscriptions']['rotateSecret']>>
      try {
        rotated = await this.client.webhooks.subscriptions.rotateSecret(subscriptionId)
      } catch (error) {
        // A refusal changed nothing; a lost answer may have rotated the secret there.
        if (!(error instanceof PayoutsApiError && error.outcomeUnknown)) throw error
        throw new E_WEBHOOK_ROTATION_UNCONFIRMED([subscriptionId], { cause: error })
      }
      try {
        await store.rotate(subscriptionId, rotated.secret)
      } catch (error) {
        throw new E_WEBHOOK_ROTATION_UNCONFIRMED([subscriptionId], { cause: error })
      }
      return { id: rotated.id }
    },
    /**
     * Deletes at the service, then the stored secrets. A 404 from the service (already
     * gone) still deletes here (`deletedAtService: false`); an id neither side knows is
     * `E_WEBHOOK_SUBSCRIPTION_NOT_FOUND`; any other refusal deletes nothing.
     */
    delete: async (subscriptionId: string) => {
      const store = await this.#secretStore()
      let deletedAtService = true
      try {
        await this.client.webhooks.subscriptions.delete(subscriptionId)
      } catch (error) {
        if (!(error instanceof PayoutsApiError && error.status === 404)) throw error
        deletedAtService = false
      }
      const removedLocally = await store.delete(subscriptionId)
      if (!deletedAtService && !removedLocally) {
        throw new E_WEBHOOK_SUBSCRIPTION_NOT_FOUND([subscriptionId])
      }
      return { id: subscriptionId, deletedAtService, removedLocally }
    },
    /** Asks the service to deliver a delivery again (new Svc-Delivery-Id). */
    replayDelivery: (deliveryId: string) => this.client.webhooks.deliveries.replay(deliveryId),
  }

  async #secretStore(): Promise<SecretStore> {
    const { secrets } = await this.parts()
    if (!secrets) throw new E_PAYOUTS_FEATURE_DISABLED(['encryption (APP_KEY)'])
    return secrets
  }

  /**
   * Adds `POST <webhook.path>` to the host app (like `transmit.registerRoutes()`). The
   * provider makes the bodyparser skip it, so the signature is checked over raw bytes.
   */
  async registerRoutes(router: HttpRouterService) {
    const { WebhookReceiver } = await import('../webhooks/webhook_receiver.ts')
    const receiver = new WebhookReceiver({
      inbox: {
        insert: async (input) => {
          const { inbox } = await this.parts()
          return inbox.insert(input)
        },
      },
      // A signature no cached secret matches may be signed with a secret another process
      // (payouts:webhooks:rotate-secret, another instance) stored since: read them again,
      // at most once a second, before refusing an authentic delivery.
      secrets: ({ fresh } = {}) => this.webhookSecrets(Date.now(), fresh ? { maxAgeMs: 1000 } : {}),
      toleranceSeconds: this.config.webhook.toleranceSeconds,
      maxBodyBytes: this.config.webhook.maxBodyBytes,
      ackTimeoutMs: this.config.webhook.ackTimeoutMs,
      logger: this.#deps.logger,
      onStored: () => void this.parts().then(({ processor }) => processor.kick()),
    })
    return router
      .post(this.config.webhook.path, (ctx) => receiver.handle(ctx))
      .as('payouts.webhook')
  }

  /** Reads quiet non-terminal payouts and applies what the service says (source `poll`). */
  async reconcile(options?: { staleAfterMs?: number }) {
    const { reconciler } = await this.parts()
    return reconciler.run(options)
  }

  /** The escrow fallback: record the deposit you sent; the job confirms only when allowed. */
  readonly escrow = {
    recordDeposit: async (...args: Parameters<EscrowDeposits['record']>) => {
      const { escrowDeposits } = await this.parts()
      return escrowDeposits.record(...args)
    },
    /** Runs the fallback once, now. */
    confirmDue: async () => {
      const { escrow } = await this.parts()
      return escrow.run()
    },
  }

  /**
   * Starts the jobs (reconcile, escrow fallback, recovery) on intervals, each guarded by
   * a lock (in the app's database, or in Redis with `jobs.redis`) so it runs once per
   * interval across all instances.
   */
  async startJobs() {
    if (this.#scheduler) return this.#scheduler
    const { db } = await this.parts()
    const { createJobLocks } = await import('../jobs/locks.ts')
    const { JobScheduler } = await import('../jobs/scheduler.ts')
    const { tableNames } = await import('../database/schema.ts')
    const { connection, tablePrefix } = this.config.ledger
    const { jobs } = this.config
    const locks = await createJobLocks({
      redis: jobs.redis,
      db,
      connection,
      tableName: tableNames(tablePrefix).locks,
      logger: this.#deps.logger,
    })
    this.#jobLocks = locks
    this.#scheduler = new JobScheduler({
      locks: locks.locks,
      logger: this.#deps.logger,
      runTimeoutMs: jobs.runTimeoutMs,
      jobs: [
        { name: 'reconcile', intervalMs: jobs.reconcileEveryMs, run: () => this.reconcile() },
        { name: 'escrow', intervalMs: jobs.escrowEveryMs, run: () => this.escrow.confirmDue() },
        { name: 'recover', intervalMs: jobs.recoverEveryMs, run: () => this.recover() },
      ],
    })
    this.#scheduler.start()
    this.#deps.logger.info(
      {
        locks: locks.store,
        intervals: {
          reconcile: jobs.reconcileEveryMs,
          escrow: jobs.escrowEveryMs,
          recover: jobs.recoverEveryMs,
        },
      },
      'payouts jobs started'
    )
    return this.#scheduler
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
   * the payouts that may have changed while the socket was down.
   */
  async startStream() {
    if (this.#stream) return this.#stream
    const { PayoutsStream } = await import('../stream/payouts_stream.ts')
    const { createHash } = await import('node:crypto')
    const { parseJsonBytes } = await import('../schemas/events.ts')
    const { inbox, processor } = await this.parts()
    const logger = this.#deps.logger
    this.#stream = new PayoutsStream({
      url: this.websocketUrl(),
      apiKey: this.config.apiKey,
      backoff: {
        baseMs: this.config.events.reconnectBaseMs,
        maxMs: this.config.events.reconnectMaxMs,
      },
      logger: {
        info: (obj, msg) => logger.info(obj, msg),
        warn: (obj, msg) => logger.warn(obj, msg),
      },
      onMessage: async (raw) => {
        let type = 'unknown'
        try {
          type = String(
            (parseJsonBytes(raw) as { type?: unknown } | null)?.type ?? 'unknown'
          ).slice(0, 100)
        } catch {}
        const digest = createHash('sha256').update(raw).digest('hex')
        await inbox.insert({
          deliveryId: `ws_${digest}`,
          eventType: type,
          rawBody: raw,
          signatureHeader: null,
          source: 'websocket',
        })
        processor.kick()
      },
      onReconnect: async () => {
        await this.reconcile({ staleAfterMs: 0 })
      },
    })
    this.#stream.start()
    return this.#stream
  }

  /** Requeues stored deliveries and processes them now (see `payouts:replay`). */
  async replayInbox(filter: {
    ids?: string[]
    state?: 'failed' | 'dead' | 'processed' | 'pending'
    since?: string
    until?: string
    force?: boolean
  }) {
    const { inbox } = await this.parts()
    const ids = await inbox.requeue({
      ...filter,
      since: filter.since ? new Date(filter.since) : undefined,
      until: filter.until ? new Date(filter.until) : undefined,
    })
    const processed = await this.drainInbox()
    const states = await inbox.statesOf(ids)
    return {
      requeued: ids.length,
      processed,
      failing: states.filter((state) => state === 'failed' || state === 'dead').length,
    }
  }

  /** Counts an operator needs: see `payouts:status`. */
  async health() {
    const { db } = await this.parts()
    const { tableNames } = await import('../database/schema.ts')
    const { dbDate } = await import('../database/dates.ts')
    const t = tableNames(this.config.ledger.tablePrefix)
    const client = db.connection(this.config.ledger.connection)
    const count = async (table: string, where: (q: any) => void) => {
      const query = client.from(table)
      where(query)
      const row = await query.count('* as total').first()
      return Number(row?.total ?? 0)
    }
    const last = await client.from(t.webhookDeliveries).max('received_at as at').first()
    const stuckBefore = dbDate(client, new Date(Date.now() - this.config.jobs.stuckAfterMs))
    return {
      environment: this.client.environment,
      eventSources: this.config.events.sources,
      lastEventReceivedAt: last?.at ? new Date(last.at).toISOString() : null,
      inboxBacklog: await count(t.webhookDeliveries, (q) =>
        q.whereIn('state', ['pending', 'processing', 'failed'])
      ),
      deadLetters: await count(t.webhookDeliveries, (q) => q.where('state', 'dead')),
      unknownIntents: await count(t.executionIntents, (q) =>
        q.whereIn('state', ['unknown', 'needs_attention'])
      ),
      escrowFailed: await count(t.escrowDeposits, (q) => q.where('state', 'confirm_failed')),
      stuckPayouts: await count(t.payouts, (q) =>
        q.whereIn('status', ['pending', 'processing']).where('created_at', '<', stuckBefore)
      ),
    }
  }

  /** Processes every due inbox row now (tests, commands, the retry timer). */
  async drainInbox() {
    const { processor } = await this.parts()
    await processor.idle()
    return processor.drain()
  }

  /**
   * Retries due inbox rows on an interval in this process (rows survive restarts in the
   * database, so a restarted app picks up where the last one stopped).
   */
  startInboxWorker(intervalMs = this.config.webhook.retryIntervalMs) {
    if (intervalMs <= 0 || this.#inboxTimer) return
    this.#inboxTimer = setInterval(() => {
      this.parts()
        .then(({ processor, ledger }) => {
          processor.kick()
          // The outbox: events a killed process committed but never fired.
          return ledger.renotify()
        })
        .catch((error) => this.#deps.logger.error({ err: error }, 'payouts inbox worker failed'))
    }, intervalMs)
    this.#inboxTimer.unref()
  }

  /** Closes sockets and timers; called by the provider on shutdown. */
  async close() {
    await this.#scheduler?.stop()
    this.#scheduler = undefined
    await this.#jobLocks?.close()
    this.#jobLocks = undefined
    await this.#stream?.stop()
    this.#stream = undefined
    clearInterval(this.#inboxTimer)
    this.#inboxTimer = undefined
    if (this.#parts) {
      const parts = await this.#parts.catch(() => null)
      await parts?.processor.idle()
    }
    await this.#client?.close()
    this.#client = undefined
  }
}
