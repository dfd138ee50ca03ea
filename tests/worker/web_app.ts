/**
 * The web process of the worker suite: the host app served on loopback with
 * `webhook.processing: 'worker'`, started the AdonisJS way (its `ready` hooks run). It
 * answers `idle` with the inbox's states once any processing it started has ended,
 * `execute` by executing the bodies it is given, one after another, through the plugin, and
 * `apply` by applying an observation to the ledger. With `transmit`, it serves Transmit and
 * registers the payout channels (the relay follows the ledger when `transmit.relay` is on).
 */
import 'reflect-metadata'
import { defineConfig as defineLoggerConfig } from '@adonisjs/core/logger'
import { WebhookDelivery } from '../../src/models/main.ts'
import { BASE_URL } from '../helpers/app.ts'
import { connectionConfig } from '../helpers/database.ts'
import { serveHostApp } from '../helpers/host_app.ts'
import { payoutsConfig, registerChannels, transmitConfig, type ChildOptions } from './helpers.ts'
import { partsOf } from '../../src/service/payouts_service.ts'

const options: ChildOptions = JSON.parse(process.env.WORKER_TEST!)
process.on('disconnect', () => process.exit(1))

const host = await serveHostApp({
  root: BASE_URL,
  connection: connectionConfig('worker'),
  transmit: Boolean(options.transmit),
  config: {
    logger: defineLoggerConfig({
      default: 'app',
      loggers: { app: { enabled: true, level: 'error' } },
    }),
    ...(options.transmit ? { transmit: await transmitConfig(options) } : {}),
  },
  payouts: payoutsConfig(options),
  setup: options.transmit ? ({ app, payouts }) => registerChannels(app, payouts) : undefined,
})

/** Executes payouts one after another through the plugin; answers how many failed, and why. */
async function executeAll(bodies: Array<Record<string, unknown>>) {
  const errors: string[] = []
  for (const body of bodies) {
    try {
      await host.payouts.execute(body as any)
    } catch (error) {
      errors.push((error as Error).message)
    }
  }
  process.send!({ type: 'executed', count: bodies.length, errors })
}

process.on('message', async (message: { type: string; bodies?: any[]; observation?: any }) => {
  if (message.type === 'execute') return executeAll(message.bodies!)
  if (message.type === 'apply') {
    const { ledger } = await partsOf(host.payouts)
    const result = await ledger.apply(message.observation)
    return process.send!({
      type: 'applied',
      changed: result.changed,
      ownerAttached: result.ownerAttached,
    })
  }
  if (message.type !== 'idle') return
  const { processor } = await partsOf(host.payouts)
  await processor.idle()
  const rows = await WebhookDelivery.query().select('state')
  const states: Record<string, number> = {}
  for (const row of rows) states[row.state] = (states[row.state] ?? 0) + 1
  process.send!({ type: 'idle', states })
})
process.once('SIGTERM', async () => {
  await host.close()
  process.exit(0)
})
process.send!({ type: 'ready', url: host.url })
