/** `@svc/adonis-payouts/migrations`: the one source of truth of the plugin's tables. */
export {
  createPayoutsIndexes,
  createPayoutsLeases,
  createPayoutsTables,
  createPayoutsTraceContext,
  dropPayoutsIndexes,
  dropPayoutsLeases,
  dropPayoutsTables,
  dropPayoutsTraceContext,
  payoutsIndexes,
  tableNames,
} from './schema.ts'
