import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Logger } from '@adonisjs/core/logger'
import type { EmitterService } from '@adonisjs/core/types'
import type { Database } from '@adonisjs/lucid/database'
import type { PayoutsClient } from '../client/main.ts'
import type { PayoutsConfig } from '../define_config.ts'
import type { EscrowFallback } from '../jobs/escrow_fallback.ts'
import type { HostLockServices } from '../jobs/locks.ts'
import type { Reconciler } from '../jobs/reconciler.ts'
import type { EscrowDeposits } from '../ledger/escrow_deposits.ts'
import type { PayoutExecutor } from '../ledger/payout_executor.ts'
import type { PayoutLedger } from '../ledger/payout_ledger.ts'
import type { RecipientsMirror } from '../ledger/recipients_mirror.ts'
import type { AcceptedSecrets } from '../webhooks/accepted_secrets.ts'
import type { InboxProcessor } from '../webhooks/inbox_processor.ts'
import type { InboxStore } from '../webhooks/inbox_store.ts'
import type { SecretCipher, SecretStore } from '../webhooks/secret_store.ts'
import type { WebhookReceiver } from '../webhooks/webhook_receiver.ts'
import type { DeliveryListener } from '../webhooks/webhook_received.ts'
import type { PayoutsConnection } from './connection.ts'
import { relayEnabled, type PayoutsNotifier } from './notifier.ts'

/** What the service needs from the host app; all resolved lazily. */
export interface PayoutsServiceDeps extends HostLockServices {
  logger: Logger
  /**
   * Creates the API client on first use (`createClient` in `connection.ts`, given the
   * config): the client, undici and zod load with that module, which the provider imports
   * only when the service is made.
   */
  createClient: () => PayoutsClient
  emitter?: EmitterService
  /** The app's encryption (APP_KEY), for signing secrets stored by the commands. */
  encryption?: () => Promise<SecretCipher>
  /** The app's Lucid database; required by the ledger and the webhook inbox. */
  database?: () => Promise<Database>
  /** Whether the app's Transmit has a transport (Redis): `transmit.relay: 'auto'` reads it. */
  transmitTransport?: () => boolean
  /** Whether this process serves Transmit's subscribers (a web process): it runs the relay. */
  servesSubscribers?: () => boolean
  /** The app's HTTP server: `payouts.fake()` delivers webhooks through it, in-process. */
  httpServer?: () => Promise<{
    boot(): Promise<void>
    handle(req: IncomingMessage, res: ServerResponse): unknown
  }>
}

/** The objects behind the service, each built once on one connection and one database. */
export interface ServiceParts {
  db: Database
  /** Null without the app's encryption: then no secret can be stored. */
  secrets: SecretStore | null
  /** What the route verifies with: configured, the connection's and stored secrets. */
  acceptedSecrets: AcceptedSecrets
  reconciler: Reconciler
  /** The escrow fallback job. */
  escrow: EscrowFallback
  /** Escrow deposits: recorded by the app, confirmed by the job. */
  escrowDeposits: EscrowDeposits
  ledger: PayoutLedger
  executor: PayoutExecutor
  recipients: RecipientsMirror
  inbox: InboxStore
  processor: InboxProcessor
  /** The signed webhook route: verify, store, acknowledge, kick the processor. */
  receiver: WebhookReceiver
  /** Told of each delivery the route or the stream stored: the notifier. */
  deliveries: DeliveryListener
  /** Stops what the parts run beside the event loop (the SQLite checkpoints); idempotent. */
  release: () => Promise<void>
}

/** Everything `buildParts` wires together. */
export interface WiringInput {
  config: PayoutsConfig
  deps: PayoutsServiceDeps & { database: () => Promise<Database> }
  connection: PayoutsConnection
  notifier: PayoutsNotifier
}

/**
 * Builds the parts once, on the app's database and the connection in use, each given its
 * collaborators: the ledger its listener (the notifier) and its commit notices, the inbox
 * processor the ledger's event applier, the route its inbox, secrets and processor. Lucid
 * and the models are loaded here, not before, so commands that do not need them start fast.
 */
export async function buildParts({
  config,
  deps,
  connection: api,
  notifier,
}: WiringInput): Promise<ServiceParts> {
  const [
    { configureModels },
    { tableNames },
    { PayoutLedger },
    { PayoutExecutor },
    { RecipientsMirror },
    { InboxStore },
    { InboxProcessor },
    { LedgerEventApplier },
    { WebhookReceiver },
    { SecretStore },
    { AcceptedSecrets },
    { Reconciler },
    { EscrowFallback },
    { EscrowDeposits },
    { CommitNotices, changesChannel, isPostgres },
    { isSqlite },
    { cacheSqliteStatements },
  ] = await Promise.all([
    import('../models/main.ts'),
    import('../database/schema.ts'),
    import('../ledger/payout_ledger.ts'),
    import('../ledger/payout_executor.ts'),
    import('../ledger/recipients_mirror.ts'),
    import('../webhooks/inbox_store.ts'),
    import('../webhooks/inbox_processor.ts'),
    import('../webhooks/event_applier.ts'),
    import('../webhooks/webhook_receiver.ts'),
    import('../webhooks/secret_store.ts'),
    import('../webhooks/accepted_secrets.ts'),
    import('../jobs/reconciler.ts'),
    import('../jobs/escrow_fallback.ts'),
    import('../ledger/escrow_deposits.ts'),
    import('../database/change_notices.ts'),
    import('../database/dialects.ts'),
    import('../database/statement_cache.ts'),
  ])
  const { logger } = deps
  const { tablePrefix, connection, transactionTimeoutMs } = config.ledger
  const tables = tableNames(tablePrefix)
  configureModels(tablePrefix, connection)
  const db = await deps.database()
  const client = api.client
  // A key of the other environment, or another account's key, never takes over an
  // account's rows (a fake's emulator is no environment: its rows are a test's).
  if (config.apiKey && !api.faked) {
    const { checkAccountEnvironment } = await import('./account_environment.ts')
    const checked = await checkAccountEnvironment({
      db,
      connection,
      table: tables.accounts,
      account: config.account,
      environment: client.environment,
      apiKey: config.apiKey,
      // Half the route's bound, as the secrets' load: a delivery that builds the parts
      // still gets its 503 in time when the database does not answer.
      timeoutMs: Math.ceil(config.webhook.ackTimeoutMs / 2),
    })
    if (checked.rotated) {
      logger.warn(
        { account: config.account },
        'payouts: the API key of this account changed since it last used the ledger'
      )
    }
  }

  // PostgreSQL, the relay on: each COMMIT of changes wakes the web processes' relays.
  const notices =
    relayEnabled(config, deps.transmitTransport?.() ?? false) &&
    isPostgres(db.connection(connection))
      ? new CommitNotices(
          () => db.connection(connection),
          changesChannel(tablePrefix),
          transactionTimeoutMs
        )
      : null
  const { account } = config
  const ledger = new PayoutLedger(db, notifier, {
    account,
    connection,
    transactionTimeoutMs,
    notifyLeaseMs: config.events.notifyLeaseMs,
    notices,
    logger,
  })
  const executor = new PayoutExecutor({
    account,
    db,
    ledger,
    client,
    connection,
    transactionTimeoutMs,
  })
  const escrowDeposits = new EscrowDeposits({
    account,
    db,
    client,
    connection,
    maxAttempts: config.jobs.escrowMaxAttempts,
    retryBackoffMs: config.jobs.escrowRetryBackoffMs,
    onConfirmed: (event) => notifier.emit('payouts:escrow_confirmed', event),
    onFailed: (event) => {
      logger.error(
        { quoteId: event.quoteId, attempts: event.attempts, code: event.code },
        'payouts escrow confirmation failed'
      )
      return notifier.emit('payouts:escrow_confirmation_failed', event)
    },
  })
  const escrow = new EscrowFallback({
    account,
    db,
    deposits: escrowDeposits,
    connection,
    confirmAfterMinutes: config.jobs.escrowConfirmAfterMinutes,
  })
  const inbox = new InboxStore(db, tables.webhookDeliveries, connection, {
    account,
    insertTimeoutMs: config.webhook.ackTimeoutMs,
    transactionTimeoutMs,
    // The worker writes the same file: the acknowledgement waits for it off the event loop.
    lockWaitOffLoop: config.webhook.processing === 'worker',
  })
  const processor = new InboxProcessor({
    store: inbox,
    applier: new LedgerEventApplier(ledger),
    logger,
    batchSize: config.webhook.processBatchSize,
    // Bound of each step of the row-by-row path (the ledger's transaction bound).
    stepTimeoutMs: transactionTimeoutMs,
    leaseMs: config.webhook.processingLeaseMs,
    // Slices where a transaction holds what the acknowledgements need: SQLite's one
    // connection, and its event loop while a statement runs.
    sliceMs: config.webhook.inlineSliceMs ?? (isSqlite(db.connection(connection)) ? 5 : 0),
  })
  // better-sqlite3: statements kept and run again instead of prepared for every query.
  cacheSqliteStatements(db.connection(connection), config.ledger.sqliteStatementCache)
  // SQLite in WAL mode: the log checkpointed from a thread, never inside a commit here.
  const { checkpointsFor } = await import('../database/sqlite_checkpointer.ts')
  const release = await checkpointsFor(
    db.connection(connection),
    config.ledger.sqliteCheckpointMs,
    (message) => logger.warn({ err: message }, 'payouts: a SQLite checkpoint failed')
  )
  const recipients = new RecipientsMirror(client, connection, { account })
  const reconciler = new Reconciler({
    account,
    db,
    ledger,
    client,
    connection,
    ...config.reconcile,
    stuckAfterMs: config.jobs.stuckAfterMs,
    onStuck: (event) => notifier.emit('payouts:stuck', event),
  })
  const cipher = await deps.encryption?.()
  const secrets = cipher
    ? new SecretStore(
        db,
        tables.webhookSecrets,
        cipher,
        connection,
        undefined,
        // Half the route's bound: a load given up leaves the other half to answer 503,
        // and a delivery arriving after that starts a fresh load.
        Math.ceil(config.webhook.ackTimeoutMs / 2),
        { account }
      )
    : null
  const acceptedSecrets = new AcceptedSecrets(config.webhook, api.webhookSecrets, secrets)
  const receiver = new WebhookReceiver({
    inbox,
    secrets: acceptedSecrets,
    // In worker mode the worker's loop picks the row up; this process only stores it.
    processor: config.webhook.processing === 'worker' ? null : processor,
    // payouts:webhook_received, in this process (the one that stored), in worker mode too.
    deliveries: notifier,
    toleranceSeconds: config.webhook.toleranceSeconds,
    maxBodyBytes: config.webhook.maxBodyBytes,
    ackTimeoutMs: config.webhook.ackTimeoutMs,
    logger,
  })
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
    receiver,
    deliveries: notifier,
    secrets,
    acceptedSecrets,
    release,
  }
}
