import { BaseSchema } from '@adonisjs/lucid/schema'
import { createPayoutsTables, dropPayoutsTables } from '@svc/adonis-payouts/migrations'

/**
 * Tables of @svc/adonis-payouts: payouts, payout_events, recipients, webhook_deliveries
 * (the inbox), escrow_deposits and execution_intents. The prefix must match
 * ledger.tablePrefix in config/payouts.ts.
 */
export default class extends BaseSchema {
  async up() {
    createPayoutsTables(this.schema, 'svc_')
  }

  async down() {
    dropPayoutsTables(this.schema, 'svc_')
  }
}