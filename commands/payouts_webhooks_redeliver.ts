import { args } from '@adonisjs/core/ace'
import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['webhooks']['replayDelivery']>>

/**
 * Asks the service to deliver a webhook delivery again. Named apart from `payouts:replay`,
 * which re-runs deliveries already stored in this app. Its former name,
 * `payouts:deliveries:replay`, runs it with a deprecation notice (payouts_deliveries_replay.ts).
 */
export default class PayoutsWebhooksRedeliver extends PayoutsCommand<Result> {
  static commandName = 'payouts:webhooks:redeliver'
  static description =
    'Ask the service to send a webhook delivery again (new Svc-Delivery-Id); payouts:replay re-runs what this app stored'

  @args.string({ description: 'Delivery id' })
  declare id: string

  protected failure = 'Redelivery failed'

  protected perform(payouts: PayoutsService) {
    return payouts.webhooks.replayDelivery(this.id)
  }

  protected print(replay: Result) {
    this.logger.success(`The service will deliver ${this.id} again as ${replay.id}`)
  }
}
