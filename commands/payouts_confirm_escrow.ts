import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['escrow']['confirmDue']>>

/** Runs the escrow-confirmation fallback once, now. */
export default class PayoutsConfirmEscrow extends PayoutsCommand<Result> {
  static commandName = 'payouts:confirm-escrow'
  static description =
    'Confirm recorded escrow deposits the service has not detected (as the spec allows)'

  protected failure = 'Escrow fallback failed'

  protected perform(payouts: PayoutsService) {
    return payouts.escrow.confirmDue()
  }

  protected failed(summary: Result) {
    return summary.failed > 0
  }

  protected print(summary: Result) {
    const table = this.table()
    table.head(['Checked', 'Confirmed', 'Detected', 'Failed', 'Waiting'])
    table.row(
      [summary.checked, summary.confirmed, summary.detected, summary.failed, summary.waiting].map(
        String
      )
    )
    table.render()
  }
}
