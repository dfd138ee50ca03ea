import { BaseCheck, Result } from '@adonisjs/core/health'
import type { PayoutsService } from '../service/payouts_service.ts'

/**
 * The plugin's check for AdonisJS health checks: the same report as `payouts:status`
 * (inbox backlog and age, dead letters, unknown intents, failed escrow, stuck payouts,
 * time since the last event, service reachability). Its status is the worst line's, its
 * message names every line that is not ok, and its meta is the whole report.
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
      report = await payouts.health()
    } catch (error) {
      return Result.failed('Could not read the payouts health', error as Error)
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
