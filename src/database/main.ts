/** `@svc/adonis-payouts/migrations`: the one source of truth of the plugin's tables. */
export {
  createPayoutsAccounts,
  createPayoutsIndexes,
  createPayoutsLeases,
  createPayoutsProviderMetadataAt,
  createPayoutsTables,
  createPayoutsTraceContext,
  dropPayoutsAccounts,
  dropPayoutsIndexes,
  dropPayoutsLeases,
  dropPayoutsProviderMetadataAt,
  dropPayoutsTables,
  dropPayoutsTraceContext,
  payoutsIndexes,
  tableNames,
} from './schema.ts'
