import { args, BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'

/** Deletes a subscription at the service, then its stored secrets; they are refused from then on. */
export default class PayoutsWebhooksDelete extends BaseCommand {
  static commandName = 'payouts:webhooks:delete'
  static description =
    'Delete a subscription at the service, then its stored secrets (asks first; --force for scripts)'
  static options: CommandOptions = { startApp: true }

  @args.string({ description: 'Subscription id' })
  declare id: string

  @flags.boolean({ description: 'Delete without asking' })
  declare force: boolean

  @flags.boolean({ description: 'Print JSON for scripts' })
  declare json: boolean

  async run() {
    if (!this.force && !(await this.#confirmed())) {
      this.logger.error(
        'Nothing deleted (not confirmed: pass --force to delete without asking, as scripts must)'
      )
      this.exitCode = 1
      return
    }
    const payouts = await this.app.container.make('payouts.manager')
    try {
      const result = await payouts.webhooks.delete(this.id)
      if (this.json) return this.logger.log(JSON.stringify(result))
      this.logger.success(
        result.deletedAtService
          ? `Deleted ${result.id} at the service${result.removedLocally ? ' and its stored secret' : '; no secret was stored here'}`
          : `${result.id} was already deleted at the service; its stored secret is deleted`
      )
    } catch (error) {
      this.logger.error(`Delete failed: ${(error as Error).message}`)
      this.exitCode = 1
    }
  }

  async #confirmed() {
    // No terminal to ask on (cron, CI, a pipe): a prompt would wait on it forever.
    if (!process.stdin.isTTY) return false
    try {
      return await this.prompt.confirm(`Delete subscription ${this.id}?`)
    } catch {
      // No terminal to ask on, or the prompt was cancelled.
      return false
    }
  }
}
