/**
 * `node ace payouts:work` in the worker suite's host app, run through AdonisJS's own ace
 * process (console environment, app started by the kernel). Every app event it fires is
 * appended to a JSONL file; with `pauseFirstBatch`, its first batch holds its transaction
 * open (rows claimed, nothing committed) until SIGTERM arrives or the parent says `go`.
 * Listeners may be made slow or hang, batches forced row by row, or the process killed
 * right after its first COMMIT (see `ChildOptions`). With `transmit`, it registers the payout
 * channels as an app's start file would (it serves no subscriber); with `otelSpansFile`, it
 * traces itself through the plugin's OpenTelemetry instrumentation into that file.
 */
import 'reflect-metadata'
import { appendFileSync } from 'node:fs'
import { setTimeout } from 'node:timers/promises'
import { ListLoader } from '@adonisjs/core/ace'
import { defineConfig as defineLoggerConfig } from '@adonisjs/core/logger'
import PayoutsWork from '../../commands/payouts_work.ts'
import { BASE_URL } from '../helpers/app.ts'
import { connectionConfig } from '../helpers/database.ts'
import { hostAppIgnitor } from '../helpers/host_app.ts'
import { payoutsConfig, transmitConfig, type ChildOptions } from './helpers.ts'
import { partsOf } from '../../src/service/payouts_service.ts'

const options: ChildOptions = JSON.parse(process.env.WORKER_TEST!)
process.on('disconnect', () => process.exit(1))
// Before the app: as an app's otel.ts, imported first in bin/console.ts.
if (options.otelSpansFile) {
  const { traceToFile } = await import('./child_otel.ts')
  traceToFile(options.otelSpansFile)
}
// The IPC channel alone does not keep the process alive: it exits when the command is done.
process.channel?.unref()

/** Resolves when the first batch may go on. */
function released(): Promise<void> {
  if (options.pauseFirstBatch === 'sigterm') {
    return new Promise((resolve) => process.once('SIGTERM', () => resolve()))
  }
  return new Promise((resolve) =>
    process.on('message', (message: { type: string }) => message.type === 'go' && resolve())
  )
}

const ignitor = hostAppIgnitor({
  root: BASE_URL,
  connection: connectionConfig('worker'),
  transmit: Boolean(options.transmit),
  config: {
    logger: defineLoggerConfig({
      default: 'app',
      loggers: { app: { enabled: true, level: 'info' } },
    }),
    ...(options.transmit ? { transmit: await transmitConfig(options) } : {}),
  },
  payouts: payoutsConfig(options),
})

await ignitor
  .ace()
  .configure(async (app) => {
    const ace = await app.container.make('ace')
    ace.addLoader(new ListLoader([PayoutsWork]))
    await app.ready(async () => {
      const payouts = await app.container.make('payouts.manager')
      // As an app's start file does in every process (no routes: nobody subscribes here).
      if (options.transmit) payouts.registerChannels(await app.container.make('transmit'))
      const emitter = await app.container.make('emitter')
      emitter.onAny((name, data: any) => {
        if (!options.eventsFile || !String(name).startsWith('payouts:')) return
        const line = {
          name: String(name),
          payoutId: data?.payoutId ?? null,
          eventKey: data?.eventKey ?? null,
          eventId: data?.eventId ?? null,
          pid: process.pid,
          at: Date.now(),
        }
        appendFileSync(options.eventsFile, JSON.stringify(line) + '\n')
      })
      let hung = false
      emitter.on('payouts:created', async () => {
        if (options.hangFirstListener && !hung) {
          hung = true
          await new Promise(() => {})
        }
        if (options.listenerDelayMs) await setTimeout(options.listenerDelayMs)
      })
      const { inbox } = await partsOf(payouts)
      if (options.rowByRow) {
        inbox.processDueInTransaction = () => Promise.reject(new Error('forced row by row'))
      }
      if (options.killAfterCommit) {
        const processDue = inbox.processDueInTransaction.bind(inbox)
        inbox.processDueInTransaction = (now, limit, work) =>
          processDue(now, limit, (trx, rows) => {
            // Registered before the ledger's own: the process dies right after the COMMIT,
            // before any change is told.
            trx.after('commit', () => void process.kill(process.pid, 'SIGKILL'))
            return work(trx, rows)
          })
      }
      if (!options.pauseFirstBatch) return
      const processDue = inbox.processDueInTransaction.bind(inbox)
      let paused = false
      inbox.processDueInTransaction = (now, limit, work) =>
        processDue(now, limit, async (trx, rows) => {
          if (!paused) {
            paused = true
            const go = released()
            process.send!({ type: 'in-batch', rows: rows.length })
            await go
          }
          return work(trx, rows)
        })
    })
  })
  .handle(['payouts:work', '--poll-interval-ms=100'])
