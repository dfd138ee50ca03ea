import { flags } from '@adonisjs/core/ace'
import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['replayInbox']>>
const STATES = ['failed', 'dead', 'processed', 'pending'] as const
type ReplayState = (typeof STATES)[number]

/** Re-runs stored inbox deliveries through the pipeline. */
export default class PayoutsReplay extends PayoutsCommand<Result> {
  static commandName = 'payouts:replay'
  static description =
    'Re-run stored webhook/WebSocket deliveries from the inbox (by id, state or time window)'

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

  protected failure = 'Replay failed'

  protected async accepted() {
    if (this.state && !STATES.includes(this.state as ReplayState)) {
      this.logger.error(`Unknown state "${this.state}". Use failed, dead, processed or pending`)
      return false
    }
    if (!this.id?.length && !this.state && !this.since && !this.until) {
      this.logger.error('Say what to replay: --id, --state, --since or --until')
      return false
    }
    return true
  }

  protected perform(payouts: PayoutsService) {
    return payouts.replayInbox({
      ids: this.id,
      state: this.state as ReplayState | undefined,
      since: this.since,
      until: this.until,
      force: this.force,
    })
  }

  protected failed(summary: Result) {
    return summary.failing > 0
  }

  protected print(summary: Result) {
    this.logger.success(
      `Requeued ${summary.requeued}, processed ${summary.processed}, still failing ${summary.failing}`
    )
  }
}
