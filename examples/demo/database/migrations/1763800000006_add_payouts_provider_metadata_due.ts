import { BaseSchema } from '@adonisjs/lucid/schema'
import {
  createPayoutsProviderMetadataDue,
  dropPayoutsProviderMetadataDue,
} from '@svc/adonis-payouts/migrations'

/**
 * A column of @svc/adonis-payouts added after provider_metadata_at: when a payout ended while
 * the routing detail of its end is not read yet, with its index, so that the reconciler reads
 * only the ended payouts still to read. The prefix must match ledger.tablePrefix in
 * config/payouts.ts.
 */
export default class extends BaseSchema {
  async up() {
    createPayoutsProviderMetadataDue(this.schema, 'svc_')
  }

  async down() {
    dropPayoutsProviderMetadataDue(this.schema, 'svc_')
  }
}