import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'

/** Prints the service's coverage matrix: fiat currencies, rails, bounds, tokens and chains. */
export default class PayoutsCoverage extends BaseCommand {
  static commandName = 'payouts:coverage'
  static description =
    'Show the currencies, rails, amount bounds, tokens and chains the service covers'
  static options: CommandOptions = { startApp: true }

  @flags.boolean({ description: 'Print JSON for scripts' })
  declare json: boolean

  async run() {
    const payouts = await this.app.container.make('payouts.manager')
    try {
      const coverage = await payouts.client.getCoverage()
      if (this.json) {
        this.logger.log(JSON.stringify(coverage))
        return
      }
      const table = this.ui.table()
      table.head(['Code', 'Name', 'Decimals', 'Onramp', 'Offramp', 'Min', 'Max', 'Rails'])
      for (const fiat of coverage.fiat) {
        table.row([
          fiat.code,
          fiat.name ?? '',
          String(fiat.decimals),
          fiat.onramp ? 'yes' : 'no',
          fiat.offramp ? 'yes' : 'no',
          fiat.minAmount === undefined ? '-' : String(fiat.minAmount),
          fiat.maxAmount === undefined ? '-' : String(fiat.maxAmount),
          fiat.rails.map((rail) => rail.code).join(', '),
        ])
      }
      table.render()
      this.logger.log(`Tokens: ${coverage.wallet.tokens.join(', ')}`)
      this.logger.log(`Chains: ${coverage.wallet.chains.map((chain) => chain.code).join(', ')}`)
    } catch (error) {
      this.logger.error(`Could not read the coverage matrix: ${(error as Error).message}`)
      this.exitCode = 1
    }
  }
}
