/** `@svc/adonis-payouts/migrations`: the one source of truth of the plugin's tables. */
export {
  createPayoutsIndexes,
  createPayoutsTables,
  dropPayoutsIndexes,
  dropPayoutsTables,
  payoutsIndexes,
  tableNames,
} from './schema.ts'
