import type { CommandOptions } from '@adonisjs/core/types/ace'
import { SwitchesCommand, unreadInput } from '../src/commands/payouts_command.ts'
import {
  EMULATOR_FLAGS,
  EmulatorFlagError,
  flagHelp,
  resolveEmulatorFlags,
  startEmulatorFromFlags,
} from '../src/emulator/cli_options.ts'
import type { PayoutsEmulator } from '../src/emulator/emulator.ts'

/**
 * Runs the local emulator of the Payout Service until SIGINT or SIGTERM; its flags and banner
 * are those of `svc-payouts-emulator` (src/emulator/cli_options.ts). A bad value (a switch's
 * too: `--strict-webhooks=maybe`) or a stray argument exits 2 and starts nothing, as there.
 */
export default class PayoutsEmulatorCommand extends SwitchesCommand {
  static commandName = 'payouts:emulator'
  static description = 'Start a local emulator of the Payout Service (sandbox, in memory)'
  static options: CommandOptions = { startApp: false, staysAlive: true }

  static {
    for (const flag of EMULATOR_FLAGS) {
      this.defineFlag(flag.key, {
        type: flag.type,
        flagName: flag.name,
        description: flagHelp(flag),
      })
    }
  }

  #emulator?: PayoutsEmulator
  #onSignal = () => this.stop().then(() => this.terminate())

  async run() {
    let values
    try {
      const unread = unreadInput(this)
      if (unread !== undefined) throw new EmulatorFlagError(unread)
      values = resolveEmulatorFlags(this.parsed.flags)
    } catch (error) {
      if (!(error instanceof EmulatorFlagError)) throw error
      this.logger.error(error.message)
      this.exitCode = 2
      return this.terminate()
    }
    const { emulator, banner } = await startEmulatorFromFlags(values)
    this.#emulator = emulator
    for (const line of banner) this.logger.log(line)
    process.once('SIGINT', this.#onSignal)
    process.once('SIGTERM', this.#onSignal)
  }

  /** Stops the emulator (on a signal, or from a test). */
  async stop() {
    process.off('SIGINT', this.#onSignal)
    process.off('SIGTERM', this.#onSignal)
    await this.#emulator?.close()
    this.#emulator = undefined
  }
}
