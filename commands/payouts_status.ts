import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsHealthReport, Verdict } from '../src/health/types.ts'
import type { PayoutsManager } from '../src/service/payouts_manager.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

/** Several accounts' reports: the worst verdict of them, and each account's. */
interface AccountsReport {
  status: Verdict
  message: string
  accounts: Record<string, PayoutsHealthReport>
}

type StatusResult = PayoutsHealthReport | AccountsReport

const RANK: Record<Verdict, number> = { ok: 0, warning: 1, error: 2 }

/**
 * The health of the integration, for an operator at 3 a.m.: the report the AdonisJS
 * health check gives, one line per check with its verdict. Exits 1 when a line is an
 * error, and says which.
 */
export default class PayoutsStatus extends PayoutsCommand<StatusResult> {
  static commandName = 'payouts:status'
  static description =
    'Service reachability, inbox backlog and age, dead letters, unknown intents, failed escrow, stuck payouts, last event; exits 1 on an error'

  protected failure = 'Could not read the status'

  /**
   * One account's report (`--account`, or an app with one account), or every account's: the
   * accounts' reports side by side, the status the worst of theirs.
   */
  protected async perform(payouts: PayoutsService, manager: PayoutsManager) {
    if (this.account !== undefined || manager.accounts.length === 1) return payouts.health()
    const accounts: Record<string, PayoutsHealthReport> = {}
    const { unreadableReport } = await import('../src/health/report.ts')
    // One account that cannot be read (no key, a refused key) is an error of its own; the
    // others are still reported.
    for (const name of manager.accounts) {
      const service = manager.use(name)
      accounts[name] = await service
        .health()
        .catch((error) => unreadableReport(service.config, error))
    }
    const reports = Object.entries(accounts)
    const status = reports.reduce<Verdict>(
      (worst, [, report]) => (RANK[report.status] > RANK[worst] ? report.status : worst),
      'ok'
    )
    const message = reports
      .filter(([, report]) => report.status !== 'ok')
      .map(([name, report]) => `${name}: ${report.message}`)
      .join('; ')
    return { status, message: message || 'ok', accounts }
  }

  /** Any line that is not ok needs an operator: exit 1, with the reasons printed. */
  protected failed(report: StatusResult) {
    return report.status !== 'ok'
  }

  protected print(result: StatusResult) {
    if (!('accounts' in result)) return this.#printReport(result)
    for (const [name, report] of Object.entries(result.accounts)) {
      this.logger.log(this.colors.bold(`Account ${name}`))
      this.#printReport(report)
    }
  }

  #printReport(report: PayoutsHealthReport) {
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
