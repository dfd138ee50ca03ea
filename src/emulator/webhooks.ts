import { randomBytes, randomUUID } from 'node:crypto'
import { Agent, request, type Dispatcher } from 'undici'
import {
  checkWebhookTarget,
  normaliseWebhookHost,
  type ResolvedAddress,
  type WebhookLookup,
} from '../schemas/webhook_urls.ts'
import { signPayload } from '../signature/main.ts'
import type { EmulatorClock } from './clock.ts'
import type { Faults } from './faults.ts'
import { omit } from './state.ts'

export interface SubscriptionRecord {
  id: string
  accountId: string
  url: string
  events: string[]
  label?: string
  active: boolean
  secret: string
  createdAt: string
}

export interface DeliveryRecord {
  id: string
  accountId: string
  subscriptionId: string
  eventType: string
  payload: string
  status: 'pending' | 'retrying' | 'succeeded' | 'permanently_failed' | 'dropped'
  attempts: number
  createdAt: string
  createdAtMs: number
  lastAttemptAt?: string
  nextAttemptAt?: string
  replayOf?: string
  lastStatusCode?: number
  /** Why the last attempt sent nothing: its target was refused or did not resolve. */
  lastError?: string
}

/** Retry schedule after attempts 1..4 (spec, HTTP delivery): 30 s, 2 min, 8 min, 32 min. */
export const RETRY_DELAYS_MS = [30_000, 120_000, 480_000, 1_920_000]
export const MAX_ATTEMPTS = 5
export const MAX_PAYLOAD_BYTES = 256 * 1024
const HISTORY_MS = 30 * 24 * 3600 * 1000
const MAX_HISTORY = 50_000

export interface WebhookDispatcherOptions {
  clock: EmulatorClock
  faults: Faults
  allowInsecureLoopback: boolean
  /** Resolves webhook host names before each POST. */
  lookup: WebhookLookup
  receiverTimeoutMs: number
  /** How POSTs travel; default: an Agent pinned to the addresses the URL rule checked. */
  dispatcher?: Dispatcher
}

/**
 * Subscriptions and the delivery worker: signs each POST over `t.` + the raw body (with a
 * wall-clock `t`), retries on the spec's schedule on the emulated clock, and keeps 30 days
 * of history.
 */
export class WebhookDispatcher {
  subscriptions = new Map<string, SubscriptionRecord>()
  deliveries = new Map<string, DeliveryRecord>()
  /** Counters for tests and chaos reports. */
  stats = { attempts: 0, succeeded: 0, failed: 0, duplicated: 0, dropped: 0, delayed: 0 }
  #inFlight = new Set<Promise<void>>()
  /** The addresses each host name was last checked to; the POST connects only to them. */
  #checked = new Map<string, ResolvedAddress[]>()
  #agent: Dispatcher
  #ownsAgent: boolean

  constructor(private options: WebhookDispatcherOptions) {
    this.#ownsAgent = !options.dispatcher
    this.#agent =
      options.dispatcher ?? new Agent({ connect: { lookup: pinnedLookup(this.#checked) } })
  }

  createSubscription(accountId: string, input: { url: string; events: string[]; label?: string }) {
    const subscription: SubscriptionRecord = {
      id: `sub_${randomBytes(12).toString('hex')}`,
      accountId,
      url: input.url,
      events: [...new Set(input.events)],
      label: input.label,
      active: true,
      secret: newSecret(),
      createdAt: this.options.clock.iso(),
    }
    this.subscriptions.set(subscription.id, subscription)
    return subscription
  }

  activeCount(accountId: string) {
    let count = 0
    for (const s of this.subscriptions.values()) if (s.accountId === accountId && s.active) count++
    return count
  }

  rotateSecret(subscription: SubscriptionRecord) {
    subscription.secret = newSecret()
    return subscription.secret
  }

  /** Queues one delivery per matching subscription; payloads over 256 KB are dropped. */
  publish(accountId: string, eventType: string, envelope: object) {
    const payload = JSON.stringify(envelope)
    if (Buffer.byteLength(payload) > MAX_PAYLOAD_BYTES) return
    for (const subscription of this.subscriptions.values()) {
      if (subscription.accountId !== accountId || !subscription.active) continue
      if (!subscription.events.includes(eventType)) continue
      this.#enqueue(subscription, eventType, payload)
    }
  }

  #enqueue(
    subscription: SubscriptionRecord,
    eventType: string,
    payload: string,
    replayOf?: string
  ) {
    const delivery: DeliveryRecord = {
      id: `dlv_${randomUUID()}`,
      accountId: subscription.accountId,
      subscriptionId: subscription.id,
      eventType,
      payload,
      status: 'pending',
      attempts: 0,
      createdAt: this.options.clock.iso(),
      createdAtMs: this.options.clock.now(),
      replayOf,
    }
    this.deliveries.set(delivery.id, delivery)
    this.#prune()
    const faults = this.options.faults
    if (!replayOf && faults.roll('webhookDropRate')) {
      delivery.status = 'dropped'
      this.stats.dropped++
      return delivery
    }
    let delay = 0
    if (faults.config.webhookDelayMs) delay += faults.config.webhookDelayMs
    if (faults.roll('webhookReorderRate')) {
      delay += Math.floor(faults.random() * (faults.config.webhookReorderMaxDelayMs ?? 5000))
      this.stats.delayed++
    }
    this.options.clock.setTimer(() => this.#attempt(delivery), delay)
    if (!replayOf && faults.roll('webhookDuplicateRate')) {
      this.stats.duplicated++
      this.options.clock.setTimer(() => this.#track(this.#send(delivery).then(() => {})), delay + 1)
    }
    return delivery
  }

  /** Replays a delivery as a fresh attempt with a new delivery id. */
  replay(delivery: DeliveryRecord) {
    const subscription = this.subscriptions.get(delivery.subscriptionId)
    if (!subscription) return null
    return this.#enqueue(subscription, delivery.eventType, delivery.payload, delivery.id)
  }

  #attempt(delivery: DeliveryRecord) {
    const task = this.#send(delivery).then((ok) => {
      delivery.attempts++
      delivery.lastAttemptAt = this.options.clock.iso()
      if (ok) {
        delivery.status = 'succeeded'
        delivery.nextAttemptAt = undefined
        return
      }
      if (delivery.attempts >= MAX_ATTEMPTS) {
        delivery.status = 'permanently_failed'
        delivery.nextAttemptAt = undefined
        return
      }
      const wait = RETRY_DELAYS_MS[delivery.attempts - 1]
      delivery.status = 'retrying'
      delivery.nextAttemptAt = new Date(this.options.clock.now() + wait).toISOString()
      this.options.clock.setTimer(() => this.#attempt(delivery), wait)
    })
    this.#track(task)
  }

  /** One signed POST; true on any 2xx within the receiver timeout. */
  async #send(delivery: DeliveryRecord): Promise<boolean> {
    const subscription = this.subscriptions.get(delivery.subscriptionId)
    if (!subscription || !subscription.active) return false
    if (!(await this.#targetAllowed(delivery, subscription.url))) return false
    this.stats.attempts++
    // The wall clock, never the emulated one: the receiver checks the timestamp against its
    // own clock (5 minutes' tolerance), and an emulated clock sped up or moved ahead would
    // put every delivery out of tolerance. The emulated clock drives only when this runs.
    const timestamp = Math.floor(Date.now() / 1000)
    try {
      const response = await request(subscription.url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'svc-signature': signPayload(subscription.secret, timestamp, delivery.payload),
          'svc-delivery-id': delivery.id,
          'svc-event-type': delivery.eventType,
        },
        body: delivery.payload,
        signal: AbortSignal.timeout(this.options.receiverTimeoutMs),
        dispatcher: this.#agent,
      })
      delivery.lastStatusCode = response.statusCode
      await response.body.dump()
      const ok = response.statusCode >= 200 && response.statusCode < 300
      if (ok) this.stats.succeeded++
      else this.stats.failed++
      return ok
    } catch {
      this.stats.failed++
      return false
    }
  }

  /** The webhook URL rule with the host name resolved now (creation, update, each POST). */
  checkUrl(url: string) {
    return checkWebhookTarget(url, {
      allowLoopback: this.options.allowInsecureLoopback,
      lookup: this.options.lookup,
    })
  }

  /**
   * The URL rule again before each POST, the host name resolved anew (spec, HTTP delivery):
   * a refused or unresolvable target fails the attempt with `lastError` and sends nothing.
   */
  async #targetAllowed(delivery: DeliveryRecord, url: string) {
    const target = await this.checkUrl(url)
    if ('refusal' in target) delivery.lastError = `refused: ${target.refusal}`
    else if (target.unresolved) delivery.lastError = `${target.host}: ${target.unresolved}`
    else {
      if (target.addresses.length > 0) this.#checked.set(target.host, target.addresses)
      delivery.lastError = undefined
      return true
    }
    return false
  }

  /** Closes the connections to the receivers. */
  async close() {
    await this.settle()
    if (this.#ownsAgent) await this.#agent.close()
  }

  #track(task: Promise<void>) {
    this.#inFlight.add(task)
    task.finally(() => this.#inFlight.delete(task))
  }

  /** Waits until no delivery POST is in flight (tests). */
  async settle() {
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight])
  }

  #prune() {
    const cutoff = this.options.clock.now() - HISTORY_MS
    for (const [id, delivery] of this.deliveries) {
      if (this.deliveries.size <= MAX_HISTORY && delivery.createdAtMs >= cutoff) break
      if (delivery.status === 'pending' || delivery.status === 'retrying') continue
      this.deliveries.delete(id)
    }
  }

  view(delivery: DeliveryRecord) {
    return omit(delivery, ['payload', 'accountId', 'createdAtMs'])
  }
}

/**
 * A `net.connect` lookup answering a host name with the addresses the rule last allowed for
 * it, so the POST cannot reach an address that was not checked (DNS rebinding).
 */
function pinnedLookup(checked: Map<string, ResolvedAddress[]>) {
  return (
    hostname: string,
    options: { all?: boolean; family?: number | string },
    callback: (...args: any[]) => void
  ) => {
    const family = options.family === 'IPv6' ? 6 : options.family === 'IPv4' ? 4 : options.family
    const addresses = (checked.get(normaliseWebhookHost(hostname)) ?? []).filter(
      (a) => !family || a.family === family
    )
    if (addresses.length === 0) {
      const error = Object.assign(new Error(`${hostname} was not checked`), { code: 'ENOTFOUND' })
      return callback(error, options.all ? [] : undefined)
    }
    if (options.all) return callback(null, addresses)
    callback(null, addresses[0].address, addresses[0].family)
  }
}

function newSecret() {
  return `whsec_${randomBytes(24).toString('base64url')}`
}
