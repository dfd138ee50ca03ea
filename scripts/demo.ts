import { LOOPBACK_WEBHOOKS_NOTICE } from '../src/emulator/cli_options.ts'
import { stopOnSignal } from '../src/emulator/stop_on_signal.ts'
import { freePort, startDemo } from './demo_runner.ts'

/** `npm run demo`: the emulator, the example app and its worker on SQLite, until Ctrl-C. */
const demo = await startDemo({
  port: Number(process.env.PORT ?? 3333),
  // Prometheus's usual port for the worker's exporter, unless taken.
  workerMetricsPort: await freePort(Number(process.env.WORKER_METRICS_PORT ?? 9464)),
  writeEnvFile: true,
})
console.log(
  [
    `\nPayouts demo ready: open ${demo.url}`,
    `(the web process stores deliveries; a worker, node ace payouts:work, processes them;`,
    ` emulator ${demo.emulator.baseUrl}; Ctrl-C stops all three)`,
    `OpenTelemetry: metrics at ${demo.metricsUrl} (web) and ${demo.workerMetricsUrl} (worker);`,
    ` a payout's spans: its Trace button, or cd examples/demo && node ace demo:trace <payout id>`,
  ].join('\n')
)
console.log(LOOPBACK_WEBHOOKS_NOTICE)

stopOnSignal(() => demo.stop())
