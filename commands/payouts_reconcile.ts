import { flags } from '@adonisjs/core/ace'
import { outOfRange, PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['reconcile']>>

/** Runs the reconciliation job once, now. */
export default class PayoutsReconcile extends PayoutsCommand<Result> {
  static commandName = 'payouts:reconcile'
  static description = 'Read quiet non-terminal payouts from the service and apply what it says'

  @flags.number({ description: 'Only payouts not observed for this many milliseconds' })
  declare staleAfterMs?: number

  protected failure = 'Reconciliation failed'

  protected async accepted() {
    const refused = outOfRange('stale-after-ms', this.staleAfterMs, 0, Number.MAX_SAFE_INTEGER)
    return refused === undefined || this.refuse(refused)
  }

  protected perform(payouts: PayoutsService) {
    return payouts.reconcile({ staleAfterMs: this.staleAfterMs })
  }

  protected failed(summary: Result) {
    // The service failing mid-run is a failure of this run, for cron and scripts.
    return summary.stoppedForError
  }

  protected print(summary: Result) {
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
  }
}
