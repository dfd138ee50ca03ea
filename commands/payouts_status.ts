import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'

/** The health of the integration, for an operator at 3 a.m. */
export default class PayoutsStatus extends BaseCommand {
  static commandName = 'payouts:status'
  static description =
    'Key environment, last event, inbox backlog, dead letters, unknown intents, failed escrow, stuck payouts'
  static options: CommandOptions = { startApp: true }

  @flags.boolean({ description: 'Print JSON for scripts' })
  declare json: boolean

  async run() {
    const payouts = await this.app.container.make('payouts.manager')
    try {
      const health = await payouts.health()
      if (this.json) this.logger.log(JSON.stringify(health))
      else {
        const table = this.ui.table()
        table.head(['Check', 'Value'])
        for (const [key, value] of Object.entries(health)) table.row([key, String(value ?? '-')])
        table.render()
      }
      if (health.deadLetters > 0 || health.unknownIntents > 0 || health.escrowFailed > 0)
        this.exitCode = 1
    } catch (error) {
      this.logger.error(`Could not read the status: ${(error as Error).message}`)
      this.exitCode = 1
    }
  }
}
