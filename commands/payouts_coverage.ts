import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

type Result = Awaited<ReturnType<PayoutsService['client']['getCoverage']>>

/** Prints the service's coverage matrix: fiat currencies, rails, bounds, tokens and chains. */
export default class PayoutsCoverage extends PayoutsCommand<Result> {
  static commandName = 'payouts:coverage'
  static description =
    'Show the currencies, rails, amount bounds, tokens and chains the service covers'

  protected failure = 'Could not read the coverage matrix'

  protected perform(payouts: PayoutsService) {
    return payouts.client.getCoverage()
  }

  protected print(coverage: Result) {
    const table = this.table()
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
  }
}
