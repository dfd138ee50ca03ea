import { LOOPBACK_WEBHOOKS_NOTICE } from '../src/emulator/cli_options.ts'
import { stopOnSignal } from '../src/emulator/stop_on_signal.ts'
import { startDemo } from './demo_runner.ts'

/** `npm run demo`: the emulator and the example app on SQLite, until Ctrl-C. */
const demo = await startDemo({ port: Number(process.env.PORT ?? 3333), writeEnvFile: true })
console.log(
  `\nPayouts demo ready: open ${demo.url}\n(emulator ${demo.emulator.baseUrl}; Ctrl-C stops both)`
)
console.log(LOOPBACK_WEBHOOKS_NOTICE)

stopOnSignal(() => demo.stop())
