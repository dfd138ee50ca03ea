/** `@svc/adonis-payouts/migrations`: the one source of truth of the plugin's tables. */
export {
  createPayoutsIndexes,
  createPayoutsLeases,
  createPayoutsTables,
  dropPayoutsIndexes,
  dropPayoutsLeases,
  dropPayoutsTables,
  payoutsIndexes,
  tableNames,
} from './schema.ts'
