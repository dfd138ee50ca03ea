/** Public types of the plugin, importable from `@svc/adonis-payouts/types`. */
export type { PayoutsConfig, PayoutsConfigInput } from '../define_config.ts'
export type * from '../schemas/resources.ts'
export type {
  ExecuteBody,
  FiatToFiatExecuteBody,
  StablecoinToFiatExecuteBody,
  OnrampExecuteBody,
  ConfirmEscrowDepositBody,
  RecipientCreateBody,
  RecipientUpdateBody,
  WebhookSubscriptionCreateBody,
  WebhookSubscriptionUpdateBody,
} from '../schemas/requests.ts'
export type { PayoutStatus, PayoutStep, ExecuteFlow, WebhookEventType } from '../schemas/common.ts'
export type {
  PayoutChangedEvent,
  EscrowEvent,
  PayoutStuckEvent,
  WithEventKey,
  PayoutsEventsList,
  ObservationSource,
  DeliverySource,
  PayoutsWebhookTypes,
  WebhookType,
  WebhookData,
  WebhookReceivedEvent,
} from './events.ts'
export type {
  BatchOptions,
  BatchOutcomeName,
  BatchProgress,
  BatchRowOutcome,
  ExecutedBatch,
} from '../ledger/payout_batches.ts'
export type * from './commands.ts'
