import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['webhooks']['list']>>

/** Lists the account's webhook subscriptions and which ones this app keeps secrets for. */
export default class PayoutsWebhooksList extends PayoutsCommand<Result> {
  static commandName = 'payouts:webhooks:list'
  static description = 'List webhook subscriptions'

  protected failure = 'Could not list subscriptions'

  protected perform(payouts: PayoutsService) {
    return payouts.webhooks.list()
  }

  protected print(subscriptions: Result) {
    const table = this.table()
    table.head(['Id', 'URL', 'Events', 'Active', 'Secret kept here'])
    for (const s of subscriptions) {
      table.row([
        s.id,
        s.url,
        s.events.join(', '),
        s.active === false ? 'no' : 'yes',
        s.secretStored ? 'yes' : 'no',
      ])
    }
    table.render()
  }
}
