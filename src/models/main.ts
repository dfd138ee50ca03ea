/** The ledger's Lucid models, importable from `@svc/adonis-payouts/models`. */
export { default as EscrowDeposit } from './escrow_deposit.ts'
export { default as ExecutionIntent } from './execution_intent.ts'
export { default as Payout } from './payout.ts'
export { default as PayoutEvent } from './payout_event.ts'
export { default as Recipient } from './recipient.ts'
export { default as WebhookDelivery } from './webhook_delivery.ts'
export { configureModels } from './configure_models.ts'
