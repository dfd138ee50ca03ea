import { BaseSchema } from '@adonisjs/lucid/schema'
import { createPayoutsTraceContext, dropPayoutsTraceContext } from '@svc/adonis-payouts/migrations'

/**
 * A column of @svc/adonis-payouts added after its leases: the trace context (W3C traceparent)
 * each webhook delivery was received in and each execution intent was made in, so that the
 * processing of a delivery and the recovery of an intent link to the trace that began them.
 * The prefix must match ledger.tablePrefix in config/payouts.ts.
 */
export default class extends BaseSchema {
  async up() {
    createPayoutsTraceContext(this.schema, 'svc_')
  }

  async down() {
    dropPayoutsTraceContext(this.schema, 'svc_')
  }
}