import { BaseSchema } from '@adonisjs/lucid/schema'
import { createPayoutsIndexes, dropPayoutsIndexes } from '@svc/adonis-payouts/migrations'

/**
 * Indexes of @svc/adonis-payouts that keep its queries fast on a large ledger (the health
 * report, reconciliation, the escrow job, replay by time, pruning). Published apart from
 * the tables, so an app that created them with an earlier version gets them too. The
 * prefix must match ledger.tablePrefix in config/payouts.ts.
 */
export default class extends BaseSchema {
  async up() {
    createPayoutsIndexes(this.schema, 'svc_')
  }

  async down() {
    dropPayoutsIndexes(this.schema, 'svc_')
  }
}