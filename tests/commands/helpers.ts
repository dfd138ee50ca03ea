import { startAppOnEmulator } from '../helpers/http_app.ts'

/** An app on the emulator with ace in raw mode; `run` creates and executes a command. */
export async function setup(
  cleanup: (fn: () => Promise<void>) => void,
  payouts: Parameters<typeof startAppOnEmulator>[1] = {}
) {
  const { emu, app } = await startAppOnEmulator(cleanup, {
    // One refused confirmation is the last: the command's failure shows in one run.
    jobs: { escrowMaxAttempts: 1 },
    ...payouts,
  })
  const ace = await app.app.container.make('ace')
  ace.ui.switchMode('raw')
  const run = async (Command: any, args: string[] = []) => {
    const command = await ace.create(Command, args)
    await command.exec()
    return command
  }
  return { emu, app, run }
}

/** The JSON the command printed last (the raw-mode logger is shared by the kernel). */
export function jsonOf(command: any) {
  const logs = command.logger.getLogs().map((log: any) => log.message as string)
  for (const message of logs.toReversed()) {
    try {
      return JSON.parse(message)
    } catch {}
  }
  throw new Error('the command printed no JSON')
}
