import { BaseCheck, Result } from '@adonisjs/core/health'
import { redactCredentials } from '../client/redact.ts'
import { withDeadline } from '../time_bounds.ts'
import type { PayoutsService } from '../service/payouts_service.ts'

/** Past `health.timeoutMs`, the room left for the report's own error lines to arrive. */
const MARGIN_MS = 1000

/**
 * The plugin's check for AdonisJS health checks: the same report as `payouts:status`
 * (database, inbox backlog and age, dead letters, unknown intents, failed escrow, stuck
 * payouts, time since the last event, heartbeats of the worker and the jobs, service
 * reachability). Its status is the worst line's, its message names every line that is not
 * ok, and its meta is the whole report. It answers within `health.timeoutMs` (plus a
 * second at worst), so the host's health route answers 503 instead of hanging.
 *
 * Register it in `start/health.ts`: `new HealthChecks().register([new PayoutsCheck()])`.
 */
export class PayoutsCheck extends BaseCheck {
  name = 'Payouts'
  #payouts?: PayoutsService

  /** Without a service, the app's `payouts.manager` is resolved on the first run. */
  constructor(payouts?: PayoutsService) {
    super()
    this.#payouts = payouts
  }

  async #service(): Promise<PayoutsService> {
    if (!this.#payouts) {
      const { default: app } = await import('@adonisjs/core/services/app')
      this.#payouts = await app.container.make('payouts.manager')
    }
    return this.#payouts
  }

  async run() {
    let report
    try {
      const payouts = await this.#service()
      const bound = payouts.config.health.timeoutMs + MARGIN_MS
      report = await withDeadline(payouts.health(), bound, 'payouts health report')
    } catch (error) {
      const message = redactCredentials((error as Error)?.message ?? String(error))
      return Result.failed(`Could not read the payouts health: ${message}`)
    }
    const result =
      report.status === 'ok'
        ? Result.ok(report.message)
        : report.status === 'warning'
          ? Result.warning(report.message)
          : Result.failed(report.message)
    return result.setMetaData(report)
  }
}
