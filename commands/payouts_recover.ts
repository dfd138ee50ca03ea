import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'

/** Runs the recovery of unfinished executions once, now. */
export default class PayoutsRecover extends BaseCommand {
  static commandName = 'payouts:recover'
  static description = 'Re-send unknown execution intents with their original Idempotency-Key'
  static options: CommandOptions = { startApp: true }

  @flags.number({ description: 'Only intents idle for this many milliseconds', default: 60_000 })
  declare olderThanMs: number

  @flags.boolean({ description: 'Print JSON for scripts' })
  declare json: boolean

  async run() {
    const payouts = await this.app.container.make('payouts.manager')
    try {
      const summary = await payouts.recover({ olderThanMs: this.olderThanMs })
      if (this.json) this.logger.log(JSON.stringify(summary))
      else {
        const table = this.ui.table()
        table.head(['Re-sent', 'Succeeded', 'Failed', 'Still unknown', 'Flagged for a human'])
        table.row(
          [summary.resent, summary.succeeded, summary.failed, summary.unknown, summary.flagged].map(
            String
          )
        )
        table.render()
      }
      if (summary.unknown > 0 || summary.flagged > 0) this.exitCode = 1
    } catch (error) {
      this.logger.error(`Recovery failed: ${(error as Error).message}`)
      this.exitCode = 1
    }
  }
}
