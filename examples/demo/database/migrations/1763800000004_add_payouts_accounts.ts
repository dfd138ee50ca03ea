import { BaseSchema } from '@adonisjs/lucid/schema'
import { createPayoutsAccounts, dropPayoutsAccounts } from '@svc/adonis-payouts/migrations'

/**
 * Accounts in @svc/adonis-payouts (docs/accounts.md): every ledger row carries its account
 * (main for the rows from before), ids are unique per account, and each account's key
 * environment is recorded. The prefix must match ledger.tablePrefix in config/payouts.ts.
 */
export default class extends BaseSchema {
  async up() {
    createPayoutsAccounts(this.schema, 'svc_')
  }

  async down() {
    dropPayoutsAccounts(this.schema, 'svc_')
  }
}