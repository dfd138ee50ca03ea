import { spawn } from 'node:child_process'

/**
 * Another process that keeps one core busy, as a host app's own work would on a 2-core
 * machine; it stops by itself after `seconds` (and when told, or when this process exits).
 */
export function busyCore(seconds: number) {
  const burner = spawn(
    process.execPath,
    ['-e', `const end = Date.now() + ${seconds * 1000}; while (Date.now() < end) {}`],
    { stdio: 'ignore' }
  )
  const stop = () => burner.kill('SIGKILL')
  process.once('exit', stop)
  return {
    stop() {
      process.off('exit', stop)
      stop()
    },
  }
}
