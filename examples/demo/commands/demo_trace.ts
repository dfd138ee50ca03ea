import { args, BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'
import { readPayoutTrace, renderPayoutTrace } from '#services/payout_trace'
import { spansDirectory } from '#services/span_file'

/**
 * `node ace demo:trace <payoutId>`: one payout's spans as trees, from the files the demo's
 * processes write (tmp/spans-<PORT>/): its execute and the client's calls in the web process,
 * each webhook received there and the inbox batch of the worker that applied it, with the
 * changes it told.
 */
export default class DemoTrace extends BaseCommand {
  static commandName = 'demo:trace'
  static description = "Print one payout's spans (web process and worker) as a tree"
  static options: CommandOptions = { startApp: true }

  @args.string({ description: 'The payout id (payoutUuid), as the page shows it' })
  declare payoutId: string

  @flags.boolean({ description: 'Also the SQL queries and the HTTP client calls' })
  declare all: boolean

  @flags.boolean({ description: 'Print the trees as JSON' })
  declare json: boolean

  async run() {
    const trace = await readPayoutTrace(this.payoutId, this.all)
    if (this.json) return this.logger.log(JSON.stringify(trace, null, 2))
    this.logger.log(renderPayoutTrace(trace))
    if (trace.traces.length === 0) {
      this.logger.info(`spans are read from ${spansDirectory()}`)
      this.exitCode = 1
    }
  }
}
