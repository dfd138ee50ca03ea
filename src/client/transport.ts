import { Agent, request as undiciRequest, type Dispatcher } from 'undici'
import { errorBodySchema } from '../schemas/resources.ts'
import {
  errorFromResponse,
  PayoutsAbortedError,
  PayoutsApiError,
  PayoutsNetworkError,
  PayoutsTimeoutError,
} from './errors.ts'
import type { RateFamily, RateLimiter } from './rate_limiter.ts'

export interface RetryOptions {
  /** Retries after the first attempt (spec: give up after the 5th retry). */
  maxRetries: number
  /** First backoff; doubles per retry (spec: 1, 2, 4, 8, 16 s). */
  baseDelayMs: number
  /** Relative jitter (spec: ±20%). */
  jitter: number
  /** Upper bound of a Retry-After wait. */
  maxRetryAfterMs: number
}

export interface ClientLogger {
  debug(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
}

/** Last X-RateLimit-* values the service sent. */
export interface RateLimitState {
  limit: number
  remaining: number
  reset: number
}

export interface TransportOptions {
  baseUrl: string
  timeoutMs: number
  retry: RetryOptions
  userAgent: string
  limiter: RateLimiter | null
  logger?: ClientLogger
  sleep: (ms: number) => Promise<void>
  random: () => number
  dispatcher?: Dispatcher
}

export interface RequestSpec {
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE'
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
  escrowConfirm?: boolean
}

export interface RawResponse {
  status: number
  body: unknown
}

/** From this timeout on, undici's coarse timers (±1 s) are precise enough. */
export const COARSE_TIMER_MIN_MS = 5000

/** undici's timeouts: no headers in time, or the body paused too long. */
const TIMED_OUT = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT'])

/** Connection errors that prove the request never left this process. */
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT'])

/**
 * Sends requests with the retry rules of the spec (Errors, rules 2 and 3): 5xx, network
 * errors and timeouts back off exponentially; 429 and 409 IDEMPOTENCY_REQUEST_IN_FLIGHT
 * wait Retry-After; every other 4xx fails at once.
 */
export class Transport {
  #baseUrl: string
  /** Built once: undici only reads them. The key stays inside this private field. */
  #authHeaders: Record<string, string>
  #publicHeaders: Record<string, string>
  #agent: Dispatcher
  #ownsAgent: boolean
  rateLimit: RateLimitState | null = null

  constructor(
    apiKey: string,
    private options: TransportOptions
  ) {
    this.#publicHeaders = Object.freeze({
      'accept': 'application/json',
      'user-agent': options.userAgent,
    })
    this.#authHeaders = Object.freeze({
      ...this.#publicHeaders,
      authorization: `Bearer ${apiKey}`,
    })
    this.#baseUrl = options.baseUrl.replace(/\/$/, '')
    this.#ownsAgent = !options.dispatcher
    this.#agent =
      options.dispatcher ??
      new Agent({ keepAliveTimeout: 10_000, keepAliveMaxTimeout: 60_000, connections: 64 })
  }

  async send(spec: RequestSpec): Promise<RawResponse> {
    const { retry } = this.options
    let lastError: PayoutsApiError | undefined
    for (let attempt = 0; attempt <= retry.maxRetries; attempt++) {
      if (attempt > 0 && lastError) {
        const wait = this.#waitBefore(lastError, attempt - 1)
        this.options.logger?.debug(
          { method: spec.method, path: spec.path, attempt, waitMs: wait, code: lastError.code },
          'payouts request retry'
        )
        await this.options.sleep(wait)
        if (spec.signal?.aborted) throw new PayoutsAbortedError({ status: 0, message: 'aborted' })
      }
      if (this.options.limiter) await this.options.limiter.acquire(spec.family)
      const outcome = await this.#attempt(spec)
      if (!(outcome instanceof PayoutsApiError)) return outcome
      lastError = outcome
      if (!this.#retryable(outcome, spec)) break
    }
    throw lastError!
  }

  #retryable(error: PayoutsApiError, spec: RequestSpec): boolean {
    if (error instanceof PayoutsAbortedError) return false
    if (error.status === 429) return true
    if (error.code === 'IDEMPOTENCY_REQUEST_IN_FLIGHT') return true
    if (error.code === 'ESCROW_CONFIRMATION_FAILED') return false
    const transient =
      error.status >= 500 ||
      error instanceof PayoutsNetworkError ||
      error instanceof PayoutsTimeoutError
    if (!transient) return false
    return spec.safeToRepeat || !error.outcomeUnknown
  }

  #waitBefore(error: PayoutsApiError, retryIndex: number): number {
    const { baseDelayMs, jitter, maxRetryAfterMs } = this.options.retry
    if ((error.status === 429 || error.status === 409) && error.retryAfter !== null) {
      return Math.min(error.retryAfter * 1000, maxRetryAfterMs)
    }
    const base = baseDelayMs * 2 ** retryIndex
    return Math.max(0, Math.round(base * (1 + jitter * (2 * this.options.random() - 1))))
  }

  async #attempt(spec: RequestSpec): Promise<RawResponse | PayoutsApiError> {
    let url = this.#baseUrl + spec.path
    if (spec.query) {
      const params = new URLSearchParams()
      for (const key in spec.query) {
        const value = spec.query[key]
        if (value !== undefined) params.set(key, String(value))
      }
      const search = params.toString()
      if (search) url += `?${search}`
    }
    let headers = spec.auth === false ? this.#publicHeaders : this.#authHeaders
    let payload: string | undefined
    if (spec.idempotencyKey || spec.body !== undefined) {
      headers = { ...headers }
      if (spec.idempotencyKey) headers['idempotency-key'] = spec.idempotencyKey
      if (spec.body !== undefined) {
        payload = JSON.stringify(spec.body)
        headers['content-type'] = 'application/json'
      }
    }
    const startedAt = performance.now()
    let status: number
    let text: string
    let retryAfterHeader: string | string[] | undefined
    try {
      const response = await undiciRequest(url, this.#requestOptions(spec, headers, payload))
      status = response.statusCode
      retryAfterHeader = response.headers['retry-after']
      this.#readRateLimit(response.headers)
      text = await response.body.text()
    } catch (error) {
      return this.#transportError(error, spec)
    }
    this.options.logger?.debug(
      {
        method: spec.method,
        path: spec.path,
        status,
        ms: Math.round(performance.now() - startedAt),
      },
      'payouts request'
    )
    let body: unknown = null
    if (text.length > 0) {
      try {
        body = JSON.parse(text)
      } catch {
        body = undefined
      }
    }
    if (status >= 200 && status < 300) {
      if (body === undefined) {
        return new PayoutsApiError({
          status,
          code: 'INVALID_RESPONSE',
          message: 'response is not JSON',
        })
      }
      return { status, body }
    }
    const parsed = errorBodySchema.safeParse(body)
    return errorFromResponse(
      status,
      parsed.success ? parsed.data : null,
      parseRetryAfter(retryAfterHeader),
      { escrowConfirm: spec.escrowConfirm }
    )
  }

  /**
   * Long timeouts use undici's own timers (for the headers, then for each pause in the
   * body): free per call, but they tick about once a second. Short ones need an exact
   * AbortSignal, which costs ~8% of a loopback round trip, so only they pay for it.
   */
  #requestOptions(spec: RequestSpec, headers: Record<string, string>, body?: string) {
    const { timeoutMs } = this.options
    const options: Parameters<typeof undiciRequest>[1] & object = {
      method: spec.method,
      headers,
      body,
      dispatcher: this.#agent,
    }
    if (timeoutMs >= COARSE_TIMER_MIN_MS) {
      options.headersTimeout = timeoutMs
      options.bodyTimeout = timeoutMs
      if (spec.signal) options.signal = spec.signal
    } else {
      const timeout = AbortSignal.timeout(timeoutMs)
      options.signal = spec.signal ? AbortSignal.any([spec.signal, timeout]) : timeout
    }
    return options
  }

  #transportError(error: unknown, spec: RequestSpec): PayoutsApiError {
    if (spec.signal?.aborted) {
      return new PayoutsAbortedError({
        status: 0,
        code: 'ABORTED',
        message: 'request aborted by caller',
      })
    }
    const code =
      (error as { code?: string }).code ?? (error as { cause?: { code?: string } }).cause?.code
    const timedOut =
      (code !== undefined && TIMED_OUT.has(code)) ||
      (error as Error)?.name === 'TimeoutError' ||
      (error as { cause?: Error })?.cause?.name === 'TimeoutError'
    if (timedOut) {
      return new PayoutsTimeoutError({
        status: 0,
        code: 'TIMEOUT',
        message: `no answer within ${this.options.timeoutMs} ms`,
        outcomeUnknown: true,
      })
    }
    const notSent = code !== undefined && NOT_SENT.has(code)
    return new PayoutsNetworkError({
      status: 0,
      code: 'NETWORK_ERROR',
      message: `network error${code ? ` (${code})` : ''}`,
      outcomeUnknown: !notSent,
    })
  }

  #readRateLimit(headers: Record<string, string | string[] | undefined>) {
    const limit = Number(headers['x-ratelimit-limit'])
    const remaining = Number(headers['x-ratelimit-remaining'])
    const reset = Number(headers['x-ratelimit-reset'])
    if (Number.isFinite(limit) && Number.isFinite(remaining)) {
      this.rateLimit = { limit, remaining, reset: Number.isFinite(reset) ? reset : 0 }
    }
  }

  async close() {
    if (this.#ownsAgent) await this.#agent.close()
  }
}

/** Retry-After in seconds: a number of seconds or an HTTP date. */
export function parseRetryAfter(
  value: string | string[] | undefined,
  now = Date.now()
): number | null {
  const header = Array.isArray(value) ? value[0] : value
  if (!header) return null
  if (/^\d+$/.test(header.trim())) return Number(header.trim())
  const date = Date.parse(header)
  if (Number.isNaN(date)) return null
  return Math.max(0, Math.ceil((date - now) / 1000))
}
