import { args, BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'

/** Rotates a subscription's secret; the old one is refused from then on (no overlap). */
export default class PayoutsWebhooksRotateSecret extends BaseCommand {
  static commandName = 'payouts:webhooks:rotate-secret'
  static description =
    'Rotate a subscription secret stored by this app; the old one is refused at once, as the service does'
  static options: CommandOptions = { startApp: true }

  @args.string({ description: 'Subscription id' })
  declare id: string

  @flags.boolean({ description: 'Print JSON for scripts' })
  declare json: boolean

  async run() {
    const payouts = await this.app.container.make('payouts.manager')
    try {
      const result = await payouts.webhooks.rotateSecret(this.id)
      if (this.json) this.logger.log(JSON.stringify(result))
      else
        this.logger.success(
          `Rotated ${result.id}; the previous secret is refused from now on (by other instances within 30 s)`
        )
    } catch (error) {
      this.logger.error(`Rotation failed: ${(error as Error).message}`)
      this.exitCode = 1
    }
  }
}
