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
      // The service failing mid-run is a failure of this run, for cron and scripts.
      if (summary.stoppedForError) this.exitCode = 1
      if (this.json) return this.logger.log(JSON.stringify(summary))
      const table = this.ui.table()
      table.head(['Checked', 'Changed', 'Missing', 'Failed', 'Stuck', 'Stopped'])
      table.row(
        [
          summary.checked,
          summary.changed,
          summary.missing,
          summary.failed,
          summary.stuck,
          summary.stoppedForBudget ? 'budget' : summary.stoppedForError ? 'service error' : 'no',
        ].map(String)
      )
      table.render()
    } catch (error) {
      this.logger.error(`Reconciliation failed: ${(error as Error).message}`)
      this.exitCode = 1
    }
  }
}
