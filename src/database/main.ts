/** `@svc/adonis-payouts/migrations`: the one source of truth of the plugin's tables. */
export {
  createPayoutsAccounts,
  createPayoutsIndexes,
  createPayoutsLeases,
  createPayoutsProviderMetadataAt,
  createPayoutsProviderMetadataDue,
  createPayoutsTables,
  createPayoutsTraceContext,
  dropPayoutsAccounts,
  dropPayoutsIndexes,
  dropPayoutsLeases,
  dropPayoutsProviderMetadataAt,
  dropPayoutsProviderMetadataDue,
  dropPayoutsTables,
  dropPayoutsTraceContext,
  payoutsIndexes,
  tableNames,
} from './schema.ts'
