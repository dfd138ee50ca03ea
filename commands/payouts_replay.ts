import { flags } from '@adonisjs/core/ace'
import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['replayInbox']>>
const STATES = ['failed', 'dead', 'processed', 'pending'] as const
type ReplayState = (typeof STATES)[number]

/**
 * Re-runs deliveries stored in this app's inbox through the pipeline (the service is not
 * asked; `payouts:webhooks:redeliver` asks it to send again).
 */
export default class PayoutsReplay extends PayoutsCommand<Result> {
  static commandName = 'payouts:replay'
  static description =
    'Re-run deliveries stored in this app (the local inbox; ids from payouts:deliveries) by id, state or time window'

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
      return this.refuse(`Unknown state "${this.state}". Use failed, dead, processed or pending`)
    }
    if (!this.id?.length && !this.state && !this.since && !this.until) {
      return this.refuse('Say what to replay: --id, --state, --since or --until')
    }
    for (const [flag, value] of [
      ['--since', this.since],
      ['--until', this.until],
    ] as const) {
      if (value !== undefined && Number.isNaN(Date.parse(value))) {
        return this.refuse(`${flag} "${value}" is not a date; use ISO 8601 (2026-01-31T12:00:00Z)`)
      }
    }
    if (this.state === 'processed' && !this.force) {
      return this.refuse('Processed deliveries are replayed only with --force; nothing replayed')
    }
    return true
  }

  protected async perform(payouts: PayoutsService) {
    if (this.id?.length) await this.#checkIds(payouts)
    return payouts.replayInbox({
      ids: this.id,
      state: this.state as ReplayState | undefined,
      since: this.since,
      until: this.until,
      force: this.force,
    })
  }

  /** Refuses ids the inbox does not hold, and processed ones without --force. */
  async #checkIds(payouts: PayoutsService) {
    const ids = [...new Set(this.id)]
    const rows = await payouts.deliveries({ ids })
    const found = new Set(rows.map((row) => row.deliveryId))
    const unknown = ids.filter((id) => !found.has(id))
    if (unknown.length > 0) {
      throw new Error(
        `No stored delivery with id ${unknown.join(', ')}; nothing replayed (payouts:deliveries lists them)`
      )
    }
    const processed = rows.filter((row) => row.state === 'processed').map((row) => row.deliveryId)
    if (processed.length > 0 && !this.force) {
      throw new Error(
        `${processed.join(', ')} already processed; add --force to re-apply. Nothing replayed`
      )
    }
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
