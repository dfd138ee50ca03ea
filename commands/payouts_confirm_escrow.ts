import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'

/** Runs the escrow-confirmation fallback once, now. */
export default class PayoutsConfirmEscrow extends BaseCommand {
  static commandName = 'payouts:confirm-escrow'
  static description =
    'Confirm recorded escrow deposits the service has not detected (as the spec allows)'
  static options: CommandOptions = { startApp: true }

  @flags.boolean({ description: 'Print JSON for scripts' })
  declare json: boolean

  async run() {
    const payouts = await this.app.container.make('payouts.manager')
    try {
      const summary = await payouts.escrow.confirmDue()
      if (this.json) this.logger.log(JSON.stringify(summary))
      else {
        const table = this.ui.table()
        table.head(['Checked', 'Confirmed', 'Detected', 'Failed', 'Waiting'])
        table.row(
          [
            summary.checked,
            summary.confirmed,
            summary.detected,
            summary.failed,
            summary.waiting,
          ].map(String)
        )
        table.render()
      }
      if (summary.failed > 0) this.exitCode = 1
    } catch (error) {
      this.logger.error(`Escrow fallback failed: ${(error as Error).message}`)
      this.exitCode = 1
    }
  }
}
