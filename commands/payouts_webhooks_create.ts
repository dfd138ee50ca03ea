import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'

/** Subscribes the app's public webhook URL and keeps its secret encrypted. */
export default class PayoutsWebhooksCreate extends BaseCommand {
  static commandName = 'payouts:webhooks:create'
  static description =
    'Subscribe this app to payout events; the whsec_ secret is stored encrypted with APP_KEY'
  static options: CommandOptions = { startApp: true }

  @flags.string({ description: 'Public URL of the webhook route (https)', required: true })
  declare url: string

  @flags.array({ description: 'Event types (default: payout.created, payout.status.updated)' })
  declare events?: string[]

  @flags.string({ description: 'A label for the subscription' })
  declare label?: string

  @flags.boolean({ description: 'Print JSON for scripts' })
  declare json: boolean

  async run() {
    const payouts = await this.app.container.make('payouts.manager')
    try {
      const subscription = await payouts.webhooks.create({
        url: this.url,
        events: this.events as Array<'payout.created' | 'payout.status.updated'> | undefined,
        label: this.label,
      })
      if (this.json) this.logger.log(JSON.stringify(subscription))
      else {
        this.logger.success(`Subscribed ${subscription.url} as ${subscription.id}`)
        this.logger.log('The signing secret is stored encrypted; it is never printed.')
      }
    } catch (error) {
      this.logger.error(`Could not create the subscription: ${(error as Error).message}`)
      this.exitCode = 1
    }
  }
}
