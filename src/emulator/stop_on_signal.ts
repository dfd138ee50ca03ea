/**
 * Runs `stop` once on the first SIGINT or SIGTERM, then exits 0: how the emulator's command
 * line and the demo end on Ctrl-C or a supervisor's signal.
 */
export function stopOnSignal(stop: () => Promise<void>) {
  let stopping = false
  const onSignal = async () => {
    if (stopping) return
    stopping = true
    await stop()
    process.exit(0)
  }
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
}
