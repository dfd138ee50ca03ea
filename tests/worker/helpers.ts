/**
 * The worker suite's two kinds of child process, run as an operator runs them: the web
 * process (tests/worker/web_app.ts, `webhook.processing: 'worker'`) and `node ace
 * payouts:work` (tests/worker/worker_app.ts), on one database.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { randomUUID } from 'node:crypto'
import { request } from 'undici'
import { signPayload } from '../../src/signature/main.ts'
import { TEST_API_KEY } from '../helpers/app.ts'

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
      processing: 'worker',
      retryIntervalMs: 100,
      processBatchSize: options.batchSize,
      ...(options.processingLeaseMs ? { processingLeaseMs: options.processingLeaseMs } : {}),
    },
    events: {
      ...(options.listenerTimeoutMs ? { listenerTimeoutMs: options.listenerTimeoutMs } : {}),
      ...(options.notifyLeaseMs ? { notifyLeaseMs: options.notifyLeaseMs } : {}),
    },
    jobs: { reconcileEveryMs: 0, escrowEveryMs: 0, recoverEveryMs: 0 },
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
    ['--import=@poppinss/ts-exec', '--enable-source-maps', `tests/worker/${script}`],
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
    for (const waiter of waiters.filter((w) => w.type === message.type)) {
      waiters.splice(waiters.indexOf(waiter), 1)
      waiter.resolve(message)
    }
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

/** POSTs `count` signed `payout.created` deliveries, each for a new payout; answers their ids. */
export async function postDeliveries(url: string, count: number) {
  const payoutIds: string[] = []
  for (let i = 0; i < count; i++) {
    const payoutId = randomUUID()
    const body = JSON.stringify({
      type: 'payout.created',
      createdAt: new Date().toISOString(),
      data: { payoutId },
    })
    const response = await request(`${url}/webhooks/payouts`, {
      method: 'POST',
      body,
      headers: {
        'content-type': 'application/json',
        'svc-signature': signPayload(SECRET, Math.floor(Date.now() / 1000), body),
        'svc-delivery-id': `dlv_${payoutId}`,
        'svc-event-type': 'payout.created',
      },
    })
    await response.body.dump()
    if (response.statusCode !== 200) throw new Error(`delivery answered ${response.statusCode}`)
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
