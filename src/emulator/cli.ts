#!/usr/bin/env node
import {
  EmulatorFlagError,
  emulatorUsage,
  parseEmulatorArgs,
  startEmulatorFromFlags,
} from './cli_options.ts'
import { stopOnSignal } from './stop_on_signal.ts'

/**
 * `svc-payouts-emulator [options]` (see `--help`): runs the emulator until SIGINT or SIGTERM.
 * An unknown flag or a bad value prints one line on stderr and exits 2.
 */
let parsed: ReturnType<typeof parseEmulatorArgs>
try {
  parsed = parseEmulatorArgs(process.argv.slice(2))
} catch (error) {
  if (!(error instanceof EmulatorFlagError)) throw error
  process.stderr.write(`svc-payouts-emulator: ${error.message} (see --help)\n`)
  process.exit(2)
}

if (parsed.help) {
  process.stdout.write(emulatorUsage())
} else {
  const { emulator, banner } = await startEmulatorFromFlags(parsed.values)
  console.log(banner.join('\n'))
  stopOnSignal(() => emulator.close())
}
