import { flags } from '@adonisjs/core/ace'
import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['webhooks']['create']>>

/** Subscribes the app's public webhook URL and keeps its secret encrypted. */
export default class PayoutsWebhooksCreate extends PayoutsCommand<Result> {
  static commandName = 'payouts:webhooks:create'
  static description =
    'Subscribe this app to payout events; the whsec_ secret is stored encrypted with APP_KEY'

  @flags.string({ description: 'Public URL of the webhook route (https)', required: true })
  declare url: string

  @flags.array({ description: 'Event types (default: payout.created, payout.status.updated)' })
  declare events?: string[]

  @flags.string({ description: 'A label for the subscription' })
  declare label?: string

  protected failure = 'Could not create the subscription'

  protected perform(payouts: PayoutsService) {
    return payouts.webhooks.create({
      url: this.url,
      events: this.events as Array<'payout.created' | 'payout.status.updated'> | undefined,
      label: this.label,
    })
  }

  protected print(subscription: Result) {
    this.logger.success(`Subscribed ${subscription.url} as ${subscription.id}`)
    this.logger.log('The signing secret is stored encrypted; it is never printed.')
  }
}
