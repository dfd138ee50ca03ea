import { flags } from '@adonisjs/core/ace'
import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import { durationFlag } from '../src/duration.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['reconcile']>>

/** Runs the reconciliation job once, now. */
export default class PayoutsReconcile extends PayoutsCommand<Result> {
  static commandName = 'payouts:reconcile'
  static description = 'Read quiet non-terminal payouts from the service and apply what it says'

  @flags.string({
    description: 'Only payouts not observed for this long (milliseconds, or e.g. "10m", "2h")',
  })
  declare staleAfterMs?: string

  protected failure = 'Reconciliation failed'

  #staleAfterMs?: number

  protected async accepted() {
    const { ms, refused } = durationFlag(
      'stale-after-ms',
      this.staleAfterMs,
      0,
      Number.MAX_SAFE_INTEGER
    )
    this.#staleAfterMs = ms
    return refused === undefined || this.refuse(refused)
  }

  protected perform(payouts: PayoutsService) {
    return payouts.reconcile({ staleAfterMs: this.#staleAfterMs })
  }

  protected failed(summary: Result) {
    // The service failing mid-run is a failure of this run, for cron and scripts.
    return summary.stoppedForError
  }

  protected print(summary: Result) {
    const table = this.table()
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
