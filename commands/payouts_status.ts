import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['health']>>

/** The health of the integration, for an operator at 3 a.m. */
export default class PayoutsStatus extends PayoutsCommand<Result> {
  static commandName = 'payouts:status'
  static description =
    'Key environment, last event, inbox backlog, dead letters, unknown intents, failed escrow, stuck payouts'

  protected failure = 'Could not read the status'

  protected perform(payouts: PayoutsService) {
    return payouts.health()
  }

  protected failed(health: Result) {
    return health.deadLetters > 0 || health.unknownIntents > 0 || health.escrowFailed > 0
  }

  protected print(health: Result) {
    const table = this.ui.table()
    table.head(['Check', 'Value'])
    for (const [key, value] of Object.entries(health)) table.row([key, String(value ?? '-')])
    table.render()
  }
}
