import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsHealthReport, Verdict } from '../src/health/types.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

/**
 * The health of the integration, for an operator at 3 a.m.: the report the AdonisJS
 * health check gives, one line per check with its verdict. Exits 1 when a line is an
 * error, and says which.
 */
export default class PayoutsStatus extends PayoutsCommand<PayoutsHealthReport> {
  static commandName = 'payouts:status'
  static description =
    'Service reachability, inbox backlog and age, dead letters, unknown intents, failed escrow, stuck payouts, last event; exits 1 on an error'

  protected failure = 'Could not read the status'

  protected perform(payouts: PayoutsService) {
    return payouts.health()
  }

  /** Any line that is not ok needs an operator: exit 1, with the reasons printed. */
  protected failed(report: PayoutsHealthReport) {
    return report.status !== 'ok'
  }

  protected print(report: PayoutsHealthReport) {
    const colors = this.colors
    const paint: Record<Verdict, (text: string) => string> = {
      ok: (text) => colors.green(text),
      warning: (text) => colors.yellow(text),
      error: (text) => colors.red(text),
    }
    this.logger.log(`Environment: ${report.environment}, events from: ${report.eventSources}`)
    const table = this.ui.table()
    table.head(['Check', 'Verdict', 'Value', 'Details'])
    for (const [name, line] of Object.entries(report.checks)) {
      table.row([name, paint[line.status](line.status), String(line.value ?? '-'), line.message])
    }
    table.render()
    if (report.status !== 'ok')
      this.logger.error(`payouts:status ${report.status}: ${report.message}`)
  }
}
