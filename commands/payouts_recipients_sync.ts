import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['recipients']['sync']>>

/** Reconciles the local recipients table with the service. */
export default class PayoutsRecipientsSync extends PayoutsCommand<Result> {
  static commandName = 'payouts:recipients:sync'
  static description = 'Mirror the service recipients into the local table'

  protected failure = 'Sync failed'

  protected perform(payouts: PayoutsService) {
    return payouts.recipients.sync()
  }

  protected print(summary: Result) {
    this.logger.success(
      `Created ${summary.created}, updated ${summary.updated}, marked deleted ${summary.deleted}`
    )
  }
}
