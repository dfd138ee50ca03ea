import { BaseSchema } from '@adonisjs/lucid/schema'
import {
  createPayoutsProviderMetadataAt,
  dropPayoutsProviderMetadataAt,
} from '@svc/adonis-payouts/migrations'

/**
 * A column of @svc/adonis-payouts added after the accounts: when each payout's routing detail
 * (providerMetadata, kept since the first migration) was observed, so that a read taken earlier
 * never replaces a newer one. The prefix must match ledger.tablePrefix in config/payouts.ts.
 */
export default class extends BaseSchema {
  async up() {
    createPayoutsProviderMetadataAt(this.schema, 'svc_')
  }

  async down() {
    dropPayoutsProviderMetadataAt(this.schema, 'svc_')
  }
}