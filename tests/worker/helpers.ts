/**
 * The worker suite's two kinds of child process, run as an operator runs them: the web
 * process (tests/worker/web_app.ts, `webhook.processing: 'worker'`) and `node ace
 * payouts:work` (tests/worker/worker_app.ts), on one database.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { randomUUID } from 'node:crypto'
import type { ApplicationService } from '@adonisjs/core/types'
import { Transmit } from '@adonisjs/transmit-client'
import { EventSource, request } from 'undici'
import type { PayoutsService } from '../../src/service/payouts_service.ts'
import { signPayload } from '../../src/signature/main.ts'
import { TEST_API_KEY } from '../helpers/app.ts'
import { TS_HOOKS } from '../helpers/ts_hooks.ts'

export const SECRET = 'whsec_worker_suite'

/** What the parent hands a child (as JSON in WORKER_TEST). */
export interface ChildOptions {
  prefix: string
  /** Inbox rows per batch of the worker. */
  batchSize: number
  /** JSONL file the worker appends each app event to. */
  eventsFile?: string
  /**
   * The worker holds its first batch's transaction open (rows claimed, nothing committed)
   * until SIGTERM reaches it, or until the parent says `go`.
   */
  pauseFirstBatch?: 'sigterm' | 'go'
  /** The service's URL (an emulator the parent runs); none by default. */
  baseUrl?: string
  /** Every `payouts:created` listener run takes this long (an e-mail, an HTTP call). */
  listenerDelayMs?: number
  /** The worker's first `payouts:created` listener run never ends (until listenerTimeoutMs). */
  hangFirstListener?: boolean
  /** `events.listenerTimeoutMs`, `events.notifyLeaseMs`, `webhook.processingLeaseMs`. */
  listenerTimeoutMs?: number
  notifyLeaseMs?: number
  processingLeaseMs?: number
  /** Every batch the worker claims in one transaction fails: it goes row by row, under leases. */
  rowByRow?: boolean
  /** The worker kills itself (SIGKILL) after its first COMMIT, before any event fires. */
  killAfterCommit?: boolean
  /**
   * Transmit in the child, its payout channels registered as an app's start file does
   * (anybody may watch a payout; an owner's channel with `x-owner: <ownerId>`): `memory`
   * without a transport, `redis` with Transmit's Redis transport on `redisChannel`.
   */
  transmit?: 'memory' | 'redis'
  redisChannel?: string
  /** `transmit.relay`, `transmit.relayIntervalMs`. */
  relay?: boolean | 'auto'
  relayIntervalMs?: number
  /** `webhook.processing` of the web process (`worker` by default). */
  processing?: 'inline' | 'worker'
  /**
   * OpenTelemetry in the child (tests/worker/child_otel.ts): every finished span appended to
   * this JSONL file.
   */
  otelSpansFile?: string
}

/** The Transmit config of a child: no ping; Redis's transport when asked. */
export async function transmitConfig(options: ChildOptions) {
  if (options.transmit !== 'redis') return { pingInterval: false, transport: null }
  const { redis } = await import('@adonisjs/transmit/transports/redis')
  return {
    pingInterval: false,
    transport: {
      driver: redis({ host: process.env.REDIS_HOST ?? '127.0.0.1', port: 6379 }),
      channel: options.redisChannel ?? 'svc-payouts-tests::broadcast',
    },
  }
}

/** The payout channels as the suite's apps register them. */
export async function registerChannels(app: ApplicationService, payouts: PayoutsService) {
  const transmit = await app.container.make('transmit')
  transmit.registerRoutes()
  payouts.registerChannels(transmit, {
    payout: () => true,
    owner: (ctx, ownerId) => ctx.request.header('x-owner') === ownerId,
  })
}

/** The payouts config both children run with. */
export function payoutsConfig(options: ChildOptions) {
  return {
    apiKey: TEST_API_KEY,
    // No service by default: the jobs would only log a refused connection; they run in the
    // worker only.
    baseUrl: options.baseUrl ?? 'http://127.0.0.1:9',
    clientRateLimiter: false,
    retry: { maxRetries: 0 },
    webhook: {
      secret: SECRET,
      processing: options.processing ?? 'worker',
      retryIntervalMs: 100,
      processBatchSize: options.batchSize,
      ...(options.processingLeaseMs ? { processingLeaseMs: options.processingLeaseMs } : {}),
    },
    events: {
      ...(options.listenerTimeoutMs ? { listenerTimeoutMs: options.listenerTimeoutMs } : {}),
      ...(options.notifyLeaseMs ? { notifyLeaseMs: options.notifyLeaseMs } : {}),
    },
    jobs: { reconcileEveryMs: 0, escrowEveryMs: 0, recoverEveryMs: 0 },
    transmit: {
      ...(options.relay !== undefined ? { relay: options.relay } : {}),
      ...(options.relayIntervalMs ? { relayIntervalMs: options.relayIntervalMs } : {}),
    },
    ledger: { tablePrefix: options.prefix, transactionTimeoutMs: 20_000 },
  }
}

/** A running child: its output so far, its messages, and how it ended. */
export interface Child {
  process: ChildProcess
  stdout: () => string
  messages: any[]
  nextMessage: (type: string) => Promise<any>
  exited: Promise<number | null>
}

/** Spawns a child script of this folder with the suite's database settings. */
export function spawnChild(
  cleanup: (fn: () => Promise<void>) => void,
  script: 'web_app.ts' | 'worker_app.ts',
  options: ChildOptions,
  env: Record<string, string> = {}
): Child {
  const child = spawn(
    process.execPath,
    [TS_HOOKS, '--enable-source-maps', `tests/worker/${script}`],
    {
      env: { ...process.env, ...env, WORKER_TEST: JSON.stringify(options) },
      stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
    }
  )
  let out = ''
  child.stdout!.setEncoding('utf8')
  child.stdout!.on('data', (chunk) => (out += chunk))
  const messages: any[] = []
  const waiters: Array<{ type: string; resolve: (m: any) => void }> = []
  child.on('message', (message: any) => {
    messages.push(message)
    // The first waiter takes it; a later `nextMessage` waits for the next one.
    const waiter = waiters.find((w) => w.type === message.type)
    if (!waiter) return
    waiters.splice(waiters.indexOf(waiter), 1)
    message.taken = true
    waiter.resolve(message)
  })
  const exited = once(child, 'exit').then(([code]) => code as number | null)
  cleanup(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await exited
  })
  return {
    process: child,
    stdout: () => out,
    messages,
    exited,
    nextMessage: (type) =>
      new Promise((resolve, reject) => {
        const seen = messages.find((m) => m.type === type && !m.taken)
        if (seen) {
          seen.taken = true
          return resolve(seen)
        }
        waiters.push({ type, resolve })
        exited.then((code) => reject(new Error(`${script} exited (${code}) before ${type}`)))
      }),
  }
}

/** A Node subscriber: undici's EventSource (Node 24 has none), identity in a header. */
export function subscriber(baseUrl: string, owner?: string, refused: number[] = []) {
  return new Transmit({
    baseUrl,
    onSubscribeFailed: (response: Response) => void refused.push(response.status),
    eventSourceFactory: (url, options) =>
      new EventSource(url, options) as unknown as globalThis.EventSource,
    beforeSubscribe: (req: Request) => void (owner && req.headers.set('x-owner', owner)),
    maxReconnectAttempts: 0,
  })
}

/** A subscriber on one channel of `baseUrl`: what it received, when, and its closing. */
export async function listen(
  cleanup: (fn: () => Promise<void>) => void,
  baseUrl: string,
  channel: string,
  owner?: string
) {
  const client = subscriber(baseUrl, owner)
  cleanup(async () => client.close())
  const received: Array<{ at: number; message: any }> = []
  const subscription = client.subscription(channel)
  subscription.onMessage((message) => void received.push({ at: Date.now(), message }))
  await subscription.create()
  if (!subscription.isCreated) throw new Error(`subscription to ${channel} refused`)
  return { received, close: () => client.close() }
}

/** POSTs one signed delivery of `type` to the web process. */
export async function postEvent(
  url: string,
  type: string,
  data: Record<string, unknown>,
  deliveryId = `dlv_${randomUUID()}`
) {
  const body = JSON.stringify({ type, createdAt: new Date().toISOString(), data })
  const response = await request(`${url}/webhooks/payouts`, {
    method: 'POST',
    body,
    headers: {
      'content-type': 'application/json',
      'svc-signature': signPayload(SECRET, Math.floor(Date.now() / 1000), body),
      'svc-delivery-id': deliveryId,
      'svc-event-type': type,
    },
  })
  await response.body.dump()
  if (response.statusCode !== 200) throw new Error(`delivery answered ${response.statusCode}`)
}

/** POSTs `count` signed `payout.created` deliveries, each for a new payout; answers their ids. */
export async function postDeliveries(url: string, count: number) {
  const payoutIds: string[] = []
  for (let i = 0; i < count; i++) {
    const payoutId = randomUUID()
    await postEvent(url, 'payout.created', { payoutId }, `dlv_${payoutId}`)
    payoutIds.push(payoutId)
  }
  return payoutIds
}

/** The `payouts worker batch` lines the worker logged (pino JSON on stdout). */
export function batchLines(stdout: string): Array<{ processed: number; renotified: number }> {
  return stdout
    .split('\n')
    .flatMap((line) => {
      try {
        return [JSON.parse(line)]
      } catch {
        return []
      }
    })
    .filter((line) => line.msg === 'payouts worker batch')
}
