#!/usr/bin/env node
import { parseArgs } from 'node:util'
import { PayoutsEmulator } from './main.ts'
import { stopOnSignal } from './stop_on_signal.ts'

/**
 * `svc-payouts-emulator [--port 4010] [--host 127.0.0.1] [--scale 1] [--step-ms 2000]
 * [--strict-webhooks]`: runs the emulator until SIGINT or SIGTERM. Loopback webhook delivery
 * is on unless `--strict-webhooks`.
 */
const { values } = parseArgs({
  options: {
    'port': { type: 'string', default: process.env.PAYOUTS_EMULATOR_PORT ?? '4010' },
    'host': { type: 'string', default: process.env.PAYOUTS_EMULATOR_HOST ?? '127.0.0.1' },
    'scale': { type: 'string', default: '1' },
    'step-ms': { type: 'string', default: '2000' },
    'api-key': { type: 'string', default: process.env.PAYOUTS_EMULATOR_API_KEY },
    'strict-webhooks': { type: 'boolean', default: false },
  },
})

const scale = Number(values.scale)
const emulator = await PayoutsEmulator.start({
  port: Number(values.port),
  host: values.host,
  clock: scale === 1 ? { mode: 'real' } : { mode: 'scaled', scale },
  stepIntervalMs: Number(values['step-ms']),
  apiKey: values['api-key'],
  allowInsecureWebhooks: !values['strict-webhooks'],
})
console.log(`Payouts emulator listening on ${emulator.baseUrl}`)
console.log(`API key: ${emulator.apiKey}`)
if (!values['strict-webhooks']) console.log(PayoutsEmulator.LOOPBACK_WEBHOOKS_NOTICE)

stopOnSignal(() => emulator.close())
