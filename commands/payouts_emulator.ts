import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'

/** Runs the local emulator of the Payout Service until SIGINT or SIGTERM. */
export default class PayoutsEmulatorCommand extends BaseCommand {
  static commandName = 'payouts:emulator'
  static description = 'Start a local emulator of the Payout Service (sandbox, in memory)'
  static options: CommandOptions = { startApp: false, staysAlive: true }

  @flags.number({ description: 'Port to listen on', default: 4010 })
  declare port: number

  @flags.string({ description: 'Host to bind', default: '127.0.0.1' })
  declare host: string

  @flags.number({ description: 'Emulated clock speed (1 = real time)', default: 1 })
  declare scale: number

  @flags.boolean({ description: 'Refuse loopback webhook URLs, as the service does' })
  declare strictWebhooks: boolean

  async run() {
    const { PayoutsEmulator } = await import('../src/emulator/main.ts')
    const emulator = await PayoutsEmulator.start({
      port: this.port,
      host: this.host,
      clock: this.scale === 1 ? { mode: 'real' } : { mode: 'scaled', scale: this.scale },
      allowInsecureWebhooks: !this.strictWebhooks,
    })
    this.logger.success(`Payouts emulator listening on ${emulator.baseUrl}`)
    this.logger.log(`API key: ${emulator.apiKey}`)
    if (!this.strictWebhooks) this.logger.log(PayoutsEmulator.LOOPBACK_WEBHOOKS_NOTICE)
    const stop = async () => {
      await emulator.close()
      await this.terminate()
    }
    process.once('SIGINT', stop)
    process.once('SIGTERM', stop)
  }
}
