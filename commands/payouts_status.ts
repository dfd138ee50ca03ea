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
 * health check gives, one line per check with its verdict. Exits 1 when a line is not ok
 * (a warning or an error), and says which on stderr, labelled as the verdict it is.
 */
export default class PayoutsStatus extends PayoutsCommand<StatusResult> {
  static commandName = 'payouts:status'
  static description =
    'Service reachability, inbox backlog and age, dead letters, unknown intents, failed escrow, stuck payouts, last event; exits 1 on a warning or an error'

  static help = [
    'Exit code: 0 when every line is ok; 1 when a line is a warning or an error, or when the',
    'report could not be read. The last line (stderr) says which: "[ warn ] payouts:status',
    'warning: ..." or "[ error ] payouts:status error: ...". A script that tells the two apart',
    'reads "status" ("ok", "warning" or "error") from --json.',
    'Piped or redirected, the output has no colour codes (--ansi forces them).',
  ]

  protected failure = 'Could not read the status'

  /**
   * One account's report (`--account`, or an app with one account), or every account's: the
   * accounts' reports side by side, the status the worst of theirs.
   */
  protected async perform(payouts: PayoutsService, manager: PayoutsManager) {
    const { databaseFailure, unreadableReport } = await import('../src/health/report.ts')
    if (this.account !== undefined || manager.accounts.length === 1) {
      // A database that did not answer is said as the health check says it: by its code.
      return payouts.health().catch((error) => {
        const failure = databaseFailure(error)
        if (!failure) throw error
        throw Object.assign(new Error(`the database ${failure}`), { code: error.code })
      })
    }
    const accounts: Record<string, PayoutsHealthReport> = {}
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

  /** Any line that is not ok needs an operator: exit 1 on a warning as on an error. */
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
    const table = this.table()
    table.head(['Check', 'Verdict', 'Value', 'Details'])
    for (const [name, line] of Object.entries(report.checks)) {
      table.row([name, paint[line.status](line.status), String(line.value ?? '-'), line.message])
    }
    table.render()
    const reason = `payouts:status ${report.status}: ${report.message}`
    if (report.status === 'error') this.logger.error(reason)
    // A warning is not an error: labelled as one, on stderr beside the errors.
    if (report.status === 'warning') this.logger.logError(this.logger.prepareWarning(reason))
  }
}
