/**
 * The host app of the chaos suite, run as a child process that the parent SIGKILLs and
 * restarts: a real AdonisJS app (core providers, Lucid on the suite's database, the payouts
 * provider) serving the signed webhook route on a fixed loopback port, with the inbox worker
 * and the jobs running. It executes every planned payout that has no execution intent yet
 * (after recovering the unknown ones a killed predecessor left), records the escrow deposits
 * the parent simulates, and appends every app event it handles, and every webhook request it
 * answers, to a JSONL log, synchronously, so what it saw survives a SIGKILL. Its webhook
 * subscription is made through the plugin (which stores the secret); the parent has it
 * rotated mid-run, and stalls the database under it.
 */
import 'reflect-metadata'
import { appendFileSync, readFileSync } from 'node:fs'
import { defineConfig as defineLoggerConfig } from '@adonisjs/core/logger'
import {
  EscrowDeposit,
  ExecutionIntent,
  PayoutEvent,
  WebhookDelivery,
} from '../../src/models/main.ts'
import { BASE_URL } from '../helpers/app.ts'
import { boundedConnection, connectionConfig } from '../helpers/database.ts'
import { serveHostApp, type HostAppParts } from '../helpers/host_app.ts'
import {
  refOf,
  sleep,
  type HostCall,
  type HostConfig,
  type HostMessage,
  type LogLine,
  type ParentMessage,
  type PlannedPayout,
} from './helpers.ts'
import { partsOf } from '../../src/service/payouts_service.ts'

type Unstamped<T> = T extends LogLine ? Omit<T, 'pid'> : never

const config: HostConfig = JSON.parse(process.env.CHAOS_CONFIG!)
const plan: PlannedPayout[] = JSON.parse(readFileSync(config.planFile, 'utf8'))
const log = (line: Unstamped<LogLine>) =>
  appendFileSync(config.logFile, JSON.stringify({ ...line, pid: process.pid }) + '\n')
const send = (message: HostMessage) => process.send!(message)
// Never outlive the parent test process.
process.on('disconnect', () => process.exit(1))

// PostgreSQL or MySQL (through the parent's proxy: PG_PORT, MYSQL_PORT) with the settings the README advises
// against connections that stop answering: opening one is bounded, and a session left idle
// in a transaction by a dropped flow is ended by the server, its locks with it.
const base = connectionConfig('chaos') as any
const connection =
  base.client === 'better-sqlite3'
    ? base
    : boundedConnection(base, { connectMs: 500, idleInTransactionMs: 2000 })

let armed = false

/**
 * Logs what the parent checks: the client's retries, the deliveries the inbox refused as
 * stored already, every app event (pausing on the armed one), every answer of the route.
 */
async function watch({ app, payouts, route }: HostAppParts) {
  // Client retries are counted where the client reports them: its debug log line.
  const appLogger = await app.container.make('logger')
  const debug = appLogger.debug.bind(appLogger)
  appLogger.debug = ((obj: any, msg?: string, ...rest: any[]) => {
    if (msg === 'payouts request retry') log({ k: 'retry', path: obj.path, code: obj.code ?? null })
    return (debug as any)(obj, msg, ...rest)
  }) as typeof appLogger.debug

  // Deliveries the inbox refused as already stored (duplicates and retries of stored ones).
  const { inbox } = await partsOf(payouts)
  const insert = inbox.insert.bind(inbox)
  inbox.insert = async (input) => {
    const outcome = await insert(input)
    if (outcome === 'duplicate') log({ k: 'duplicate', deliveryId: input.deliveryId })
    return outcome
  }

  const emitter = await app.container.make('emitter')
  emitter.onAny(async (name, data: any) => {
    const event = String(name)
    if (!event.startsWith('payouts:')) return
    // Told per stored delivery, not per change: the checks here count changes.
    if (event === 'payouts:webhook_received') return
    if (event.startsWith('payouts:escrow_')) {
      log({ k: 'escrow', name: event, quoteId: data.quoteId, payoutId: data.payoutId ?? null })
      return
    }
    if (!data || !('previousStatus' in data)) {
      log({ k: 'other', name: event })
      return
    }
    if (armed && event === 'payouts:status_updated' && data.source === 'webhook') {
      // The worst moment for a crash: the change is committed, its event not yet handled.
      armed = false
      send({ type: 'paused', eventId: String(data.eventId), pid: process.pid })
      await new Promise(() => {})
    }
    log({
      k: 'event',
      name: event,
      eventId: data.eventId === undefined ? null : String(data.eventId),
      payoutId: data.payoutId,
      status: data.status,
      step: data.step,
      previousStatus: data.previousStatus,
      previousStep: data.previousStep,
      source: data.source,
      completedAt: data.completedAt,
    })
  })

  // Every answer of the route, with the signature it was given: the parent tells which secret
  // signed it, and checks who was refused around the rotation.
  route.use(async (ctx, next) => {
    const startedAt = Date.now()
    await next()
    log({
      k: 'webhook',
      deliveryId: ctx.request.header('svc-delivery-id') ?? '',
      signature: ctx.request.header('svc-signature') ?? null,
      status: ctx.response.getStatus(),
      startedAt,
      endedAt: Date.now(),
    })
  })
}

const host = await serveHostApp({
  root: BASE_URL,
  port: config.port,
  connection,
  config: {
    logger: defineLoggerConfig({
      default: 'app',
      loggers: { app: { enabled: true, level: 'error' } },
    }),
  },
  payouts: {
    apiKey: config.apiKey,
    baseUrl: config.baseUrl,
    // Short timeouts and backoffs: the emulator's faults cost milliseconds, not minutes.
    timeoutMs: 1000,
    retry: { maxRetries: 5, baseDelayMs: 50, jitter: 0.2 },
    clientRateLimiter: false,
    allowInsecureLoopbackWebhooks: true,
    // No configured secret: the route accepts the stored subscription's current one.
    // The emulator's clock runs ahead of ours once the parent flushes its retries.
    // Database waits are bounded well inside the run's stall (a few seconds).
    webhook: { toleranceSeconds: 3600, retryIntervalMs: 250, ackTimeoutMs: 1500 },
    jobs: {
      enabled: true,
      // One reconciliation pass runs at the end; during the run, webhooks carry the state.
      reconcileEveryMs: 0,
      escrowEveryMs: 500,
      recoverEveryMs: 5000,
      escrowConfirmAfterMinutes: 0.02,
      // An injected 500 on confirm-escrow is a refusal: tried again after this, not minutes.
      escrowRetryBackoffMs: 500,
      runTimeoutMs: 5000,
    },
    reconcile: { staleAfterMs: 0, batchSize: 5000, budgetShare: 1 },
    ledger: { tablePrefix: config.prefix, transactionTimeoutMs: 2000 },
  },
  setup: watch,
})
const { payouts } = host

// Escrow deposits are made by the parent (it owns the emulator, the "chain").
const depositWaiters = new Map<string, Array<() => void>>()
function deposit(quoteId: string) {
  return new Promise<void>((resolve) => {
    const waiters = depositWaiters.get(quoteId) ?? []
    waiters.push(resolve)
    depositWaiters.set(quoteId, waiters)
    send({ type: 'deposit', quoteId })
  })
}

async function depositsNotSent() {
  const rows = await EscrowDeposit.query().where('state', 'awaiting_deposit')
  await Promise.all(rows.map((row) => deposit(row.quoteId)))
  return rows.length
}

async function countBy(query: Promise<Array<{ state: string }>>) {
  const counts: Record<string, number> = {}
  for (const row of await query) counts[row.state] = (counts[row.state] ?? 0) + 1
  return counts
}

/**
 * Rotates the subscription's secret through the plugin, as `payouts:webhooks:rotate-secret`
 * does; a failed attempt (an injected 5xx, a stalled answer) is run again, as an operator would.
 */
async function rotate() {
  for (let attempt = 1; ; attempt++) {
    log({ k: 'rotation', phase: 'start', at: Date.now() })
    try {
      await payouts.webhooks.rotateSecret(subscriptionId)
      log({ k: 'rotation', phase: 'done', at: Date.now() })
      return { subscriptionId, attempts: attempt }
    } catch (error) {
      log({ k: 'rotation', phase: 'failed', at: Date.now(), error: String(error) })
      if (attempt >= 10) throw error
      await sleep(250)
    }
  }
}

async function call(name: HostCall) {
  if (name === 'rotate') return rotate()
  if (name === 'sweep') {
    const recovered = await payouts.recover({ olderThanMs: 0 })
    const deposited = await depositsNotSent()
    return {
      recovered,
      deposited,
      intents: await countBy(ExecutionIntent.query().select('state')),
      deposits: await countBy(EscrowDeposit.query().select('state')),
    }
  }
  if (name === 'final') {
    await payouts.drainInbox()
    const reconcile = await payouts.reconcile({ staleAfterMs: 0 })
    // The inbox worker takes over rows of dead processes when their lease expires, and
    // fires the events a killed process committed but never fired (the outbox).
    const started = Date.now()
    for (;;) {
      const open = await WebhookDelivery.query().whereNot('state', 'processed').first()
      const unnotified = await PayoutEvent.query().whereNull('notified_at').first()
      if (!open && !unnotified) break
      if (Date.now() - started > 120_000) break
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
    return {
      reconcile,
      inbox: await countBy(WebhookDelivery.query().select('state')),
      intents: await countBy(ExecutionIntent.query().select('state')),
      deposits: await countBy(EscrowDeposit.query().select('state')),
    }
  }
  setTimeout(async () => {
    await host.close()
    process.exit(0)
  }, 10)
  return { exiting: true }
}

/** Records a deposit the parent made, again after a failure (the database may be stalled). */
async function recordDeposit(message: Extract<ParentMessage, { type: 'deposit-result' }>) {
  for (;;) {
    try {
      await payouts.escrow.recordDeposit({
        quoteId: message.quoteId,
        txHash: message.txHash,
        confirmedAt: message.confirmedAt,
      })
      break
    } catch (error) {
      console.error(`recordDeposit ${message.quoteId} failed, again in 250 ms: ${error}`)
      await sleep(250)
    }
  }
  for (const resolve of depositWaiters.get(message.quoteId) ?? []) resolve()
  depositWaiters.delete(message.quoteId)
}

process.on('message', (message: ParentMessage) => {
  if (message.type === 'arm') armed = true
  if (message.type === 'deposit-result') void recordDeposit(message)
  if (message.type === 'call') {
    call(message.name).then(
      (result) => send({ type: 'reply', id: message.id, result }),
      (error) => send({ type: 'reply', id: message.id, result: { error: String(error) } })
    )
  }
})

// The first host app subscribes (before the parent turns the faults on); its successors find
// the stored subscription.
const { secrets } = await partsOf(payouts)
const subscriptionId =
  (await secrets!.list())[0]?.subscriptionId ??
  (await payouts.webhooks.create({ url: config.webhookUrl })).id

// A predecessor killed mid-execute left intents pending: re-send them with their keys first.
const recovered = await payouts.recover({ olderThanMs: 0 })
const known = new Set(
  (await ExecutionIntent.all()).map((intent) => refOf(intent.requestBody.reference))
)
const todo = plan.filter((payout) => !known.has(payout.ref))
await depositsNotSent()
send({
  type: 'ready',
  pid: process.pid,
  skipped: known.size,
  recovered: { ...recovered },
  subscriptionId,
})

let attempted = known.size
let errors = 0
let next = 0
async function worker() {
  while (next < todo.length) {
    const payout = todo[next++]
    attempted++
    try {
      const { result } = await payouts.execute(payout.body as any, { ownerId: payout.ownerId })
      send({ type: 'progress', attempted })
      if (result.flow === 'stablecoin_to_fiat') await deposit(result.quoteId)
    } catch (error) {
      // The intent is unknown: recovery (the job, or the parent's sweep) re-sends it.
      errors++
      log({
        k: 'execute-error',
        ref: payout.ref,
        code: (error as any)?.code ?? null,
        at: Date.now(),
      })
      send({ type: 'progress', attempted })
    }
  }
}
await Promise.all(Array.from({ length: config.concurrency }, () => worker()))
send({ type: 'done', attempted, errors })
