import { randomBytes, randomUUID } from 'node:crypto'
import { isIP } from 'node:net'
import { request } from 'undici'
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
}

/** Retry schedule after attempts 1..4 (spec, HTTP delivery): 30 s, 2 min, 8 min, 32 min. */
export const RETRY_DELAYS_MS = [30_000, 120_000, 480_000, 1_920_000]
export const MAX_ATTEMPTS = 5
export const MAX_PAYLOAD_BYTES = 256 * 1024
const HISTORY_MS = 30 * 24 * 3600 * 1000
const MAX_HISTORY = 50_000

const METADATA_HOSTS = new Set([
  '169.254.169.254',
  'metadata.google.internal',
  'metadata',
  '100.100.100.200',
  'fd00:ec2::254',
])

/** True for loopback, private, link-local and unique-local addresses. */
export function isPrivateAddress(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase()
  if (h === 'localhost' || h.endsWith('.localhost')) return true
  const kind = isIP(h)
  if (kind === 4) {
    const [a, b] = h.split('.').map(Number)
    return (
      a === 10 ||
      a === 127 ||
      a === 0 ||
      (a === 172 && b >= 16 && b <= 31) ||
      (a === 192 && b === 168) ||
      (a === 169 && b === 254) ||
      (a === 100 && b >= 64 && b <= 127)
    )
  }
  if (kind === 6) {
    return (
      h === '::1' ||
      h === '::' ||
      h.startsWith('fc') ||
      h.startsWith('fd') ||
      h.startsWith('fe80') ||
      h.startsWith('::ffff:')
    )
  }
  return false
}

/** Why a webhook URL is refused, or null when it is allowed. */
export function refuseWebhookUrl(value: string, allowInsecureLoopback: boolean): string | null {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    return 'must be a valid URL'
  }
  const host = url.hostname.replace(/^\[|\]$/g, '')
  const loopback = ['127.0.0.1', 'localhost', '::1'].includes(host)
  if (allowInsecureLoopback && loopback && (url.protocol === 'http:' || url.protocol === 'https:'))
    return null
  if (url.protocol !== 'https:') return 'must be an https URL'
  if (METADATA_HOSTS.has(host.toLowerCase())) return 'metadata hosts are not allowed'
  if (isPrivateAddress(host)) return 'private, loopback and link-local addresses are not allowed'
  return null
}

export interface WebhookDispatcherOptions {
  clock: EmulatorClock
  faults: Faults
  allowInsecureLoopback: boolean
  receiverTimeoutMs: number
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

  constructor(private options: WebhookDispatcherOptions) {}

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
    // Checked again at delivery (the spec re-resolves DNS before each POST).
    if (refuseWebhookUrl(subscription.url, this.options.allowInsecureLoopback)) return false
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

function newSecret() {
  return `whsec_${randomBytes(24).toString('base64url')}`
}
