import { flags } from '@adonisjs/core/ace'
import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { InboxDeliveryView } from '../src/service/inbox_view.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

const STATES = ['pending', 'processing', 'failed', 'dead', 'processed'] as const

/** Lists this app's stored deliveries (the local inbox) with the ids `payouts:replay --id` takes. */
export default class PayoutsDeliveries extends PayoutsCommand<InboxDeliveryView[]> {
  static commandName = 'payouts:deliveries'
  static description =
    'List deliveries stored in this app (the local inbox) by state, with ids, event types and last errors'

  @flags.array({
    description: 'pending, processing, failed, dead or processed (default: all but processed)',
  })
  declare state?: string[]

  @flags.number({ description: 'At most this many rows, newest first', default: 50 })
  declare limit: number

  protected failure = 'Could not list deliveries'

  protected async accepted() {
    return this.acceptListing(this.state, STATES, this.limit)
  }

  protected async perform(payouts: PayoutsService) {
    const states = this.state?.length ? this.state : STATES.filter((s) => s !== 'processed')
    return payouts.deliveries({ states, limit: this.limit })
  }

  protected print(rows: InboxDeliveryView[]) {
    if (rows.length === 0) {
      this.logger.info('No stored delivery in these states')
      return
    }
    const table = this.ui.table()
    table.head(['Delivery id', 'Event', 'Source', 'State', 'Attempts', 'Received', 'Last error'])
    for (const row of rows) {
      table.row([
        row.deliveryId,
        row.eventType,
        row.source,
        row.state,
        String(row.attempts),
        row.receivedAt,
        row.lastError ?? '',
      ])
    }
    table.render()
  }
}
