import { flags } from '@adonisjs/core/ace'
import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['prune']>>

/** Removes inbox rows and execution intents past their retention, once, now. */
export default class PayoutsPrune extends PayoutsCommand<Result> {
  static commandName = 'payouts:prune'
  static description =
    'Remove processed deliveries and finished intents past their retention (never the ledger)'

  @flags.boolean({ description: 'Only count what would be removed' })
  declare dryRun: boolean

  @flags.boolean({ description: 'Also remove dead letters received more than a day ago' })
  declare deadLetters: boolean

  protected failure = 'Pruning failed'

  protected perform(payouts: PayoutsService) {
    return payouts.prune({ dryRun: this.dryRun, deadLetters: this.deadLetters })
  }

  protected print(summary: Result) {
    const verb = summary.dryRun ? 'Would remove' : 'Removed'
    this.logger.success(
      `${verb} ${summary.processedDeliveries} processed deliveries, ${summary.deadLetters} dead letters, ${summary.finishedIntents} finished intents`
    )
  }
}
