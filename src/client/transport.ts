import { Agent, request as undiciRequest, type Dispatcher } from 'undici'
import { errorBodySchema } from '../schemas/resources.ts'
import { channels, traced, type ClientRequestContext } from '../tracing/channels.ts'
import {
  errorFromResponse,
  PayoutsAbortedError,
  PayoutsApiError,
  PayoutsNetworkError,
  PayoutsTimeoutError,
  RateLimitedError,
} from './errors.ts'
import { responseEvent, retryReason } from './attempt_report.ts'
import { ServiceLimits, type RateFamily } from './rate_limiter.ts'
import { integerHeader, parseRetryAfter } from './response_headers.ts'
import type {
  RateLimitState,
  RawResponse,
  RequestSpec,
  TransportOptions,
} from './transport_types.ts'

export type { ClientLogger } from './types.ts'
export type {
  RateLimitState,
  RawResponse,
  RequestSpec,
  RetryOptions,
  TransportOptions,
} from './transport_types.ts'

/** From this timeout on, undici's coarse timers (±1 s) are precise enough. */
export const COARSE_TIMER_MIN_MS = 5000

/** undici's timeouts: no headers in time, or the body paused too long. */
const TIMED_OUT = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT'])

/** Connection errors that prove the request never left this process. */
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT'])

/**
 * Sends requests with the retry rules of the spec (Errors, rules 2 and 3): 5xx, network
 * errors and timeouts back off exponentially; 429 and 409 IDEMPOTENCY_REQUEST_IN_FLIGHT
 * wait Retry-After (the backoff when it is missing or unusable); every other 4xx fails at
 * once. A family the service reported exhausted waits for its reset before sending.
 * Decisions read the status and the code, never the error's text.
 */
export class Transport {
  #baseUrl: string
  /** Built once: undici only reads them. The key stays inside this private field. */
  #authHeaders: Record<string, string>
  #publicHeaders: Record<string, string>
  #agent: Dispatcher
  #ownsAgent: boolean
  #limits: ServiceLimits
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
    this.#limits = new ServiceLimits(options.now)
    this.#agent =
      options.dispatcher ??
      new Agent({ keepAliveTimeout: 10_000, keepAliveMaxTimeout: 60_000, connections: 64 })
  }

  /**
   * Sends the request, retrying as the rules allow; throws the last error otherwise. The whole
   * call, all its attempts, is one `svc-payouts.client.request` trace when anybody subscribes.
   */
  async send(spec: RequestSpec): Promise<RawResponse> {
    let response: RawResponse | undefined
    // The trace's work resolves to nothing: tracePromise puts what it resolves to on the
    // context as `result`, and the answer's body never goes there.
    await traced(
      channels.clientRequest,
      () => ({ endpoint: spec.endpoint, method: spec.method, route: spec.route, attempts: 0 }),
      async (trace) => {
        response = await this.#send(spec, trace)
      }
    )
    return response!
  }

  async #send(spec: RequestSpec, trace: ClientRequestContext | undefined): Promise<RawResponse> {
    const { retry, hooks } = this.options
    let lastError: PayoutsApiError | undefined
    // Whether any attempt so far may have reached the service: a later attempt that surely
    // did not (a refused connection) says nothing about the earlier one.
    let mayHaveReached = false
    let held = this.#limits.waitFor(spec.family)
    for (let attempt = 0; ; attempt++) {
      if (held > retry.maxRetryAfterMs)
        throw this.#heldTooLong(spec, held, lastError, mayHaveReached)
      const backoff = lastError ? this.#waitBefore(lastError, attempt - 1) : 0
      const wait = Math.max(backoff, held)
      if (lastError) {
        this.options.logger?.debug(
          { method: spec.method, path: spec.path, attempt, waitMs: wait, code: lastError.code },
          'payouts request retry'
        )
      } else if (wait > 0) {
        this.options.logger?.debug(
          { method: spec.method, path: spec.path, family: spec.family, waitMs: wait },
          'payouts request held until the rate limit resets'
        )
      }
      if (lastError || wait > 0) {
        await this.options.sleep(wait)
        if (spec.signal?.aborted) {
          throw new PayoutsAbortedError({
            status: 0,
            code: 'ABORTED',
            message: 'aborted',
            outcomeUnknown: mayHaveReached,
          })
        }
      }
      if (this.options.limiter) await this.options.limiter.acquire(spec.family)
      if (trace) {
        trace.attempts = attempt + 1
        if (lastError) trace.retryReason = retryReason(lastError)
      }
      if (hooks?.has('request')) {
        hooks.emit('request', {
          endpoint: spec.endpoint,
          method: spec.method,
          route: spec.route,
          attempt: attempt + 1,
          idempotent: spec.safeToRepeat,
        })
      }
      const startedAt = performance.now()
      const outcome = await this.#attempt(spec)
      const failed = outcome instanceof PayoutsApiError
      let again = false
      if (failed) {
        lastError = outcome
        mayHaveReached ||= outcome.outcomeUnknown
        again = attempt < retry.maxRetries && this.#retryable(outcome, spec)
        // The next attempt's hold, read now so willRetry knows whether it is too long.
        if (again) held = this.#limits.waitFor(spec.family)
      }
      if (trace) {
        trace.status = outcome.status
        // The service's spec names no request id header.
        trace.requestId = null
      }
      if (hooks?.has('response')) {
        const willRetry = again && held <= retry.maxRetryAfterMs
        hooks.emit('response', responseEvent(spec, attempt + 1, outcome, startedAt, willRetry))
      }
      if (!failed) return outcome
      if (!again) break
    }
    throw withEarlierOutcome(lastError!, mayHaveReached)
  }

  #retryable(error: PayoutsApiError, spec: RequestSpec): boolean {
    if (error instanceof PayoutsAbortedError) return false
    if (waitsRetryAfter(error)) {
      return error.retryAfterMs === null || error.retryAfterMs <= this.options.retry.maxRetryAfterMs
    }
    // Confirm-escrow's 500 is its persistent failure, whatever the body says (spec).
    if (spec.escrowConfirm && error.status === 500) return false
    const transient =
      error.status >= 500 ||
      error instanceof PayoutsNetworkError ||
      error instanceof PayoutsTimeoutError
    if (!transient) return false
    return spec.safeToRepeat || !error.outcomeUnknown
  }

  #waitBefore(error: PayoutsApiError, retryIndex: number): number {
    const { baseDelayMs, jitter } = this.options.retry
    if (waitsRetryAfter(error) && error.retryAfterMs !== null) return error.retryAfterMs
    const base = baseDelayMs * 2 ** retryIndex
    return Math.max(0, Math.round(base * (1 + jitter * (2 * this.options.random() - 1))))
  }

  /** The family is held past the ceiling: refused here, nothing sent. */
  #heldTooLong(
    spec: RequestSpec,
    heldMs: number,
    lastError: PayoutsApiError | undefined,
    mayHaveReached: boolean
  ) {
    return new RateLimitedError({
      status: 429,
      code: 'RATE_LIMITED',
      message: `the service's ${spec.family} rate limit resets in ${Math.ceil(heldMs / 1000)} s, past retry.maxRetryAfterMs; not sent`,
      retryAfter: heldMs / 1000,
      // An earlier attempt of this call may have reached the service.
      outcomeUnknown: mayHaveReached,
      cause: lastError,
    })
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
    let retryAfter: number | null
    try {
      const response = await undiciRequest(url, this.#requestOptions(spec, headers, payload))
      status = response.statusCode
      // The service's times are read against its own clock: its Date, when it sends one;
      // read only when an answer carries a time to read (a Retry-After, a reset).
      const { headers: answered } = response
      let serverNow: number | undefined
      const now = () => (serverNow ??= serverClock(answered.date, this.options.now))
      retryAfter =
        answered['retry-after'] === undefined
          ? null
          : parseRetryAfter(answered['retry-after'], now())
      this.#readRateLimit(spec.family, status, answered, retryAfter, now)
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
    return errorFromResponse(status, parsed.success ? parsed.data : null, retryAfter, {
      escrowConfirm: spec.escrowConfirm,
    })
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

  #readRateLimit(
    family: RateFamily,
    status: number,
    headers: Record<string, string | string[] | undefined>,
    retryAfter: number | null,
    serverNow: () => number
  ) {
    const limit = integerHeader(headers['x-ratelimit-limit'])
    const remaining = integerHeader(headers['x-ratelimit-remaining'])
    const reset = integerHeader(headers['x-ratelimit-reset'])
    if (limit !== null && remaining !== null) {
      this.rateLimit = { limit, remaining, reset: reset ?? 0 }
    }
    this.#limits.observe(family, {
      status,
      remaining,
      // Only an exhausted budget waits for its reset.
      resetInMs: reset === null || remaining !== 0 ? null : reset * 1000 - serverNow(),
      retryAfterMs: retryAfter === null ? null : Math.round(retryAfter * 1000),
    })
  }

  /** Closes the keep-alive sockets of the agent this transport created. */
  async close() {
    if (this.#ownsAgent) await this.#agent.close()
  }
}

/** The service's time when it answered: its `Date` header, else the local clock. */
function serverClock(date: string | string[] | undefined, localNow: () => number): number {
  const serverDate = typeof date === 'string' ? Date.parse(date) : Number.NaN
  return Number.isNaN(serverDate) ? localNow() : serverDate
}

/** 429 and 409 IDEMPOTENCY_REQUEST_IN_FLIGHT wait what the service says. */
function waitsRetryAfter(error: PayoutsApiError) {
  return error.status === 429 || error.code === 'IDEMPOTENCY_REQUEST_IN_FLIGHT'
}

/**
 * The final error of a call whose earlier attempt may have reached the service. An answer
 * that settles the request (a 2xx, a 4xx other than 429 and 409: with an Idempotency-Key
 * the service replays what it did) keeps its own outcome; anything else (no answer, a
 * refused connection, 429, 409, 5xx) cannot say the earlier attempt did nothing.
 */
function withEarlierOutcome(error: PayoutsApiError, mayHaveReached: boolean): PayoutsApiError {
  if (!mayHaveReached || error.outcomeUnknown) return error
  const settles = error.status >= 400 && error.status < 500 && ![409, 429].includes(error.status)
  if (settles) return error
  Object.defineProperty(error, 'outcomeUnknown', { value: true, enumerable: true })
  return error
}
