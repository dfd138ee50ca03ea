import { args } from '@adonisjs/core/ace'
import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['webhooks']['replayDelivery']>>

/** Asks the service to deliver a webhook delivery again. */
export default class PayoutsDeliveriesReplay extends PayoutsCommand<Result> {
  static commandName = 'payouts:deliveries:replay'
  static description = 'Ask the service to re-deliver a webhook delivery (new Svc-Delivery-Id)'

  @args.string({ description: 'Delivery id' })
  declare id: string

  protected failure = 'Replay failed'

  protected perform(payouts: PayoutsService) {
    return payouts.webhooks.replayDelivery(this.id)
  }

  protected print(replay: Result) {
    this.logger.success(`Replay of ${this.id} enqueued as ${replay.id}`)
  }
}
