import { PayoutsEmulator } from '../src/emulator/main.ts'
import { failToParent, serveParent } from './ipc.ts'

/** Child process: the emulator with rate limits off, for the client-overhead comparison. */
async function main() {
  const emulator = await PayoutsEmulator.start({ port: 0, rateLimits: false })
  serveParent(
    {
      baseUrl: emulator.baseUrl,
      apiKey: emulator.apiKey,
      paymentMethodId: emulator.admin.accountPaymentMethodId,
    },
    {},
    () => emulator.close()
  )
}

main().catch(failToParent)
