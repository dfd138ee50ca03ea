/**
 * The way of a payout event through the plugin, from the wire to the browser, in order:
 *
 * 1. receive: the signed route (`webhookRoute`) or the WebSocket (`streamToInbox`) stores
 *    the event's exact bytes in the inbox, and only then acknowledges it;
 * 2. process: the inbox processor (`processStoredEvents`) turns each stored event into an
 *    observation and applies it to the ledger, marking the row in the same transaction;
 * 3. notify: after COMMIT, the ledger's hooks (`notifyAfterCommit`) hand every real change
 *    to the notifier, which fires the app events and the Transmit broadcasts.
 *
 * Execute responses and reads (reconciliation, recovery) join at step 2's ledger.
 */
import { createHash } from 'node:crypto'
import type { Logger } from '@adonisjs/core/logger'
import type { CommitNotices } from '../database/change_notices.ts'
import type { PayoutsConfig } from '../define_config.ts'
import debug from '../debug.ts'
import type { EscrowDeposits } from '../ledger/escrow_deposits.ts'
import type { LedgerHooks, PayoutLedger } from '../ledger/payout_ledger.ts'
import type { PayoutObservation } from '../ledger/vocabulary.ts'
import { parseJsonBytes, type EventEnvelope } from '../schemas/events.ts'
import type { StreamMessageHandler } from '../stream/payouts_stream.ts'
import { observationFromEvent, PermanentEventError } from '../webhooks/event_mapper.ts'
import { InboxProcessor } from '../webhooks/inbox_processor.ts'
import type { InboxRow, InboxStore, InboxVerdict } from '../webhooks/inbox_store.ts'
import { WebhookReceiver } from '../webhooks/webhook_receiver.ts'
import type { PayoutsNotifier } from './notifier.ts'

/** What the webhook route needs: the inbox and processor (built on first delivery) and the secrets. */
export interface WebhookRouteOptions {
  config: PayoutsConfig['webhook']
  logger: Logger
  parts: () => Promise<{
    inbox: Pick<InboxStore, 'insert'>
    processor: Pick<InboxProcessor, 'kick'>
  }>
  /** The secrets the route accepts now (see `PayoutsService.webhookSecrets`). */
  secrets: (options: { maxAgeMs?: number }) => Promise<string[]>
}

/**
 * Step 1, webhooks: verify over the raw bytes, store, acknowledge, then start processing
 * (inline mode; in worker mode `payouts:work` processes).
 */
export function webhookRoute({ config, logger, parts, secrets }: WebhookRouteOptions) {
  return new WebhookReceiver({
    inbox: {
      insert: async (input) => {
        const { inbox } = await parts()
        return inbox.insert(input)
      },
    },
    // A signature no cached secret matches may be signed with a secret another process
    // (payouts:webhooks:rotate-secret, another instance) stored since: read them again,
    // at most once a second, before refusing an authentic delivery.
    secrets: ({ fresh } = {}) => secrets(fresh ? { maxAgeMs: 1000 } : {}),
    toleranceSeconds: config.toleranceSeconds,
    maxBodyBytes: config.maxBodyBytes,
    ackTimeoutMs: config.ackTimeoutMs,
    logger,
    // In worker mode the worker's loop picks the row up; this process only stores it.
    onStored:
      config.processing === 'worker'
        ? undefined
        : () => void parts().then(({ processor }) => processor.kick()),
  })
}

/**
 * Step 1, WebSocket: a message goes into the same inbox as webhooks, keyed by a hash of
 * its bytes (a message seen twice is stored once), then processing starts.
 */
export function streamToInbox(
  inbox: Pick<InboxStore, 'insert'>,
  processor: Pick<InboxProcessor, 'kick'>
): StreamMessageHandler {
  return async (raw) => {
    let type = 'unknown'
    try {
      type = String((parseJsonBytes(raw) as { type?: unknown } | null)?.type ?? 'unknown').slice(
        0,
        100
      )
    } catch {}
    const digest = createHash('sha256').update(raw).digest('hex')
    const outcome = await inbox.insert({
      deliveryId: `ws_${digest}`,
      eventType: type,
      rawBody: raw,
      signatureHeader: null,
      source: 'websocket',
    })
    debug('stream message ws_%s (%s) %s', digest.slice(0, 12), type, outcome)
    processor.kick()
  }
}

/** What a stored delivery says about a payout (or why it says nothing). */
function observe(envelope: EventEnvelope, row: Pick<InboxRow, 'source' | 'deliveryId'>) {
  return observationFromEvent(envelope, row.source as 'webhook', row.deliveryId)
}

/** What processing needs: the inbox, the ledger and the config's batch and time bounds. */
export interface ProcessStoredEventsOptions {
  inbox: InboxStore
  ledger: PayoutLedger
  logger: Logger
  batchSize: number
  /** Bound of each step of the row-by-row path (the ledger's transaction bound). */
  stepTimeoutMs: number
  /** How long a row claimed on the row-by-row path is held (`webhook.processingLeaseMs`). */
  leaseMs?: number
}

/**
 * Step 2: the inbox processor, applying stored events to the ledger. A claimed batch is
 * applied in the claiming transaction, so its rows are marked done in the same COMMIT as
 * the ledger changes they carry; a batch that fails goes row by row under a lease, each row
 * applied in the transaction that marks it.
 */
export function processStoredEvents(options: ProcessStoredEventsOptions): InboxProcessor {
  const { ledger } = options
  return new InboxProcessor({
    store: options.inbox,
    logger: options.logger,
    batchSize: options.batchSize,
    stepTimeoutMs: options.stepTimeoutMs,
    leaseMs: options.leaseMs,
    // In the transaction that marks the row; the hooks run after its COMMIT.
    handler: async (envelope, row, trx) => {
      const mapped = observe(envelope, row)
      if ('skip' in mapped) return mapped.skip
      const batch = await ledger.applyBatchInTransaction(trx, [mapped.observation])
      return { afterCommit: () => ledger.notifyBatch(batch) }
    },
    // The hooks run after the COMMIT.
    batchHandler: async (trx, items) => {
      const verdicts: InboxVerdict[] = []
      const observations: PayoutObservation[] = []
      for (const { envelope, row } of items) {
        let mapped: ReturnType<typeof observe>
        try {
          mapped = observe(envelope, row)
        } catch (error) {
          if (!(error instanceof PermanentEventError)) throw error
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
}

/** What notifying needs: the notifier and the escrow deposits that move with payouts. */
export interface NotifyAfterCommitOptions {
  notifier: PayoutsNotifier
  escrowDeposits: Pick<EscrowDeposits, 'confirmedBy' | 'confirmDetected'>
  logger: Logger
  /** Told of each COMMIT that logged changes (PostgreSQL: a NOTIFY that wakes the relays). */
  notices?: Pick<CommitNotices, 'committed'> | null
}

/**
 * Step 3: the ledger's hooks. After COMMIT, once per batch, the relays are told to read
 * (`notices`), then once per real change the notifier tells it (the deposit it showed
 * first); a deposit the service detected is confirmed inside the change's own transaction,
 * so its event rides on the change's outbox entry.
 */
export async function notifyAfterCommit({
  notifier,
  escrowDeposits,
  logger,
  notices,
}: NotifyAfterCommitOptions): Promise<LedgerHooks> {
  const { toChangedEvent } = await import('../ledger/vocabulary.ts')
  return {
    onChange: async (change) => {
      const event = toChangedEvent(change)
      const deposit = await escrowDeposits.confirmedBy(change).catch((error) => {
        logger.error({ err: error }, 'payouts escrow detection not read')
        return null
      })
      await notifier.changed(change, event, deposit)
    },
    onOwnerAttached: (change) => notifier.ownerAttached(toChangedEvent(change)),
    inTransaction: (trx, changes) => escrowDeposits.confirmDetected(trx, changes),
    onCommitted: notices ? () => notices.committed() : undefined,
  }
}
