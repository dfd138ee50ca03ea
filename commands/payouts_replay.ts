import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'

/** Re-runs stored inbox deliveries through the pipeline. */
export default class PayoutsReplay extends BaseCommand {
  static commandName = 'payouts:replay'
  static description =
    'Re-run stored webhook/WebSocket deliveries from the inbox (by id, state or time window)'
  static options: CommandOptions = { startApp: true }

  @flags.array({ description: 'Svc-Delivery-Id values to replay' })
  declare id?: string[]

  @flags.string({ description: 'failed, dead or processed (processed needs --force)' })
  declare state?: string

  @flags.string({ description: 'Received at or after (ISO 8601)' })
  declare since?: string

  @flags.string({ description: 'Received before (ISO 8601)' })
  declare until?: string

  @flags.boolean({
    description: 'Also re-apply processed deliveries (the state machine keeps it safe)',
  })
  declare force: boolean

  @flags.boolean({ description: 'Print JSON for scripts' })
  declare json: boolean

  async run() {
    const payouts = await this.app.container.make('payouts.manager')
    if (this.state && !['failed', 'dead', 'processed', 'pending'].includes(this.state)) {
      this.logger.error(`Unknown state "${this.state}". Use failed, dead, processed or pending`)
      this.exitCode = 1
      return
    }
    if (!this.id?.length && !this.state && !this.since && !this.until) {
      this.logger.error('Say what to replay: --id, --state, --since or --until')
      this.exitCode = 1
      return
    }
    try {
      const summary = await payouts.replayInbox({
        ids: this.id,
        state: this.state as 'failed' | 'dead' | 'processed' | 'pending' | undefined,
        since: this.since,
        until: this.until,
        force: this.force,
      })
      if (this.json) this.logger.log(JSON.stringify(summary))
      else
        this.logger.success(
          `Requeued ${summary.requeued}, processed ${summary.processed}, still failing ${summary.failing}`
        )
      if (summary.failing > 0) this.exitCode = 1
    } catch (error) {
      this.logger.error(`Replay failed: ${(error as Error).message}`)
      this.exitCode = 1
    }
  }
}
