import { stripVTControlCharacters } from 'node:util'
import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions, FlagsParserOptions } from '@adonisjs/core/types/ace'
import { PayoutsNetworkError, PayoutsTimeoutError } from '../client/errors.ts'
import { clientRetries, type ClientRetry } from '../service/client_retries.ts'
import type { PayoutsManager } from '../service/payouts_manager.ts'
import type { PayoutsService } from '../service/payouts_service.ts'
import { redactCredentials } from '../client/redact.ts'

/**
 * A command whose switches (boolean flags) read as meant: `--force wh_1` is the switch on and
 * the argument `wh_1`; `--dry-run=1`, `=yes`, `=true` are true, `=0`, `=no`, `=false` false, and
 * any other value is kept as an `UnreadValue`, for `unreadInput` to refuse.
 */
export abstract class SwitchesCommand extends BaseCommand {
  static getParserOptions(options?: FlagsParserOptions): ParserOptions {
    return switchesAsLists(this, super.getParserOptions(options))
  }

  /** Makes each switch one value (`readSwitches`), then sets the flags and arguments. */
  hydrate() {
    if (!this.hydrated) readSwitches(this.constructor as typeof BaseCommand, this.parsed.flags)
    super.hydrate()
  }
}

/**
 * What every `payouts:*` command that calls the service shares: the app started, `--json`,
 * the result printed as JSON or for a human, and any error reported in the command's own
 * words with exit code 1, so no script ever reads a failure as success.
 */
export abstract class PayoutsCommand<Result> extends SwitchesCommand {
  static options: CommandOptions = { startApp: true }

  @flags.boolean({ description: 'Print JSON for scripts' })
  declare json: boolean

  @flags.string({ description: 'The account in config/payouts.ts (the default account otherwise)' })
  declare account?: string

  /** What failed, printed before the error's message ("Replay failed"). */
  protected abstract failure: string

  /** Calls the service of the account (`--account`, or the default one). */
  protected abstract perform(payouts: PayoutsService, manager: PayoutsManager): Promise<Result>

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
   * A table for `print`, with no colour code when the output has none (piped, redirected,
   * `--no-ansi`): the kernel's colours follow the terminal, but cli-table3 draws its borders
   * dim whatever the stream is.
   */
  protected table() {
    const table = this.ui.table()
    if (this.colors.green('x') !== 'x') return table
    const renderer = table.getRenderer()
    return table.useRenderer({
      getLogs: () => renderer.getLogs(),
      flushLogs: () => renderer.flushLogs(),
      log: (message) => renderer.log(stripVTControlCharacters(message)),
      logError: (message) => renderer.logError(stripVTControlCharacters(message)),
      logUpdate: (message) => renderer.logUpdate(stripVTControlCharacters(message)),
      logUpdatePersist: () => renderer.logUpdatePersist(),
    })
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
    const manager = await this.app.container.make('payouts.manager')
    const payouts = this.#accountOf(manager)
    if (!payouts) {
      this.exitCode = 1
      return
    }
    const announce = (retry: unknown) => this.#announceRetry(retry as ClientRetry)
    clientRetries.subscribe(announce)
    try {
      const result = await this.perform(payouts, manager)
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

  /**
   * The service of `--account`: an account config/payouts.ts does not have is refused (naming
   * the ones it has), never taken for the default one.
   */
  #accountOf(manager: PayoutsManager): PayoutsService | null {
    if (this.account === undefined) return manager
    if (!manager.accounts.includes(this.account)) {
      this.refuse(`Unknown account "${this.account}". Use ${manager.accounts.join(', ')}`)
      return null
    }
    return manager.use(this.account)
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
export interface CommandError {
  message: string
  code?: string
  baseUrl?: string
}

/**
 * A network failure names the service's address, so a wrong URL or a down service shows; a
 * database error is told without the SQL statement knex puts before its message.
 */
export function describeError(error: unknown, baseUrl: string): CommandError {
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

/** A switch's value that reads as neither true nor false (`--dry-run=maybe`): why, in words. */
class UnreadValue {
  constructor(readonly reason: string) {}
}

const TRUE_WORDS = new Set(['', 'true', '1', 'yes'])
const FALSE_WORDS = new Set(['false', '0', 'no'])

/** The names of a command's switches, as typed (`dry-run`). */
function switchNames(Command: Pick<typeof BaseCommand, 'flags'>): string[] {
  return Command.flags.filter((flag) => flag.type === 'boolean').map((flag) => flag.flagName)
}

/**
 * A command's parser options with each switch given to yargs as the list of texts after its
 * `=`, a list that takes no word after the switch: yargs reads a boolean's `=1` or `=yes` as
 * false and the text is lost, and a text flag would take the next word (`--force wh_1`). A
 * negative `narg` stops the list before any word (`greedy-arrays` is off, so `--force=1` keeps
 * its one text): `--force` is `[]`, `--force=1` `['1']`, `--no-force` `[false]`, and
 * `--no-force=1` a list of its own (yargs-parser's `eatArray`; tests/commands/refusals.spec.ts
 * holds it to that). A default stays out of yargs, which would put it in the list of a bare
 * `--force`; `readSwitches` applies it.
 */
export function switchesAsLists(
  Command: Pick<typeof BaseCommand, 'flags'>,
  parserOptions: ParserOptions
): ParserOptions {
  const options = parserOptions.flagsParserOptions as Required<FlagsParserOptions> & {
    narg?: Record<string, number>
  }
  const switches = switchNames(Command)
  options.boolean = [options.boolean].flat().filter((name) => !switches.includes(name))
  options.narg = { ...options.narg }
  for (const name of switches) {
    delete options.default[name]
    options.all.push(`no-${name}`)
    for (const key of [name, `no-${name}`]) {
      options.array.push(key)
      options.string.push(key)
      options.narg[key] = -1
    }
  }
  return parserOptions
}

/**
 * Each switch's lists (`switchesAsLists`) made one value in `given` (the parsed flags): true,
 * false, the flag's default when it is absent, or an `UnreadValue` for a value that is neither
 * true nor false, or for a switch given both as true and as false.
 */
export function readSwitches(
  Command: Pick<typeof BaseCommand, 'flags'>,
  given: Record<string, unknown>
) {
  for (const flag of Command.flags) {
    if (flag.type !== 'boolean') continue
    const name = flag.flagName
    const [on, off] = [given[name], given[`no-${name}`]]
    delete given[`no-${name}`]
    if (on === undefined && off === undefined) {
      if (flag.default !== undefined) given[name] = flag.default
      continue
    }
    const values = [
      ...[on ?? []].flat().map((value) => readSwitch(`--${name}`, value)),
      ...[off ?? []].flat().map((value) => negate(readSwitch(`--no-${name}`, value))),
    ]
    const unread = values.find((value) => value instanceof UnreadValue)
    if (unread !== undefined) given[name] = unread
    else if (values.length === 0) given[name] = true
    else if (values.some((value) => value !== values[0])) {
      given[name] = new UnreadValue(`--${name} is given both as true and as false`)
    } else given[name] = values[0]
  }
}

/** One value given to a switch (`false` from `--no-force`, or the text after `=`). */
function readSwitch(written: string, value: unknown): boolean | UnreadValue {
  if (typeof value === 'boolean') return value
  const text = String(value).toLowerCase()
  if (TRUE_WORDS.has(text)) return true
  if (FALSE_WORDS.has(text)) return false
  return new UnreadValue(`${written} takes no value, or true or false; not "${value}"`)
}

/** The opposite of a switch's value (`--no-force=yes` is false); an `UnreadValue` as it is. */
function negate(value: boolean | UnreadValue) {
  return typeof value === 'boolean' ? !value : value
}

/**
 * Why a command cannot act on its input as parsed, in one line: a switch with a value that is
 * neither true nor false (`readSwitches`), or a positional argument the command does not take.
 */
export function unreadInput(command: BaseCommand): string | undefined {
  const Command = command.constructor as typeof BaseCommand
  for (const flag of Command.flags) {
    const value = (command as unknown as Record<string, unknown>)[flag.name]
    if (value instanceof UnreadValue) return `${value.reason}. Nothing done`
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
