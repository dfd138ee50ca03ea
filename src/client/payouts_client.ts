import { inspect } from 'node:util'
import type { Dispatcher } from 'undici'
import { DEFAULT_PATHS, ENDPOINTS, type PathName } from '../contract/endpoints.ts'
import { detectFlow } from '../schemas/common.ts'
import type { ConfirmEscrowDepositBody } from '../schemas/requests.ts'
import type { ExecuteResult } from '../schemas/resources.ts'
import { environmentOfKey, type PayoutsEnvironment } from './api_key.ts'
import { EndpointCaller } from './endpoint_caller.ts'
import { PayoutsValidationError } from './errors.ts'
import { ClientHooks, type ClientHookListener, type ClientHookName } from './hooks.ts'
import { RateLimiter, type BucketSpec, type RateFamily } from './rate_limiter.ts'
import { quotesResource, type QuotesResource } from './resources/quotes.ts'
import { recipientsResource, type RecipientsResource } from './resources/recipients.ts'
import { webhooksResource, type WebhooksResource } from './resources/webhooks.ts'
import {
  Transport,
  type ClientLogger,
  type RateLimitState,
  type RetryOptions,
} from './transport.ts'
import type { BatchRow, CallOptions, ExecuteInput, ListQuery } from './types.ts'
import {
  callOptions,
  fieldOf,
  longIdSchema,
  parseResponse,
  requireId,
  validate,
  validateExecuteInput,
} from './validation.ts'
import { PACKAGE_VERSION } from './version.ts'
import { redactCredentials } from './redact.ts'

export type { BatchRow, CallOptions, ExecuteInput, ListQuery } from './types.ts'
export { validateExecuteInput } from './validation.ts'

/** Options of `new PayoutsClient(...)`. */
export interface PayoutsClientOptions {
  apiKey: string
  /** Base URL, including the `/api` prefix when the host uses it. */
  baseUrl: string
  /** Must match the key: sk_test_ is sandbox, sk_live_ is production. */
  environment?: PayoutsEnvironment
  timeoutMs?: number
  retry?: Partial<RetryOptions>
  /** Client-side token buckets; `false` turns them off, an object overrides families. */
  rateLimiter?: boolean | Partial<Record<RateFamily, BucketSpec>>
  paths?: Partial<Record<PathName, string>>
  userAgent?: string
  logger?: ClientLogger
  /** Development only: allow http://127.0.0.1 and localhost webhook URLs (the emulator). */
  allowInsecureLoopbackWebhooks?: boolean
  /**
   * The undici dispatcher requests go through (default: the client's own keep-alive Agent,
   * closed by `close()`; one given here is not). The in-process emulator has one.
   */
  dispatcher?: Dispatcher
  /** Injectable for tests: how retries wait, the jitter source, and the clock (epoch ms). */
  sleep?: (ms: number) => Promise<void>
  random?: () => number
  now?: () => number
}

/**
 * Typed client of the Cross-Border Payout Service. Framework-free: it never imports
 * `@adonisjs/*`. The API key is held in a private field and never printed.
 */
export class PayoutsClient {
  readonly environment: PayoutsEnvironment
  readonly baseUrl: string
  /** Quotes: every fiat-to-stablecoin route, every onramp route, the best onramp route. */
  readonly quotes: QuotesResource
  /** Recipients: create (one or many), list, get, update, delete. */
  readonly recipients: RecipientsResource
  /** Webhook subscriptions (secret rotation included) and deliveries (replay included). */
  readonly webhooks: WebhooksResource
  #transport: Transport
  #endpoints: EndpointCaller
  #hooks: ClientHooks

  constructor(options: PayoutsClientOptions) {
    this.environment = environmentOfKey(options.apiKey, options.environment)
    if (typeof options.baseUrl !== 'string' || !URL.canParse(options.baseUrl)) {
      throw new PayoutsValidationError('baseUrl', 'must be an absolute URL')
    }
    this.baseUrl = options.baseUrl
    const limiter =
      options.rateLimiter === false
        ? null
        : new RateLimiter(typeof options.rateLimiter === 'object' ? options.rateLimiter : {})
    this.#hooks = new ClientHooks(options.logger)
    this.#transport = new Transport(options.apiKey, {
      baseUrl: options.baseUrl,
      timeoutMs: options.timeoutMs ?? 30_000,
      retry: {
        maxRetries: 5,
        baseDelayMs: 1000,
        jitter: 0.2,
        maxRetryAfterMs: 120_000,
        ...options.retry,
      },
      userAgent: options.userAgent ?? `@svc/adonis-payouts/${PACKAGE_VERSION}`,
      limiter,
      logger: options.logger,
      sleep: options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms))),
      random: options.random ?? Math.random,
      now: options.now ?? Date.now,
      dispatcher: options.dispatcher,
      hooks: this.#hooks,
    })
    const paths: Record<PathName, string> = { ...DEFAULT_PATHS, ...options.paths }
    this.#endpoints = new EndpointCaller(this.#transport, paths)
    this.quotes = quotesResource(this.#endpoints)
    this.recipients = recipientsResource(this.#endpoints)
    this.webhooks = webhooksResource(
      this.#endpoints,
      options.allowInsecureLoopbackWebhooks ?? false
    )
  }

  /**
   * Listens to every attempt of every call: `request` before it is sent, `response` after its
   * answer or failure (`willRetry` says whether another attempt follows). The events carry the
   * endpoint, the method, the path template (`/payouts/{id}`, never the id), the attempt and,
   * for `response`, the status (0 without an answer), the duration, the error code and the
   * wait asked for; never the key, a header, the Idempotency-Key value or a body. Listeners run
   * synchronously; one that throws is logged at warn (without its error) and ignored.
   */
  on<Name extends ClientHookName>(name: Name, listener: ClientHookListener<Name>): this {
    this.#hooks.on(name, listener)
    return this
  }

  /** Removes a listener added with `on`. */
  off<Name extends ClientHookName>(name: Name, listener: ClientHookListener<Name>): this {
    this.#hooks.off(name, listener)
    return this
  }

  /** The last X-RateLimit-* headers seen, or null before the first answer. */
  get rateLimit(): RateLimitState | null {
    return this.#transport.rateLimit
  }

  /** GET /config/coverage: public, no key sent. */
  async getCoverage() {
    return this.#endpoints.call('getCoverage')
  }

  /**
   * POST /rfq/execute. The flow is `input.flow` or inferred from the currencies; the
   * flow's required fields are checked before sending. One Idempotency-Key is used for
   * every retry, so the service never creates a second payout.
   */
  async execute(input: ExecuteInput, options?: CallOptions): Promise<ExecuteResult> {
    const { flow, payload } = validateExecuteInput(input)
    const { body, status } = await this.#endpoints.send('execute', {
      body: payload,
      ...callOptions(options),
    })
    const data = parseResponse(ENDPOINTS.execute.response[flow], body, status).data
    return { flow, ...data } as ExecuteResult
  }

  /** POST /rfq/execute-batch (request and response shapes are spec gaps). */
  async executeBatch(body: { items: ExecuteInput[] }, options?: CallOptions) {
    const payload = validate(ENDPOINTS.executeBatch.request, body)
    const items = payload.items.map((item, index) => {
      const { flow: requested, ...rest } = item as ExecuteInput
      const flow = requested ?? detectFlow(rest)
      const result = ENDPOINTS.execute.request[flow].safeParse(rest)
      if (!result.success) {
        const issue = result.error.issues[0]
        throw new PayoutsValidationError(`items.${index}.${fieldOf(issue)}`, issue.message)
      }
      return result.data
    })
    const response = await this.#endpoints.call('executeBatch', {
      body: { items },
      ...callOptions(options),
    })
    return response.data.results as BatchRow[]
  }

  /**
   * POST /rfq/confirm-escrow-deposit. Any 500, whatever its body, is an
   * EscrowConfirmationFailedError after one request. The call is idempotent on
   * (quoteId, txHash) (spec), so other 5xx, network errors and timeouts are retried with
   * the backoff, with or without an Idempotency-Key.
   */
  async confirmEscrowDeposit(body: ConfirmEscrowDepositBody, options?: CallOptions) {
    const payload = validate(ENDPOINTS.confirmEscrowDeposit.request, body)
    return this.#endpoints.call('confirmEscrowDeposit', {
      body: payload,
      ...callOptions(options),
    })
  }

  /** GET /rfq/status/{quoteId}. */
  async getQuoteStatus(quoteId: string) {
    return this.#endpoints.call('getQuoteStatus', { id: requireId(longIdSchema, quoteId) })
  }

  /** GET /payouts/{id}, by the execute UUID or the read id. */
  async getPayout(id: string, options?: { signal?: AbortSignal }) {
    return this.#endpoints.call('getPayout', {
      id: requireId(longIdSchema, id),
      signal: options?.signal,
    })
  }

  /** GET /payouts (a spec gap); returns one page and the cursor of the next. */
  async listPayouts(query: ListQuery & { status?: string } = {}) {
    return this.#endpoints.call('listPayouts', {
      query: { limit: query.limit, cursor: query.cursor, status: query.status },
    })
  }

  /** Closes the keep-alive sockets. */
  async close() {
    await this.#transport.close()
  }

  /** What JSON.stringify shows: never the key, nor the credentials of the base URL. */
  toJSON() {
    return { environment: this.environment, baseUrl: redactCredentials(this.baseUrl) }
  }

  [inspect.custom]() {
    const baseUrl = redactCredentials(this.baseUrl)
    return `PayoutsClient { environment: '${this.environment}', baseUrl: '${baseUrl}' }`
  }
}
