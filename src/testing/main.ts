/**
 * `@svc/adonis-payouts/testing`: test a host app against the plugin the AdonisJS way,
 * like `mail.fake()` and `emitter.fake()`. See docs/testing.md.
 */
export {
  PayoutsFake,
  type PayoutsFakeOptions,
  type PayoutRef,
  type ExecutedPayout,
  type CreatedRecipient,
  type Match,
  type SentBatch,
} from './payouts_fake.ts'
export { payoutsTesting, type PayoutsTestingOptions } from './plugin.ts'
export { clearPayoutsTables } from './tables.ts'
export {
  PayoutFactory,
  PayoutEventFactory,
  RecipientFactory,
  WebhookDeliveryFactory,
  payoutPath,
  type FactoryPosition,
} from './factories.ts'
