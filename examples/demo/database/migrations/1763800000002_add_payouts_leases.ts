import { BaseSchema } from '@adonisjs/lucid/schema'
import { createPayoutsLeases, dropPayoutsLeases } from '@svc/adonis-payouts/migrations'

/**
 * Columns and a table of @svc/adonis-payouts added after its first tables: the origin of
 * each execution intent's key (an app's own key is kept as long as its payout), the lease
 * on each change's notification (one live process fires it), and the heartbeats of the
 * worker and the jobs (health). The prefix must match ledger.tablePrefix in config/payouts.ts.
 */
export default class extends BaseSchema {
  async up() {
    createPayoutsLeases(this.schema, 'svc_')
  }

  async down() {
    dropPayoutsLeases(this.schema, 'svc_')
  }
}