import { BaseCommand, flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'
import type { PayoutsWorker } from '../src/service/worker.ts'

/**
 * Runs the worker (src/service/worker.ts) until SIGTERM or SIGINT: the inbox, the jobs, the
 * stream and pending notifications, out of the web process (`webhook.processing: 'worker'`).
 */
export default class PayoutsWork extends BaseCommand {
  static commandName = 'payouts:work'
  static description =
    'Process stored deliveries, run the jobs and the stream, until SIGTERM or SIGINT'
  static options: CommandOptions = { startApp: true, staysAlive: true }

  @flags.number({ description: 'Milliseconds between reads of an empty inbox' })
  declare pollIntervalMs?: number

  @flags.number({ description: 'Milliseconds a stop may take before the process gives up' })
  declare stopTimeoutMs?: number

  #worker?: PayoutsWorker
  #onSignal = () => void this.stop().then(() => this.terminate())

  async run() {
    const { PayoutsWorker } = await import('../src/service/worker.ts')
    this.#worker = new PayoutsWorker({
      service: await this.app.container.make('payouts.manager'),
      logger: await this.app.container.make('logger'),
      pollIntervalMs: this.pollIntervalMs,
      stopTimeoutMs: this.stopTimeoutMs,
    })
    process.once('SIGINT', this.#onSignal)
    process.once('SIGTERM', this.#onSignal)
    try {
      await this.#worker.start()
    } catch (error) {
      this.logger.error(`Worker failed to start: ${(error as Error).message}`)
      this.exitCode = 1
      await this.stop()
      return this.terminate()
    }
  }

  /** Stops the worker (on a signal, or from a test); exit code 1 when it overran its bound. */
  async stop() {
    process.off('SIGINT', this.#onSignal)
    process.off('SIGTERM', this.#onSignal)
    const worker = this.#worker
    this.#worker = undefined
    if (worker && !(await worker.stop())) this.exitCode = 1
  }
}
