import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'

/** Runs the reconciliation job once, now. */
export default class PayoutsReconcile extends BaseCommand {
  static commandName = 'payouts:reconcile'
  static description = 'Read quiet non-terminal payouts from the service and apply what it says'
  static options: CommandOptions = { startApp: true }

  @flags.number({ description: 'Only payouts not observed for this many milliseconds' })
  declare staleAfterMs?: number

  @flags.boolean({ description: 'Print JSON for scripts' })
  declare json: boolean

  async run() {
    const payouts = await this.app.container.make('payouts.manager')
    try {
      const summary = await payouts.reconcile({ staleAfterMs: this.staleAfterMs })
      if (this.json) return this.logger.log(JSON.stringify(summary))
      const table = this.ui.table()
      table.head(['Checked', 'Changed', 'Missing', 'Stuck', 'Stopped for budget'])
      table.row(
        [
          summary.checked,
          summary.changed,
          summary.missing,
          summary.stuck,
          summary.stoppedForBudget ? 'yes' : 'no',
        ].map(String)
      )
      table.render()
    } catch (error) {
      this.logger.error(`Reconciliation failed: ${(error as Error).message}`)
      this.exitCode = 1
    }
  }
}
