import type { Dispatcher } from 'undici'
import type { EndpointName } from '../contract/endpoints.ts'
import type { ClientHooks } from './hooks.ts'
import type { RateFamily, RateLimiter } from './rate_limiter.ts'
import type { ClientLogger } from './types.ts'

/** When and how often a failed request is sent again. */
export interface RetryOptions {
  /** Retries after the first attempt (spec: give up after the 5th retry). */
  maxRetries: number
  /** First backoff; doubles per retry (spec: 1, 2, 4, 8, 16 s). */
  baseDelayMs: number
  /** Relative jitter (spec: ±20%). */
  jitter: number
  /**
   * The longest wait the service may ask for (Retry-After, or an exhausted family's
   * X-RateLimit-Reset). A longer one is never shortened: the call ends in a
   * RateLimitedError (or the 409 in-flight error) carrying `retryAfterMs`.
   */
  maxRetryAfterMs: number
}

/** Last X-RateLimit-* values the service sent. */
export interface RateLimitState {
  limit: number
  remaining: number
  reset: number
}

/** Settings of a `Transport`, filled from the client's options. */
export interface TransportOptions {
  baseUrl: string
  timeoutMs: number
  retry: RetryOptions
  userAgent: string
  limiter: RateLimiter | null
  logger?: ClientLogger
  sleep: (ms: number) => Promise<void>
  random: () => number
  /** Epoch milliseconds: the clock waits are measured on. */
  now: () => number
  dispatcher?: Dispatcher
  /** The client's `request` / `response` listeners. */
  hooks?: ClientHooks
}

/** One request, with what decides its retries. */
export interface RequestSpec {
  /** The contract's endpoint name, for hooks and traces. */
  endpoint: EndpointName
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE'
  /** The path template (`/payouts/{id}`): what hooks and traces show instead of `path`. */
  route: string
  /** The path sent, its id filled in. */
  path: string
  query?: Record<string, string | number | undefined>
  body?: unknown
  /** False for the public coverage endpoint. */
  auth?: boolean
  idempotencyKey?: string
  /**
   * True when repeating the request cannot do the work twice (reads, POSTs carrying an
   * Idempotency-Key). Otherwise it is retried only when it surely never reached the server.
   */
  safeToRepeat: boolean
  family: RateFamily
  signal?: AbortSignal
  /** Confirm-escrow-deposit: its errors have their own shape and a 500 is final. */
  escrowConfirm?: boolean
}

/** A 2xx answer: its status and its parsed JSON body. */
export interface RawResponse {
  status: number
  body: unknown
}
