import { flags } from '@adonisjs/core/ace'
import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import { durationFlag } from '../src/duration.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['recover']>>

/** Runs the recovery of unfinished executions once, now. */
export default class PayoutsRecover extends PayoutsCommand<Result> {
  static commandName = 'payouts:recover'
  static description = 'Re-send unknown execution intents with their original Idempotency-Key'

  // No `default` here: with one, a bare `--older-than-ms` (an unset variable in a script)
  // would run with it; without, ace refuses a mentioned flag with no value.
  @flags.string({
    description:
      'Only intents idle for this long (milliseconds, or e.g. "10m", "2h") [default: 1m]',
  })
  declare olderThanMs?: string

  protected failure = 'Recovery failed'

  #olderThanMs?: number

  protected async accepted() {
    const { ms, refused } = durationFlag(
      'older-than-ms',
      this.olderThanMs ?? '1m',
      0,
      Number.MAX_SAFE_INTEGER
    )
    this.#olderThanMs = ms
    return refused === undefined || this.refuse(refused)
  }

  protected perform(payouts: PayoutsService) {
    return payouts.recover({ olderThanMs: this.#olderThanMs })
  }

  protected failed(summary: Result) {
    return summary.unknown > 0 || summary.flagged > 0
  }

  protected print(summary: Result) {
    const table = this.table()
    table.head(['Re-sent', 'Succeeded', 'Failed', 'Still unknown', 'Flagged for a human'])
    table.row(
      [summary.resent, summary.succeeded, summary.failed, summary.unknown, summary.flagged].map(
        String
      )
    )
    table.render()
  }
}
