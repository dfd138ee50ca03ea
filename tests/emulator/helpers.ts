import { createHmac } from 'node:crypto'
import { createServer, type IncomingHttpHeaders, type RequestListener } from 'node:http'
import type { AddressInfo } from 'node:net'
import { request, type WebSocket } from 'undici'
import { PayoutsClient, type PayoutsClientOptions } from '../../src/client/main.ts'
import { PayoutsEmulator, type EmulatorOptions } from '../../src/emulator/main.ts'

/**
 * Starts an emulator on a manual clock, loopback webhook targets allowed (the tests'
 * receivers listen on 127.0.0.1), and stops it in the test's cleanup.
 */
export async function startEmulator(
  cleanup: (fn: () => Promise<void>) => void,
  options: EmulatorOptions = {}
) {
  const emu = await PayoutsEmulator.start({
    port: 0,
    clock: { mode: 'manual' },
    allowInsecureWebhooks: true,
    ...options,
  })
  cleanup(() => emu.close())
  return emu
}

/**
 * Client options under which an execute's answer can be lost (`loseAnswer`): the client gives
 * up after 400 ms, and does not retry. Long enough that an answer that is not held back comes
 * in time on a machine busy with the rest of the suite; 100 ms was not.
 */
export const LOSING_CLIENT = { timeoutMs: 400, retry: { maxRetries: 0 } }

/**
 * An execute whose answer is lost after the service made the payout: the service holds the
 * request past the client's timeout (`LOSING_CLIENT`), then makes the payout, which this
 * waits for (5 s at most) before it lets the service answer at once again.
 */
export async function loseAnswer(emu: PayoutsEmulator, send: () => Promise<unknown>) {
  const before = emu.admin.payouts().length
  emu.admin.setFaults({ processingDelayMs: LOSING_CLIENT.timeoutMs * 3 })
  const outcome = await send().then(
    () => 'answered',
    () => 'lost'
  )
  if (outcome !== 'lost') throw new Error('the answer was not lost')
  const until = Date.now() + 5000
  while (emu.admin.payouts().length === before) {
    if (Date.now() > until) throw new Error('the service never made the payout')
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  emu.admin.setFaults({})
}

/** Raw HTTP against the emulator: no client, so the wire format itself is checked. */
export async function api(
  emu: PayoutsEmulator,
  method: string,
  path: string,
  options: {
    body?: unknown
    raw?: string
    key?: string | null
    headers?: Record<string, string>
  } = {}
) {
  const headers: Record<string, string> = { ...options.headers }
  const key = options.key === undefined ? emu.apiKey : options.key
  if (key) headers.authorization = `Bearer ${key}`
  let body: string | undefined = options.raw
  if (options.body !== undefined) body = JSON.stringify(options.body)
  if (body !== undefined) headers['content-type'] = 'application/json'
  const response = await request(`${emu.baseUrl}${path}`, { method: method as any, headers, body })
  const text = await response.body.text()
  let json: any
  try {
    json = text ? JSON.parse(text) : undefined
  } catch {
    json = undefined
  }
  return { status: response.statusCode, headers: response.headers, json, text }
}

/**
 * Execute bodies of 100 for one freshly seeded recipient: fiat-to-fiat (USD from the
 * account's payment method) and stablecoin-to-fiat (USDC from the given wallet), both to MXN.
 */
export function executeBodies(emu: PayoutsEmulator, walletAddress = '0x' + '9'.repeat(40)) {
  const recipient = emu.admin.seedRecipient()
  const fiat = {
    fromCurrency: 'USD',
    toCurrency: 'MXN',
    amount: 100,
    recipientId: recipient.id,
    userPaymentMethodId: emu.admin.accountPaymentMethodId,
  }
  const stable = {
    fromCurrency: 'USDC',
    toCurrency: 'MXN',
    amount: 100,
    recipientId: recipient.id,
    walletAddress,
  }
  return { recipient, fiat, stable }
}

/** A fiat-to-fiat execute body for a freshly seeded recipient. */
export function fiatBody(emu: PayoutsEmulator, overrides: Record<string, unknown> = {}) {
  return { ...executeBodies(emu).fiat, ...overrides }
}

/**
 * A client of the emulator (or of any test server, given its key and URL) without the
 * client-side rate limiter, closed in the test's cleanup.
 */
export function testClient(
  cleanup: (fn: () => Promise<void>) => void,
  emu: { apiKey: string; baseUrl: string },
  options: Partial<PayoutsClientOptions> = {}
) {
  const client = new PayoutsClient({
    apiKey: emu.apiKey,
    baseUrl: emu.baseUrl,
    rateLimiter: false,
    ...options,
  })
  cleanup(() => client.close())
  return client
}

/** A stablecoin-to-fiat execute body: USDC from a wallet instead of an account payment method. */
export function stablecoinBody(emu: PayoutsEmulator, overrides: Record<string, unknown> = {}) {
  return fiatBody(emu, {
    fromCurrency: 'USDC',
    walletAddress: '0x' + '3'.repeat(40),
    userPaymentMethodId: undefined,
    ...overrides,
  })
}

/** POST /rfq/execute with the given body, by default a fresh fiat-to-fiat one. */
export function execute(
  emu: PayoutsEmulator,
  body: unknown = fiatBody(emu),
  options: Omit<Parameters<typeof api>[3], 'body'> = {}
) {
  return api(emu, 'POST', '/rfq/execute', { ...options, body })
}

/** Subscribes a webhook URL to the given events (payout.created unless told). */
export function subscribe(
  emu: PayoutsEmulator,
  url: string,
  events: string[] = ['payout.created']
) {
  return api(emu, 'POST', '/webhooks/subscriptions', { body: { url, events } })
}

/** An emulator with a local receiver subscribed to payout.created. */
export async function startSubscribed(
  cleanup: (fn: () => Promise<void>) => void,
  options: EmulatorOptions = {},
  statuses?: number[]
) {
  const emu = await startEmulator(cleanup, options)
  const receiver = await startReceiver(cleanup, statuses)
  const subscription = await subscribe(emu, receiver.url)
  return { emu, receiver, subscription }
}

/** A local HTTP server on a free port, closed in the test's cleanup; returns its /hooks URL. */
export async function listenLocally(
  cleanup: (fn: () => Promise<void>) => void,
  handler: RequestListener
) {
  const server = createServer(handler)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  cleanup(async () => {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  })
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`
}

export interface Received {
  headers: IncomingHttpHeaders
  raw: Buffer
}

/** A real local webhook receiver answering with the scripted statuses. */
export async function startReceiver(
  cleanup: (fn: () => Promise<void>) => void,
  statuses: number[] | ((n: number) => number) = [200]
) {
  const received: Received[] = []
  const url = await listenLocally(cleanup, (req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      received.push({ headers: req.headers, raw: Buffer.concat(chunks) })
      const n = received.length
      const status =
        typeof statuses === 'function' ? statuses(n) : (statuses[n - 1] ?? statuses.at(-1)!)
      res.writeHead(status).end()
    })
  })
  return { url, received }
}

/** HMAC-SHA256 of `t.` + raw bytes, computed independently of the package. */
export function independentSignature(secret: string, t: string, raw: Buffer) {
  return createHmac('sha256', secret).update(`${t}.`).update(raw).digest('hex')
}

/** Resolves once the socket is open. */
export function opened(socket: WebSocket) {
  return new Promise((resolve) => socket.addEventListener('open', resolve, { once: true }))
}

/** Resolves with the code the socket is closed with. */
export function closeCode(socket: WebSocket) {
  return new Promise<number>((resolve) => socket.addEventListener('close', (e) => resolve(e.code)))
}

/** Polls until the check holds, failing after the timeout. */
export async function waitFor(check: () => boolean, timeoutMs = 2000) {
  const started = Date.now()
  while (!check()) {
    if (Date.now() - started > timeoutMs) throw new Error('condition not met in time')
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}
