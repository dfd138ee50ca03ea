import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'
import type { PayoutsService } from '../service/payouts_service.ts'

/**
 * What every `payouts:*` command that calls the service shares: the app started, `--json`,
 * the result printed as JSON or for a human, and any error reported in the command's own
 * words with exit code 1, so no script ever reads a failure as success.
 */
export abstract class PayoutsCommand<Result> extends BaseCommand {
  static options: CommandOptions = { startApp: true }

  @flags.boolean({ description: 'Print JSON for scripts' })
  declare json: boolean

  /** What failed, printed before the error's message ("Replay failed"). */
  protected abstract failure: string

  /** Calls the service. */
  protected abstract perform(payouts: PayoutsService): Promise<Result>

  /** Prints the result for a human (`--json` prints it as it is). */
  protected abstract print(result: Result): void

  /** Whether the result itself is a failure for scripts (exit code 1). */
  protected failed(_result: Result): boolean {
    return false
  }

  /** Checks the input before the service is resolved; false stops with exit code 1. */
  protected async accepted(): Promise<boolean> {
    return true
  }

  async run() {
    if (!(await this.accepted())) {
      this.exitCode = 1
      return
    }
    const payouts = await this.app.container.make('payouts.manager')
    try {
      const result = await this.perform(payouts)
      if (this.failed(result)) this.exitCode = 1
      if (this.json) this.logger.log(JSON.stringify(result))
      else this.print(result)
    } catch (error) {
      this.logger.error(`${this.failure}: ${(error as Error).message}`)
      this.exitCode = 1
    }
  }
}
