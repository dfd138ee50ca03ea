import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions, FlagsParserOptions } from '@adonisjs/core/types/ace'
import { PayoutsNetworkError, PayoutsTimeoutError } from '../client/errors.ts'
import { clientRetries, type ClientRetry } from '../service/client_retries.ts'
import type { PayoutsService } from '../service/payouts_service.ts'
import { redactCredentials } from '../client/redact.ts'

/**
 * What every `payouts:*` command that calls the service shares: the app started, `--json`,
 * the result printed as JSON or for a human, and any error reported in the command's own
 * words with exit code 1, so no script ever reads a failure as success.
 */
export abstract class PayoutsCommand<Result> extends BaseCommand {
  static options: CommandOptions = { startApp: true }

  static getParserOptions(options?: FlagsParserOptions): ParserOptions {
    return readBooleansAsText(this, super.getParserOptions(options))
  }

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
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_INT32) {
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
    const unread = unreadInput(this)
    if (unread !== undefined) this.refuse(unread)
    if (unread !== undefined || !(await this.accepted())) {
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
      this.#reportError(
        describeError(error, redactCredentials(payouts.config.baseUrl)),
        this.failure
      )
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

/**
 * A network failure names the service's address, so a wrong URL or a down service shows; a
 * database error is told without the SQL statement knex puts before its message.
 */
function describeError(error: unknown, baseUrl: string): CommandError {
  const { message, code } = error as { message: string; code?: unknown }
  const described: CommandError = { message: withoutSql(String(message)) }
  if (typeof code === 'string') described.code = code
  if (error instanceof PayoutsNetworkError || error instanceof PayoutsTimeoutError) {
    described.baseUrl = baseUrl
    described.message = `could not reach the Payout Service at ${baseUrl}: ${message}`
  }
  return described
}

/** What a command's parser is built from (`BaseCommand.getParserOptions`). */
export type ParserOptions = ReturnType<typeof BaseCommand.getParserOptions>

/** The largest delay `setTimeout` honours, and the largest id of a ledger table: 2^31 - 1. */
export const MAX_INT32 = 2 ** 31 - 1

/** A boolean flag's value that reads as neither true nor false (`--dry-run=maybe`). */
class UnreadValue {
  constructor(readonly raw: string) {}
}

const TRUE_WORDS = new Set(['', 'true', '1', 'yes'])
const FALSE_WORDS = new Set(['false', '0', 'no'])

/** A boolean flag's value as given: true, false, or an `UnreadValue` to refuse. */
function readBoolean(value: unknown): boolean | UnreadValue {
  if (typeof value === 'boolean') return value
  const text = Array.isArray(value) ? value.join(' ') : String(value)
  if (!Array.isArray(value) && TRUE_WORDS.has(text.toLowerCase())) return true
  if (!Array.isArray(value) && FALSE_WORDS.has(text.toLowerCase())) return false
  return new UnreadValue(text)
}

/**
 * A command's parser options with its boolean flags read as text, then understood: yargs reads
 * `--dry-run=1` or `--dry-run=yes` as false, and the value is lost before the command sees it.
 * Here `--flag`, `=true`, `=1` and `=yes` are true, `=false`, `=0`, `=no` and `--no-flag` false,
 * anything else is refused by `unreadInput`. Arguments belong before the flags (`--force x` is
 * read as a value of `--force`, and refused).
 */
export function readBooleansAsText(
  Command: Pick<typeof BaseCommand, 'flags'>,
  parserOptions: ParserOptions
): ParserOptions {
  const { flagsParserOptions } = parserOptions
  for (const flag of Command.flags) {
    if (flag.type !== 'boolean') continue
    flagsParserOptions.boolean = [flagsParserOptions.boolean]
      .flat()
      .filter((name) => name !== flag.flagName)
    flagsParserOptions.string.push(flag.flagName)
    flagsParserOptions.coerce[flag.flagName] = readBoolean
  }
  return parserOptions
}

/**
 * Why a command cannot act on its input as parsed, in one line: a boolean flag with a value
 * that is neither true nor false, or a positional argument the command does not take.
 */
export function unreadInput(command: BaseCommand): string | undefined {
  const Command = command.constructor as typeof BaseCommand
  for (const flag of Command.flags) {
    const value = (command as unknown as Record<string, unknown>)[flag.name]
    if (value instanceof UnreadValue) {
      return `--${flag.flagName} takes no value, or true or false; not "${value.raw}". Nothing done`
    }
  }
  const extra = (command as unknown as { parsed: { _: unknown[] } }).parsed._
  if (extra.length > 0) {
    return `Unknown argument "${extra[0]}" (flags start with --). Nothing done`
  }
  return undefined
}

/**
 * Refuses a number flag that is not a whole number within `[min, max]` (timers: 1 to
 * `MAX_INT32`, which `setTimeout` would otherwise run as 1 ms); undefined when it is fine.
 */
export function outOfRange(
  flag: string,
  value: number | undefined,
  min: number,
  max: number
): string | undefined {
  if (value === undefined || (Number.isInteger(value) && value >= min && value <= max)) {
    return undefined
  }
  return `--${flag} must be a whole number from ${min} to ${max}, not "${value}". Nothing done`
}

/** A statement knex put before a database error's message (`insert into ... - <error>`). */
const SQL_BEFORE_ERROR =
  /\b(?:select|insert|update|delete|with|create|alter|drop|begin|savepoint|commit|rollback|release)\s[\s\S]* - /i

/** An error's message without any SQL statement in it: a command prints no SQL. */
function withoutSql(message: string) {
  return message.replace(SQL_BEFORE_ERROR, 'the database refused the request: ')
}
