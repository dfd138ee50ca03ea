import { args } from '@adonisjs/core/ace'
import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['webhooks']['rotateSecret']>>

/** Rotates a subscription's secret; the old one is refused from then on (no overlap). */
export default class PayoutsWebhooksRotateSecret extends PayoutsCommand<Result> {
  static commandName = 'payouts:webhooks:rotate-secret'
  static description =
    'Rotate a subscription secret stored by this app; the old one is refused at once, as the service does'

  @args.string({ description: 'Subscription id' })
  declare id: string

  protected failure = 'Rotation failed'

  protected perform(payouts: PayoutsService) {
    return payouts.webhooks.rotateSecret(this.id)
  }

  protected print(result: Result) {
    this.logger.success(
      `Rotated ${result.id}; the previous secret is refused from now on (by other instances within 30 s)`
    )
  }
}
