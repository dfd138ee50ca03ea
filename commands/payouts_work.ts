import { flags } from '@adonisjs/core/ace'
import type { CommandOptions } from '@adonisjs/core/types/ace'
import { MAX_INT32, SwitchesCommand, unreadInput } from '../src/commands/payouts_command.ts'
import { durationFlag } from '../src/duration.ts'
import type { PayoutsWorker } from '../src/service/worker.ts'
import { safeError } from '../src/safe_error.ts'

/** How long a process past its stop bound may take to close before it is ended (exit 1). */
const EXIT_GRACE_MS = 1000

/**
 * Runs the worker (src/service/worker.ts) until SIGTERM or SIGINT: the inbox, the jobs, the
 * stream and pending notifications, out of the web process (`webhook.processing: 'worker'`).
 * The stop runs in the app's terminating phase, before the providers close Lucid: a stock
 * `bin/console.ts` terminates the app on SIGTERM while the batch in hand is still committing.
 */
/** The shortest pause between reads of an empty inbox. */
const MIN_POLL_MS = 50

export default class PayoutsWork extends SwitchesCommand {
  static commandName = 'payouts:work'
  static description =
    'Process stored deliveries, run the jobs and the stream, until SIGTERM or SIGINT'
  static options: CommandOptions = { startApp: true, staysAlive: true }

  @flags.string({
    description: 'Time between reads of an empty inbox: milliseconds (50 or more), or e.g. "1s"',
  })
  declare pollIntervalMs?: string

  @flags.string({
    description: 'Time a stop may take before the process exits 1: milliseconds, or e.g. "30s"',
  })
  declare stopTimeoutMs?: string

  @flags.array({ description: 'The accounts to serve, repeatable (every account otherwise)' })
  declare account?: string[]

  #workers?: PayoutsWorker[]
  #stopped?: Promise<void>
  #onSignal = () => void this.stop().then(() => this.terminate())

  async run() {
    // Below 50 ms an idle worker spins on its empty inbox.
    const poll = durationFlag('poll-interval-ms', this.pollIntervalMs, MIN_POLL_MS, MAX_INT32)
    const stop = durationFlag('stop-timeout-ms', this.stopTimeoutMs, 1, MAX_INT32)
    const refused = unreadInput(this) ?? poll.refused ?? stop.refused
    if (refused !== undefined) {
      this.logger.error(refused)
      this.exitCode = 1
      return this.terminate()
    }
    const manager = await this.app.container.make('payouts.manager')
    const unknown = this.account?.find((name) => !manager.accounts.includes(name))
    if (unknown !== undefined) {
      this.logger.error(`Unknown account "${unknown}". Use ${manager.accounts.join(', ')}`)
      this.exitCode = 1
      return this.terminate()
    }
    const { PayoutsWorker } = await import('../src/service/worker.ts')
    const logger = await this.app.container.make('logger')
    // One worker per account served: each its own inbox loop, jobs and stream.
    const served = this.account?.length ? [...new Set(this.account)] : manager.accounts
    this.#workers = served.map(
      (name) =>
        new PayoutsWorker({
          service: manager.use(name),
          logger: served.length > 1 ? logger.child({ account: name }) : logger,
          pollIntervalMs: poll.ms,
          stopTimeoutMs: stop.ms,
        })
    )
    // Runs before the providers shut down, whoever terminates the app.
    this.app.terminating(() => this.stop())
    process.once('SIGINT', this.#onSignal)
    process.once('SIGTERM', this.#onSignal)
    // Each account on its own: one that cannot start (no key, a refused key) is reported and
    // left out; the others run. None started: exit 1.
    const started: PayoutsWorker[] = []
    for (const [index, worker] of this.#workers.entries()) {
      try {
        await worker.start()
        started.push(worker)
      } catch (error) {
        const which = served.length > 1 ? ` for account "${served[index]}"` : ''
        // Its service is closed with the app's shutdown (the default one's close would
        // close every account's).
        this.logger.error(`Worker${which} failed to start: ${safeError(error).message}`)
      }
    }
    this.#workers = started
    if (started.length === 0) {
      this.exitCode = 1
      await this.stop()
      return this.terminate()
    }
  }

  /**
   * Stops the worker (on a signal, when the app terminates, or from a test), once. Past its
   * bound the exit code is 1, and the process of `node ace payouts:work` ends within
   * `EXIT_GRACE_MS`: a listener that never returns would keep it alive.
   */
  stop(): Promise<void> {
    this.#stopped ??= this.#stop()
    return this.#stopped
  }

  async #stop() {
    process.off('SIGINT', this.#onSignal)
    process.off('SIGTERM', this.#onSignal)
    const workers = this.#workers ?? []
    this.#workers = undefined
    // All at once: each finishes its batch in hand within the same bound.
    const stopped = await Promise.all(workers.map((worker) => worker.stop()))
    if (stopped.every(Boolean)) return
    this.exitCode = 1
    if (this.kernel.getMainCommand() !== this) return
    process.exitCode = 1
    setTimeout(() => process.exit(1), EXIT_GRACE_MS).unref()
  }
}
