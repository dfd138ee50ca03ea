import { args, flags } from '@adonisjs/core/ace'
import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['webhooks']['delete']>>

/** Deletes a subscription at the service, then its stored secrets; they are refused from then on. */
export default class PayoutsWebhooksDelete extends PayoutsCommand<Result> {
  static commandName = 'payouts:webhooks:delete'
  static description =
    'Delete a subscription at the service, then its stored secrets (asks first; --force for scripts)'

  @args.string({ description: 'Subscription id' })
  declare id: string

  @flags.boolean({ description: 'Delete without asking' })
  declare force: boolean

  protected failure = 'Delete failed'

  protected async accepted() {
    if (this.force || (await this.#confirmed())) return true
    this.logger.error(
      'Nothing deleted (not confirmed: pass --force to delete without asking, as scripts must)'
    )
    return false
  }

  protected perform(payouts: PayoutsService) {
    return payouts.webhooks.delete(this.id)
  }

  protected print(result: Result) {
    this.logger.success(
      result.deletedAtService
        ? `Deleted ${result.id} at the service${result.removedLocally ? ' and its stored secret' : '; no secret was stored here'}`
        : `${result.id} was already deleted at the service; its stored secret is deleted`
    )
  }

  async #confirmed() {
    // No terminal to ask on (cron, CI, a pipe): a prompt would wait on it forever.
    if (!process.stdin.isTTY) return false
    try {
      return await this.prompt.confirm(`Delete subscription ${this.id}?`)
    } catch {
      // The prompt was cancelled.
      return false
    }
  }
}
