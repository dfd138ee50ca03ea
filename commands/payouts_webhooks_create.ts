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

  @flags.boolean({ description: 'Subscribe even when an active subscription has this URL' })
  declare force: boolean

  protected failure = 'Could not create the subscription'

  protected async perform(payouts: PayoutsService) {
    if (!this.force) await this.#refuseDuplicate(payouts)
    return payouts.webhooks.create({
      url: this.url,
      events: this.events as Array<'payout.created' | 'payout.status.updated'> | undefined,
      label: this.label,
    })
  }

  /** A second active subscription to one URL would deliver every event twice. */
  async #refuseDuplicate(payouts: PayoutsService) {
    if (!URL.canParse(this.url)) return
    const href = new URL(this.url).href
    const subscriptions = await payouts.client.webhooks.subscriptions.list()
    const existing = subscriptions.find(
      (s) => s.active !== false && URL.canParse(s.url) && new URL(s.url).href === href
    )
    if (existing) {
      throw new Error(
        `${existing.id} already delivers to ${existing.url}; a second subscription would deliver every event twice. Nothing created (--force subscribes anyway)`
      )
    }
  }

  protected print(subscription: Result) {
    this.logger.success(`Subscribed ${subscription.url} as ${subscription.id}`)
    this.logger.log('The signing secret is stored encrypted; it is never printed.')
  }
}
