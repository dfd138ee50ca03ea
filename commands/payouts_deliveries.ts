import { flags } from '@adonisjs/core/ace'
import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { InboxDeliveryView } from '../src/service/inbox_view.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'
import type { DeliveryRow, DeliveryState } from '../src/types/commands.ts'

/** Every `--state` value, each once (a state missing or unknown here does not compile). */
const STATES = Object.keys({
  pending: true,
  processing: true,
  failed: true,
  dead: true,
  processed: true,
} satisfies Record<DeliveryState, true>) as DeliveryState[]

/** Lists this app's stored deliveries (the local inbox) with the ids `payouts:replay --id` takes. */
export default class PayoutsDeliveries extends PayoutsCommand<DeliveryRow[]> {
  static commandName = 'payouts:deliveries'
  static description =
    'List deliveries stored in this app (the local inbox) by state, with ids, event types and last errors'

  static help = [
    'With --json: an array of {"deliveryId","eventType","source","state","attempts","lastError","receivedAt"},',
    'newest first (the DeliveryRow type of @svc/adonis-payouts/types; docs/production.md).',
  ]

  @flags.array({
    description: `States to list: ${STATES.join(', ')} (default: all but processed)`,
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
    const views = await payouts.deliveries({ states, limit: this.limit })
    return views.map(rowOf)
  }

  protected print(rows: DeliveryRow[]) {
    if (rows.length === 0) {
      this.logger.info('No stored delivery in these states')
      return
    }
    const table = this.table()
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

/** A delivery as `--json` prints it: the documented keys (`DeliveryRow`). */
function rowOf(view: InboxDeliveryView): DeliveryRow {
  return {
    deliveryId: view.deliveryId,
    eventType: view.eventType,
    source: view.source as DeliveryRow['source'],
    state: view.state as DeliveryState,
    attempts: view.attempts,
    lastError: view.lastError,
    receivedAt: view.receivedAt,
  }
}
