import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readFileSync } from 'node:fs'
import { createServer } from 'node:net'
import type { AddressInfo } from 'node:net'
import { Emitter } from '@adonisjs/core/events'
import { AppFactory } from '@adonisjs/core/factories/app'
import { Logger } from '@adonisjs/core/logger'
import { Database } from '@adonisjs/lucid/database'
import { BaseModel } from '@adonisjs/lucid/orm'
import { dropPayoutsTables } from '../../src/database/schema.ts'
import { seededRandom } from '../../src/emulator/random.ts'
import { dbDate } from '../../src/database/dates.ts'
import { configureModels, PayoutEvent } from '../../src/models/main.ts'
import { connectionConfig, createAllPayoutsTables, portVariable } from '../helpers/database.ts'
import { TcpProxy } from '../helpers/tcp_proxy.ts'
import { SCRATCH_URL } from '../helpers/scratch.ts'

export type ChaosFlow = 'fiat_to_fiat' | 'stablecoin_to_fiat' | 'onramp'

/** One payout of the run, addressed by a stable reference the host app can find again. */
export interface PlannedPayout {
  ref: string
  flow: ChaosFlow
  scenario: 'normal' | 'fail' | 'cancel'
  ownerId: string
  body: Record<string, unknown>
}

/** What the parent hands the host app (as JSON in CHAOS_CONFIG). */
export interface HostConfig {
  port: number
  prefix: string
  apiKey: string
  baseUrl: string
  /** The webhook subscription's URL (the host app subscribes through the plugin). */
  webhookUrl: string
  planFile: string
  logFile: string
  /** Payouts executed at the same time. */
  concurrency: number
}

/** Messages from the host app to the parent (over the IPC channel). */
export type HostMessage =
  | {
      type: 'ready'
      pid: number
      skipped: number
      recovered: Record<string, number>
      subscriptionId: string
    }
  | { type: 'progress'; attempted: number }
  | { type: 'deposit'; quoteId: string }
  | { type: 'paused'; eventId: string; pid: number }
  | { type: 'done'; attempted: number; errors: number }
  | { type: 'reply'; id: number; result: any }

/** Messages from the parent to the host app. */
export type ParentMessage =
  | { type: 'deposit-result'; quoteId: string; txHash: string; confirmedAt: string }
  | { type: 'arm' }
  | { type: 'call'; id: number; name: HostCall }

/** Steps the parent runs in the host app. */
export type HostCall = 'sweep' | 'rotate' | 'final' | 'exit'

/** A line of the host app's JSONL log, appended synchronously so a SIGKILL keeps it. */
export type LogLine =
  | {
      k: 'event'
      pid: number
      name: string
      eventId: string | null
      payoutId: string
      status: string
      step: string | null
      previousStatus: string | null
      previousStep: string | null
      source: string
      completedAt: string | null
    }
  | { k: 'escrow'; pid: number; name: string; quoteId: string; payoutId: string | null }
  | { k: 'retry'; pid: number; path: string; code: string | null }
  | { k: 'duplicate'; pid: number; deliveryId: string }
  | { k: 'other'; pid: number; name: string }
  | {
      k: 'webhook'
      pid: number
      deliveryId: string
      signature: string | null
      status: number
      /** Date.now() when the route received it and when it answered. */
      startedAt: number
      endedAt: number
    }
  | { k: 'execute-error'; pid: number; ref: string; code: string | null; at: number }
  | { k: 'rotation'; pid: number; phase: 'start' | 'failed' | 'done'; at: number; error?: string }

/**
 * The run's payouts, the same for a given seed: a third per flow, about 5 % that fail at
 * `converting` and 5 % cancelled while pending (the emulator reads the scenario from the
 * reference), amounts within every corridor's bounds.
 */
export function planPayouts(
  n: number,
  seed: number,
  accounts: { recipientIds: string[]; userPaymentMethodId: string }
): PlannedPayout[] {
  const random = seededRandom(seed ^ 0x5eed)
  const flows: ChaosFlow[] = ['fiat_to_fiat', 'stablecoin_to_fiat', 'onramp']
  return Array.from({ length: n }, (_, i) => {
    const flow = flows[i % 3]
    const roll = random()
    const scenario = roll < 0.05 ? 'fail' : roll < 0.1 ? 'cancel' : 'normal'
    const ref = `chaos-${String(i).padStart(4, '0')}`
    const common = {
      amount: 50 + Math.floor(random() * 20) * 5,
      recipientId: accounts.recipientIds[i % accounts.recipientIds.length],
      reference: scenario === 'normal' ? ref : `${ref} scenario:${scenario}`,
    }
    const body =
      flow === 'fiat_to_fiat'
        ? {
            ...common,
            fromCurrency: 'USD',
            toCurrency: 'MXN',
            userPaymentMethodId: accounts.userPaymentMethodId,
          }
        : flow === 'stablecoin_to_fiat'
          ? {
              ...common,
              fromCurrency: 'USDC',
              toCurrency: 'MXN',
              walletAddress: `0x${(i + 1).toString(16).padStart(40, '0')}`,
            }
          : {
              ...common,
              fromCurrency: 'USD',
              toCurrency: 'USDC',
              userPaymentMethodId: accounts.userPaymentMethodId,
            }
    return { ref, flow, scenario, ownerId: `tenant-${i % 5}`, body }
  })
}

/** The reference a payout was planned under (the part before any scenario marker). */
export function refOf(reference: unknown): string | null {
  return typeof reference === 'string' ? reference.split(' ')[0] : null
}

/** Every complete line of the JSONL log (a line cut by a kill is ignored). */
export function readLog(file: string): LogLine[] {
  if (!existsSync(file)) return []
  const lines: LogLine[] = []
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line.trim()) continue
    try {
      lines.push(JSON.parse(line))
    } catch {}
  }
  return lines
}

/** A loopback port free right now (the host app binds it on every restart). */
export async function freePort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Polls `check` until it returns a value (not undefined, null or false) or the deadline passes. */
export async function waitFor<T>(
  what: string,
  check: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  options: { timeoutMs: number; everyMs?: number }
): Promise<T> {
  const deadline = Date.now() + options.timeoutMs
  for (;;) {
    const value = await check()
    if (value !== undefined && value !== null && value !== false) return value
    if (Date.now() > deadline) throw new Error(`timed out after ${options.timeoutMs} ms: ${what}`)
    await sleep(options.everyMs ?? 100)
  }
}

/**
 * What a process that died holding changes leaves once their leases expired: un-notified
 * changes leased by an owner nobody renews, past their end. A "dead" ledger of the test's own
 * process would still renew its leases: the owner is replaced as well.
 */
export async function leasesExpired() {
  const query = PayoutEvent.query()
  const past = new Date(Date.now() - 60_000)
  await query
    .whereNull('notified_at')
    .whereNotNull('notify_owner')
    .update({ notify_owner: 'a-process-that-died', notify_until: dbDate(query.client, past) })
}

/**
 * The suite's database (as tests/helpers/database.ts opens it) with the plugin's tables
 * under a fresh prefix; on SQLite the file is `sqliteFile`, outside tests/tmp, which any
 * other test run empties when it finishes. `keep()` true leaves a SQLite file's tables.
 */
export async function openDatabase(
  cleanup: (fn: () => Promise<void>) => void,
  sqliteFile: string,
  keep: () => boolean
) {
  const base = connectionConfig('chaos')
  const connection =
    base.client !== 'better-sqlite3' ? base : { ...base, connection: { filename: sqliteFile } }
  const app = new AppFactory().create(SCRATCH_URL)
  await app.init()
  const logger = new Logger({ enabled: false })
  const db = new Database(
    { connection: 'primary', connections: { primary: connection } },
    logger,
    new Emitter(app)
  )
  BaseModel.useAdapter(db.modelAdapter())
  const prefix = `c${Math.random().toString(36).slice(2, 8)}_`
  configureModels(prefix)
  await createAllPayoutsTables(db.connection().schema, prefix)
  cleanup(async () => {
    // A failed SQLite run keeps its file (next to the logs) for inspection.
    if (base.client !== 'better-sqlite3' || !keep())
      await dropPayoutsTables(db.connection().schema, prefix)
    await db.manager.closeAll()
  })
  return { db, prefix }
}

/** What one database stall did, in the parent's clock. */
export interface StallFigures {
  startedAt: number
  endedAt: number
  /** PostgreSQL: connections the proxy accepted before the stall, during it, after it. */
  connections?: { before: number; during: number; after: number }
}

/**
 * The run's database stall, a real one on either database: PostgreSQL is reached through a
 * TCP proxy of the parent that stops forwarding (flows dropped silently, sockets kept open)
 * and then takes new connections again; SQLite's file is write-locked by another process
 * (`BEGIN IMMEDIATE`, as a backup or a migration would) and then released. `env` points
 * the host app at the proxy.
 */
export async function databaseStaller(
  cleanup: (fn: () => Promise<void>) => void,
  sqliteFile: string
): Promise<{ env: Record<string, string>; stall: (ms: number) => Promise<StallFigures> }> {
  const base = connectionConfig('chaos') as any
  if (base.client !== 'better-sqlite3') {
    const proxy = new TcpProxy({ host: base.connection.host, port: base.connection.port })
    await proxy.start()
    cleanup(() => proxy.close())
    return {
      env: { [portVariable()]: String(proxy.port) },
      async stall(ms) {
        const before = proxy.accepted
        const startedAt = Date.now()
        proxy.stall()
        await sleep(ms)
        const during = proxy.accepted - before
        await proxy.heal()
        const endedAt = Date.now()
        // Read once the run is over: the connections that replaced the dropped ones.
        const healed = proxy.accepted
        return {
          startedAt,
          endedAt,
          get connections() {
            return { before, during, after: proxy.accepted - healed }
          },
        }
      },
    }
  }
  return {
    env: {},
    async stall(ms) {
      const holder = spawn(
        process.execPath,
        [
          '-e',
          `const db = new (require('better-sqlite3'))(process.argv[1]);
           db.exec('BEGIN IMMEDIATE'); console.log('locked');
           process.stdin.once('data', () => { db.exec('COMMIT'); db.close(); console.log('released'); process.exit(0) })`,
          sqliteFile,
        ],
        { stdio: ['pipe', 'pipe', 'inherit'] }
      )
      cleanup(async () => void holder.kill('SIGKILL'))
      const exited = once(holder, 'exit')
      holder.stdout.setEncoding('utf8')
      const [locked] = await once(holder.stdout, 'data')
      if (!String(locked).includes('locked')) throw new Error(`lock holder said ${locked}`)
      const startedAt = Date.now()
      await sleep(ms)
      holder.stdin.write('commit\n')
      const [code] = await exited
      if (code !== 0) throw new Error(`lock holder exited with ${code}`)
      return { startedAt, endedAt: Date.now() }
    },
  }
}
