import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'

/** Reconciles the local recipients table with the service. */
export default class PayoutsRecipientsSync extends BaseCommand {
  static commandName = 'payouts:recipients:sync'
  static description = 'Mirror the service recipients into the local table'
  static options: CommandOptions = { startApp: true }

  @flags.boolean({ description: 'Print JSON for scripts' })
  declare json: boolean

  async run() {
    const payouts = await this.app.container.make('payouts.manager')
    try {
      const summary = await payouts.recipients.sync()
      if (this.json) return this.logger.log(JSON.stringify(summary))
      this.logger.success(
        `Created ${summary.created}, updated ${summary.updated}, marked deleted ${summary.deleted}`
      )
    } catch (error) {
      this.logger.error(`Sync failed: ${(error as Error).message}`)
      this.exitCode = 1
    }
  }
}
