import { DEFAULT_TABLE_PREFIX } from '../constants.ts'
import { modelsLoaded } from '../database/model_tables.ts'
import { tableNames } from '../database/schema.ts'
import EscrowDeposit from './escrow_deposit.ts'
import ExecutionIntent from './execution_intent.ts'
import Payout from './payout.ts'
import PayoutEvent from './payout_event.ts'
import Recipient from './recipient.ts'
import WebhookDelivery from './webhook_delivery.ts'

/** Points every model at the configured table prefix and connection. */
export function configureModels(prefix = DEFAULT_TABLE_PREFIX, connection?: string) {
  const names = tableNames(prefix)
  Payout.table = names.payouts
  PayoutEvent.table = names.payoutEvents
  Recipient.table = names.recipients
  WebhookDelivery.table = names.webhookDeliveries
  EscrowDeposit.table = names.escrowDeposits
  ExecutionIntent.table = names.executionIntents
  for (const model of [
    Payout,
    PayoutEvent,
    Recipient,
    WebhookDelivery,
    EscrowDeposit,
    ExecutionIntent,
  ]) {
    model.connection = connection
  }
}

// Loaded after the app booted (host code, the service): the app's tables, from its config.
await modelsLoaded(({ tablePrefix, connection }) => configureModels(tablePrefix, connection))
