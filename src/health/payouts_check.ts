import { BaseCheck, Result } from '@adonisjs/core/health'
import { withDeadline } from '../time_bounds.ts'
import type { PayoutsManager } from '../service/payouts_manager.ts'
import type { PayoutsService } from '../service/payouts_service.ts'
import type { PayoutsHealthReport, Verdict } from './types.ts'

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
 * Register it in `start/health.ts`: `new HealthChecks().register([new PayoutsCheck()])`. With
 * several accounts (docs/accounts.md) it reports every account: the worst verdict, each
 * account's lines named in the message, and each account's report in the meta (`accounts`).
 * Given one account's service (`new PayoutsCheck(payouts.use('eu'))`), that account alone.
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
    let reports: PayoutsHealthReport[]
    try {
      const payouts = await this.#service()
      const bound = payouts.config.health.timeoutMs + MARGIN_MS
      // The manager (`payouts.manager`) is every account's: each read at once, each bounded.
      const services = (payouts as Partial<Pick<PayoutsManager, 'all'>>).all?.() ?? [payouts]
      // Several accounts: one that cannot be read is an error line of its own, the others
      // are still reported.
      const several = services.length > 1
      reports = await Promise.all(
        services.map((service) =>
          withDeadline(
            service.health(),
            bound,
            `payouts health report (${service.config.account})`
          ).catch(async (error) => {
            if (!several) throw error
            const { unreadableReport } = await import('./report.ts')
            return unreadableReport(service.config, error)
          })
        )
      )
    } catch (error) {
      // Said by the database's code alone: the route's answer may be read by anyone.
      const { unreadableReason } = await import('./report.ts')
      return Result.failed(`Could not read the payouts health: ${unreadableReason(error)}`)
    }
    if (reports.length === 1) return resultOf(reports[0].status, reports[0].message, reports[0])
    const worst = reports.reduce((a, b) => (RANK[b.status] > RANK[a.status] ? b : a))
    const message = reports
      .filter((report) => report.status !== 'ok')
      .map((report) => `${report.account}: ${report.message}`)
      .join('; ')
    const accounts = Object.fromEntries(reports.map((report) => [report.account, report]))
    return resultOf(worst.status, message || 'ok', { accounts })
  }
}

const RANK: Record<Verdict, number> = { ok: 0, warning: 1, error: 2 }

function resultOf(status: Verdict, message: string, meta: Record<string, any>) {
  const result =
    status === 'ok'
      ? Result.ok(message)
      : status === 'warning'
        ? Result.warning(message)
        : Result.failed(message)
  return result.setMetaData(meta)
}
