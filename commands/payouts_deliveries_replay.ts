import { args, BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'

/** Asks the service to deliver a webhook delivery again. */
export default class PayoutsDeliveriesReplay extends BaseCommand {
  static commandName = 'payouts:deliveries:replay'
  static description = 'Ask the service to re-deliver a webhook delivery (new Svc-Delivery-Id)'
  static options: CommandOptions = { startApp: true }

  @args.string({ description: 'Delivery id' })
  declare id: string

  @flags.boolean({ description: 'Print JSON for scripts' })
  declare json: boolean

  async run() {
    const payouts = await this.app.container.make('payouts.manager')
    try {
      const replay = await payouts.webhooks.replayDelivery(this.id)
      if (this.json) this.logger.log(JSON.stringify(replay))
      else this.logger.success(`Replay of ${this.id} enqueued as ${replay.id}`)
    } catch (error) {
      this.logger.error(`Replay failed: ${(error as Error).message}`)
      this.exitCode = 1
    }
  }
}
