/** `@svc/adonis-payouts/migrations`: the one source of truth of the plugin's tables. */
export {
  createPayoutsAccounts,
  createPayoutsIndexes,
  createPayoutsLeases,
  createPayoutsTables,
  createPayoutsTraceContext,
  dropPayoutsAccounts,
  dropPayoutsIndexes,
  dropPayoutsLeases,
  dropPayoutsTables,
  dropPayoutsTraceContext,
  payoutsIndexes,
  tableNames,
} from './schema.ts'
