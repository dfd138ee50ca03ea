import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'
import { PayoutsNetworkError, PayoutsTimeoutError } from '../client/errors.ts'
import { clientRetries, type ClientRetry } from '../service/client_retries.ts'
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

  /**
   * Refuses a listing's bad `--state` (one outside `allowed`) or `--limit` (not a positive
   * whole number); answers true when both are fine.
   */
  protected acceptListing(
    states: string[] | undefined,
    allowed: readonly string[],
    limit: number
  ): boolean {
    const unknown = states?.find((state) => !allowed.includes(state))
    if (unknown !== undefined) {
      return this.refuse(`Unknown state "${unknown}". Use ${allowed.join(', ')}`)
    }
    if (!Number.isInteger(limit) || limit < 1) {
      return this.refuse(`--limit must be a positive whole number, not "${limit}"`)
    }
    return true
  }

  /**
   * Says why the input is refused (one line, or `{"error":{...}}` with `--json`) and
   * answers false, so `accepted` can `return this.refuse('...')`.
   */
  protected refuse(reason: string): false {
    this.#reportError({ message: reason })
    return false
  }

  async run() {
    if (!(await this.accepted())) {
      this.exitCode = 1
      return
    }
    const payouts = await this.app.container.make('payouts.manager')
    const announce = (retry: unknown) => this.#announceRetry(retry as ClientRetry)
    clientRetries.subscribe(announce)
    try {
      const result = await this.perform(payouts)
      if (this.failed(result)) this.exitCode = 1
      if (this.json) this.logger.log(JSON.stringify(result))
      else this.print(result)
    } catch (error) {
      this.#reportError(describeError(error, payouts.config.baseUrl), this.failure)
      this.exitCode = 1
    } finally {
      clientRetries.unsubscribe(announce)
    }
  }

  /** One line on stderr per retry: a slow command shows what it waits for. */
  #announceRetry({ method, path, attempt, waitMs, code }: ClientRetry) {
    const after = code ? ` after ${code}` : ''
    this.logger.logError(
      `Retrying ${method} ${path}${after} (retry ${attempt}, in ${Math.round(waitMs)} ms)`
    )
  }

  #reportError(error: CommandError, failure?: string) {
    if (this.json) this.logger.log(JSON.stringify({ error: { ...error, failure } }))
    else this.logger.error(failure ? `${failure}: ${error.message}` : error.message)
  }
}

/** An error as a command reports it; `baseUrl` is set when the service could not be reached. */
interface CommandError {
  message: string
  code?: string
  baseUrl?: string
}

/** A network failure names the service's address, so a wrong URL or a down service shows. */
function describeError(error: unknown, baseUrl: string): CommandError {
  const { message, code } = error as { message: string; code?: unknown }
  const described: CommandError = { message: String(message) }
  if (typeof code === 'string') described.code = code
  if (error instanceof PayoutsNetworkError || error instanceof PayoutsTimeoutError) {
    described.baseUrl = baseUrl
    described.message = `could not reach the Payout Service at ${baseUrl}: ${message}`
  }
  return described
}
