/** `@svc/adonis-payouts/migrations`: the one source of truth of the plugin's tables. */
export { createPayoutsTables, dropPayoutsTables, tableNames } from './schema.ts'
