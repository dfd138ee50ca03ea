import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Dispatcher } from 'undici'
import { PayoutsClient } from '../client/main.ts'
import type { PayoutsConfig } from '../define_config.ts'
import type { PayoutsConnection } from '../service/connection.ts'
import { E_PAYOUTS_FAKE } from '../errors.ts'
import { PayoutsEmulator } from '../emulator/emulator.ts'
import type { FaultConfig } from '../emulator/faults.ts'
import { listenInProcess } from '../emulator/in_process.ts'
import { DEFAULT_ACCOUNT } from '../emulator/state.ts'
import { WEBHOOK_EVENT_TYPES } from '../schemas/common.ts'

/** What `payouts.fake()` accepts. */
export interface PayoutsFakeOptions {
  /** Faults from the start (the emulator's; change them later with `fake.faults()`). */
  faults?: FaultConfig
  /** Seed of the fault PRNG and of the emulator's stable ids (reproducible runs). */
  seed?: number
  /** Emulated time between two lifecycle steps when `advance()` drives them (2000 ms). */
  stepIntervalMs?: number
  /** Emulated time before automatic detection sees an escrow deposit (30 s). */
  escrowDetectionDelayMs?: number
  /**
   * Real milliseconds the client waits for an answer before it retries (2000 ms; the
   * configured `timeoutMs` is for the real service). Retries do not wait between attempts.
   */
  timeoutMs?: number
}

/** What the fake needs from the app and the service it is bound to. */
export interface FakeBinding {
  config: PayoutsConfig
  /** The app's HTTP server (`server` in the container): deliveries go through it. */
  httpServer?: () => Promise<{
    boot(): Promise<void>
    handle(req: IncomingMessage, res: ServerResponse): unknown
  }>
  /** Processes every stored delivery now (the service's `drainInbox`). */
  drainInbox: () => Promise<unknown>
  /** Resolves once the deliveries stored so far were told (`payouts:webhook_received`). */
  deliveriesTold?: () => Promise<void>
  /**
   * Puts the service's real connection back, as `payouts.restore()` does, if the fake whose
   * connection this is still stands in for it (`await using`).
   */
  restore?: (connection: PayoutsConnection) => Promise<void>
}

/** The host of the fake's own subscription: a reserved name, reached in-process only. */
const FAKE_APP_ORIGIN = 'https://app.payouts-fake.invalid'

/**
 * Webhook POSTs into the app's in-process server whatever their URL's scheme and host: plain
 * HTTP over the local socket (no TLS, no DNS); the Host header is still the URL's host.
 */
function intoTheApp(app: Dispatcher): Dispatcher {
  return app.compose((dispatch) => (options, handler) => {
    const { host } = new URL(String(options.origin))
    return dispatch({ ...options, origin: `http://${host}` }, handler)
  })
}

/** What `startFake` makes: the parts of a `PayoutsFake`, its binding aside. */
export interface FakeParts {
  emulator: PayoutsEmulator
  client: PayoutsClient
  webhookSecret: string
  closeApp: () => Promise<void>
}

/**
 * The start-up of `PayoutsFake.start`: the app's server served on an in-process socket of
 * its own, the in-process emulator whose webhooks go there, and the client that reaches the
 * emulator. A start-up that fails closes the app's socket again.
 */
export async function startFake(
  binding: FakeBinding,
  options: PayoutsFakeOptions = {}
): Promise<FakeParts> {
  const { config } = binding
  if (!binding.httpServer) {
    throw new E_PAYOUTS_FAKE([
      'the app has no HTTP server binding: payouts.fake() delivers webhooks through it',
    ])
  }
  const httpServer = await binding.httpServer()
  // The app's server boots (commits its routes) at the first delivery, not before: a test
  // may still register routes after faking.
  const appServer = createServer((req, res) => {
    httpServer
      .boot()
      .then(() => httpServer.handle(req, res))
      .catch((error) => {
        if (!res.headersSent) res.writeHead(500)
        res.end(String(error))
      })
  })
  const app = await listenInProcess(appServer, 'app')
  const closeApp = async () => {
    appServer.closeAllConnections()
    await new Promise((resolve) => appServer.close(resolve))
    await app.close()
  }
  try {
    // The service's rules, unrelaxed: the app's calls are refused as the service refuses
    // them (an http, localhost or private webhook URL included). Only the transport is
    // in-process, and no name is resolved: every webhook host stands for the app.
    const emulator = await PayoutsEmulator.start({
      inProcess: true,
      clock: { mode: 'manual' },
      seed: options.seed,
      stepIntervalMs: options.stepIntervalMs,
      escrowDetectionDelayMs: options.escrowDetectionDelayMs,
      rateLimits: false,
      lookup: async () => [],
      webhookDispatcher: intoTheApp(app.dispatcher),
    })
    if (options.faults) emulator.admin.setFaults(options.faults, options.seed)
    // The fake's own subscription is made inside the emulator, not through the API the app
    // calls, with a URL the rule accepts; its POSTs reach the app's route in-process.
    // Without the ledger the app has no inbox to deliver to: nothing is subscribed.
    const subscription = config.ledger.enabled
      ? emulator.webhooks.createSubscription(DEFAULT_ACCOUNT, {
          url: `${FAKE_APP_ORIGIN}${config.webhook.path}`,
          events: [...WEBHOOK_EVENT_TYPES],
          label: 'payouts.fake()',
        })
      : null
    // The app's client as configured: what it refuses before sending, it refuses here too.
    const client = new PayoutsClient({
      apiKey: emulator.apiKey,
      baseUrl: emulator.baseUrl,
      environment: 'sandbox',
      timeoutMs: options.timeoutMs ?? 2000,
      retry: { ...config.retry, baseDelayMs: 0, jitter: 0 },
      rateLimiter: false,
      paths: config.paths,
      allowInsecureLoopbackWebhooks: config.allowInsecureLoopbackWebhooks,
      dispatcher: emulator.dispatcher,
      sleep: () => new Promise((resolve) => setImmediate(resolve)),
    })
    return { emulator, client, webhookSecret: subscription?.secret ?? '', closeApp }
  } catch (error) {
    await closeApp()
    throw error
  }
}
