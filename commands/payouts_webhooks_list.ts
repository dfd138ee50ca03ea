import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'

/** Lists the account's webhook subscriptions and which ones this app keeps secrets for. */
export default class PayoutsWebhooksList extends BaseCommand {
  static commandName = 'payouts:webhooks:list'
  static description = 'List webhook subscriptions'
  static options: CommandOptions = { startApp: true }

  @flags.boolean({ description: 'Print JSON for scripts' })
  declare json: boolean

  async run() {
    const payouts = await this.app.container.make('payouts.manager')
    try {
      const subscriptions = await payouts.webhooks.list()
      if (this.json) return this.logger.log(JSON.stringify(subscriptions))
      const table = this.ui.table()
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
    } catch (error) {
      this.logger.error(`Could not list subscriptions: ${(error as Error).message}`)
      this.exitCode = 1
    }
  }
}
