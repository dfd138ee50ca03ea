import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Logger } from '@adonisjs/core/logger'
import type { EmitterService } from '@adonisjs/core/types'
import type { Database } from '@adonisjs/lucid/database'
import { PayoutsClient } from '../client/main.ts'
import type { PayoutsConfig } from '../define_config.ts'
import { E_PAYOUTS_API_KEY_MISSING } from '../errors.ts'
import type { EscrowFallback } from '../jobs/escrow_fallback.ts'
import type { HostLockServices } from '../jobs/locks.ts'
import type { EscrowDeposits } from '../ledger/escrow_deposits.ts'
import type { Reconciler } from '../jobs/reconciler.ts'
import type { PayoutExecutor } from '../ledger/payout_executor.ts'
import type { PayoutLedger } from '../ledger/payout_ledger.ts'
import type { RecipientsMirror } from '../ledger/recipients_mirror.ts'
import type { InboxProcessor } from '../webhooks/inbox_processor.ts'
import type { InboxStore } from '../webhooks/inbox_store.ts'
import type { SecretCipher, SecretStore } from '../webhooks/secret_store.ts'
import { clientRetries } from './client_retries.ts'
import { relayEnabled, type PayoutsNotifier } from './notifier.ts'

/** What the service needs from the host app; all resolved lazily. */
export interface PayoutsServiceDeps extends HostLockServices {
  logger: Logger
  /**
   * Creates the API client on first use (`createClient` below, given the config): the client,
   * undici and zod load with this module, which the service imports only when it runs.
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

/** The objects behind the service, each built once and sharing one database. */
export interface ServiceParts {
  db: Database
  /** Null without the app's encryption: then no secret can be stored. */
  secrets: SecretStore | null
  reconciler: Reconciler
  /** The escrow fallback job. */
  escrow: EscrowFallback
  /** Escrow deposits: recorded, confirmed on detection, confirmed by the job. */
  escrowDeposits: EscrowDeposits
  ledger: PayoutLedger
  executor: PayoutExecutor
  recipients: RecipientsMirror
  inbox: InboxStore
  processor: InboxProcessor
}

/**
 * The framework-free API client, configured from the plugin's config and logging to the app.
 * Without a key (none issued yet) it throws E_PAYOUTS_API_KEY_MISSING.
 */
export function createClient(config: PayoutsConfig, logger: Logger): PayoutsClient {
  if (!config.apiKey) throw new E_PAYOUTS_API_KEY_MISSING()
  return new PayoutsClient({
    apiKey: config.apiKey,
    baseUrl: config.baseUrl,
    environment: config.environment,
    timeoutMs: config.timeoutMs,
    retry: config.retry,
    rateLimiter: config.clientRateLimiter,
    paths: config.paths,
    allowInsecureLoopbackWebhooks: config.allowInsecureLoopbackWebhooks,
    logger: {
      debug: (obj, msg) => {
        logger.debug(obj, msg)
        if (msg === 'payouts request retry' && clientRetries.hasSubscribers) {
          clientRetries.publish(obj)
        }
      },
      warn: (obj, msg) => logger.warn(obj, msg),
    },
  })
}

/** Everything `buildParts` wires together. */
export interface WiringInput {
  config: PayoutsConfig
  deps: PayoutsServiceDeps & { database: () => Promise<Database> }
  client: PayoutsClient
  notifier: PayoutsNotifier
}

/**
 * Builds the ledger, the executor, the inbox and its processor, the jobs' workers and the
 * secret store, once, on the app's database. Lucid and the models are loaded here, not
 * before, so commands that do not need them start fast.
 */
export async function buildParts({
  config,
  deps,
  client,
  notifier,
}: WiringInput): Promise<ServiceParts> {
  const [
    { configureModels },
    { tableNames },
    { PayoutLedger },
    { PayoutExecutor },
    { RecipientsMirror },
    { InboxStore },
    { SecretStore },
    { Reconciler },
    { EscrowFallback },
    { EscrowDeposits },
    pipeline,
    { CommitNotices, changesChannel, isPostgres },
  ] = await Promise.all([
    import('../models/main.ts'),
    import('../database/schema.ts'),
    import('../ledger/payout_ledger.ts'),
    import('../ledger/payout_executor.ts'),
    import('../ledger/recipients_mirror.ts'),
    import('../webhooks/inbox_store.ts'),
    import('../webhooks/secret_store.ts'),
    import('../jobs/reconciler.ts'),
    import('../jobs/escrow_fallback.ts'),
    import('../ledger/escrow_deposits.ts'),
    import('./pipeline.ts'),
    import('../database/change_notices.ts'),
  ])
  const { logger } = deps
  const { tablePrefix, connection, transactionTimeoutMs } = config.ledger
  const tables = tableNames(tablePrefix)
  configureModels(tablePrefix, connection)
  const db = await deps.database()

  const escrowDeposits = new EscrowDeposits({
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
    db,
    deposits: escrowDeposits,
    connection,
    confirmAfterMinutes: config.jobs.escrowConfirmAfterMinutes,
  })
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
  const hooks = await pipeline.notifyAfterCommit({ notifier, escrowDeposits, logger, notices })
  const ledger = new PayoutLedger(
    db,
    hooks,
    connection,
    transactionTimeoutMs,
    config.events.notifyLeaseMs
  )
  const executor = new PayoutExecutor({ db, ledger, client, connection, transactionTimeoutMs })
  const inbox = new InboxStore(db, tables.webhookDeliveries, connection, {
    insertTimeoutMs: config.webhook.ackTimeoutMs,
    transactionTimeoutMs,
  })
  const processor = pipeline.processStoredEvents({
    inbox,
    ledger,
    logger,
    batchSize: config.webhook.processBatchSize,
    stepTimeoutMs: transactionTimeoutMs,
    leaseMs: config.webhook.processingLeaseMs,
  })
  const recipients = new RecipientsMirror(client, connection)
  const reconciler = new Reconciler({
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
        Math.ceil(config.webhook.ackTimeoutMs / 2)
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
