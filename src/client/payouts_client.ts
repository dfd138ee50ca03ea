import { randomUUID } from 'node:crypto'
import { inspect } from 'node:util'
import type { z } from 'zod'
import { detectFlow, FLOWS, idempotencyKeySchema, type ExecuteFlow } from '../schemas/common.ts'
import {
  confirmEscrowDepositSchema,
  executeBatchSchema,
  executeSchemaByFlow,
  fiatToStablecoinQuoteQuerySchema,
  onrampQuoteQuerySchema,
  recipientBulkCreateSchema,
  recipientCreateSchema,
  recipientUpdateSchema,
  webhookSubscriptionCreateSchema,
  webhookSubscriptionUpdateSchema,
  type ConfirmEscrowDepositBody,
  type ExecuteBody,
  type RecipientCreateBody,
  type RecipientUpdateBody,
  type WebhookSubscriptionCreateBody,
  type WebhookSubscriptionUpdateBody,
} from '../schemas/requests.ts'
import {
  coverageSchema,
  executeDataSchemaByFlow,
  listOf,
  onrampQuoteSchema,
  payoutSchema,
  quoteStatusSchema,
  recipientSchema,
  stablecoinQuoteSchema,
  successWrapper,
  webhookDeliverySchema,
  webhookSubscriptionSchema,
  type ExecuteResult,
} from '../schemas/resources.ts'
import { z as zod } from 'zod'
import { environmentOfKey, type PayoutsEnvironment } from './api_key.ts'
import { PayoutsApiError, PayoutsValidationError } from './errors.ts'
import { DEFAULT_PATHS, fillPath, type PathName } from './paths.ts'
import { RateLimiter, type BucketSpec, type RateFamily } from './rate_limiter.ts'
import {
  Transport,
  type ClientLogger,
  type RateLimitState,
  type RequestSpec,
  type RetryOptions,
} from './transport.ts'
import { PACKAGE_VERSION } from './version.ts'

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
  /** Injectable for tests: how retries wait, the jitter source, and the clock (epoch ms). */
  sleep?: (ms: number) => Promise<void>
  random?: () => number
  now?: () => number
}

export interface CallOptions {
  idempotencyKey?: string
  signal?: AbortSignal
}

export interface ListQuery {
  limit?: number
  cursor?: string
}

/** Execute input: the body of any flow, optionally naming the flow (never sent). */
export type ExecuteInput = ExecuteBody & { flow?: ExecuteFlow } & Record<string, unknown>

/** Execute-batch result row. */
export type BatchRow =
  | { index: number; success: true; data: Record<string, unknown> }
  | { index: number; success: false; error: { code?: string; error?: string } }

function fieldOf(issue: z.core.$ZodIssue): string {
  return issue.path.map(String).join('.')
}

/** Validates input before anything is sent; the error names the field. */
function validate<T extends z.ZodType>(schema: T, input: unknown): z.output<T> {
  const result = schema.safeParse(input)
  if (!result.success) {
    const issue = result.error.issues[0]
    throw new PayoutsValidationError(fieldOf(issue), issue.message)
  }
  return result.data
}

/**
 * Checks an execute input as `execute` does before sending it: its flow (given or
 * inferred from the currencies) and that flow's body. Throws `PayoutsValidationError`.
 */
export function validateExecuteInput(input: ExecuteInput): {
  flow: ExecuteFlow
  payload: ExecuteBody
} {
  if (input === null || typeof input !== 'object') {
    throw new PayoutsValidationError('', 'execute input must be an object')
  }
  const { flow: requested, ...body } = input
  if (requested !== undefined && !FLOWS.includes(requested)) {
    throw new PayoutsValidationError('flow', `must be one of ${FLOWS.join(', ')}`)
  }
  const flow = requested ?? detectFlow(body)
  return { flow, payload: validate(executeSchemaByFlow[flow], body) }
}

/**
 * An identifier for a path. The common, valid case is checked by hand (in a warm request
 * path a zod parse of one string costs a few percent of a loopback round trip); anything
 * else goes through the schema, which produces the typed error.
 */
function requireId(schema: typeof idSchema | typeof longIdSchema, value: unknown): string {
  const max = schema === longIdSchema ? 255 : Number.POSITIVE_INFINITY
  if (typeof value === 'string' && value.length > 0 && value.length <= max) return value
  return validate(schema, value)
}

/** Parses a 2xx body; a body of the wrong shape is a typed error, not a ZodError. */
function parseResponse<T extends z.ZodType>(schema: T, body: unknown, status: number): z.output<T> {
  const result = schema.safeParse(body)
  if (!result.success) {
    const issue = result.error.issues[0]
    throw new PayoutsApiError({
      status,
      code: 'INVALID_RESPONSE',
      message: `unexpected response shape at ${fieldOf(issue) || '(root)'}: ${issue.message}`,
    })
  }
  return result.data
}

// Schemas are built once: building one costs more than the HTTP round trip on loopback.
const longIdSchema = zod.string().min(1).max(255)
const idSchema = zod.string().min(1)
const onrampQuotesSchema = successWrapper(zod.array(onrampQuoteSchema))
const bestOnrampSchema = successWrapper(onrampQuoteSchema)
const executeResponseSchemaByFlow = {
  fiat_to_fiat: successWrapper(executeDataSchemaByFlow.fiat_to_fiat),
  stablecoin_to_fiat: successWrapper(executeDataSchemaByFlow.stablecoin_to_fiat),
  onramp: successWrapper(executeDataSchemaByFlow.onramp),
}
const escrowConfirmedSchema = zod.looseObject({ success: zod.literal(true) })
const rotatedSecretSchema = zod.looseObject({
  id: zod.string(),
  secret: zod.string().startsWith('whsec_'),
})
const replayedDeliverySchema = zod.looseObject({
  id: zod.string(),
  replayOf: zod.string().optional(),
  status: zod.string().optional(),
})

const batchResultSchema = successWrapper(
  zod.looseObject({
    results: zod.array(
      zod.union([
        zod.looseObject({
          index: zod.number().int(),
          success: zod.literal(true),
          data: zod.record(zod.string(), zod.unknown()),
        }),
        zod.looseObject({
          index: zod.number().int(),
          success: zod.literal(false),
          error: zod.looseObject({ code: zod.string().optional(), error: zod.string().optional() }),
        }),
      ])
    ),
  })
)

/**
 * Typed client of the Cross-Border Payout Service. Framework-free: it never imports
 * `@adonisjs/*`. The API key is held in a private field and never printed.
 */
export class PayoutsClient {
  readonly environment: PayoutsEnvironment
  readonly baseUrl: string
  #transport: Transport
  #paths: Record<PathName, string>
  #subscriptionCreateSchema: ReturnType<typeof webhookSubscriptionCreateSchema>
  #subscriptionUpdateSchema: ReturnType<typeof webhookSubscriptionUpdateSchema>

  constructor(options: PayoutsClientOptions) {
    this.environment = environmentOfKey(options.apiKey, options.environment)
    if (typeof options.baseUrl !== 'string' || !URL.canParse(options.baseUrl)) {
      throw new PayoutsValidationError('baseUrl', 'must be an absolute URL')
    }
    this.baseUrl = options.baseUrl
    this.#paths = { ...DEFAULT_PATHS, ...options.paths }
    const insecureWebhooks = options.allowInsecureLoopbackWebhooks ?? false
    this.#subscriptionCreateSchema = webhookSubscriptionCreateSchema(insecureWebhooks)
    this.#subscriptionUpdateSchema = webhookSubscriptionUpdateSchema(insecureWebhooks)
    const limiter =
      options.rateLimiter === false
        ? null
        : new RateLimiter(typeof options.rateLimiter === 'object' ? options.rateLimiter : {})
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
    })
  }

  /** The last X-RateLimit-* headers seen, or null before the first answer. */
  get rateLimit(): RateLimitState | null {
    return this.#transport.rateLimit
  }

  #path(name: PathName, id?: string) {
    return fillPath(this.#paths[name], id)
  }

  #send(spec: RequestSpec) {
    return this.#transport.send(spec)
  }

  #idempotencyKey(options?: CallOptions): string {
    if (options?.idempotencyKey === undefined) return randomUUID()
    return validate(idempotencyKeySchema, options.idempotencyKey)
  }

  // --- Coverage and quotes --------------------------------------------------------

  /** GET /config/coverage: public, no key sent. */
  async getCoverage() {
    const { body, status } = await this.#send({
      method: 'GET',
      path: this.#path('coverage'),
      auth: false,
      safeToRepeat: true,
      family: 'default',
    })
    return parseResponse(coverageSchema, body, status)
  }

  readonly quotes = {
    /** Every fiat-to-stablecoin route. */
    fiatToStablecoin: async (query: {
      fromCurrency: string
      toCurrency: string
      amount: number
    }) => {
      const params = validate(fiatToStablecoinQuoteQuerySchema, query)
      const { body, status } = await this.#send({
        method: 'GET',
        path: this.#path('quotesFiatToStablecoin'),
        query: params,
        safeToRepeat: true,
        family: 'quotes',
      })
      return parseResponse(listOf(stablecoinQuoteSchema), body, status)
    },
    /** Every onramp route. */
    onramp: async (query: { sourceCurrency: string; amount: number; payoutCurrency?: string }) => {
      const params = validate(onrampQuoteQuerySchema, query)
      const { body, status } = await this.#send({
        method: 'GET',
        path: this.#path('quotesOnramp'),
        query: params,
        safeToRepeat: true,
        family: 'quotes',
      })
      return parseResponse(onrampQuotesSchema, body, status).data
    },
    /** The single best onramp route. */
    bestOnramp: async (query: {
      sourceCurrency: string
      amount: number
      payoutCurrency?: string
    }) => {
      const params = validate(onrampQuoteQuerySchema, query)
      const { body, status } = await this.#send({
        method: 'GET',
        path: this.#path('quotesOnrampBest'),
        query: params,
        safeToRepeat: true,
        family: 'quotes',
      })
      return parseResponse(bestOnrampSchema, body, status).data
    },
  }

  // --- Execute ------------------------------------------------------------------

  /**
   * POST /rfq/execute. The flow is `input.flow` or inferred from the currencies; the
   * flow's required fields are checked before sending. One Idempotency-Key is used for
   * every retry, so the service never creates a second payout.
   */
  async execute(input: ExecuteInput, options?: CallOptions): Promise<ExecuteResult> {
    const { flow, payload } = validateExecuteInput(input)
    const idempotencyKey = this.#idempotencyKey(options)
    const { body: response, status } = await this.#send({
      method: 'POST',
      path: this.#path('execute'),
      body: payload,
      idempotencyKey,
      safeToRepeat: true,
      family: 'execute',
      signal: options?.signal,
    })
    const data = parseResponse(executeResponseSchemaByFlow[flow], response, status).data
    return { flow, ...data } as ExecuteResult
  }

  /** POST /rfq/execute-batch (request and response shapes are spec gaps). */
  async executeBatch(body: { items: ExecuteInput[] }, options?: CallOptions) {
    const payload = validate(executeBatchSchema, body)
    const items = payload.items.map((item, index) => {
      const { flow: requested, ...rest } = item as ExecuteInput
      const flow = requested ?? detectFlow(rest)
      const result = executeSchemaByFlow[flow].safeParse(rest)
      if (!result.success) {
        const issue = result.error.issues[0]
        throw new PayoutsValidationError(`items.${index}.${fieldOf(issue)}`, issue.message)
      }
      return result.data
    })
    const { body: response, status } = await this.#send({
      method: 'POST',
      path: this.#path('executeBatch'),
      body: { items },
      idempotencyKey: this.#idempotencyKey(options),
      safeToRepeat: true,
      family: 'execute',
      signal: options?.signal,
    })
    return parseResponse(batchResultSchema, response, status).data.results as BatchRow[]
  }

  /**
   * POST /rfq/confirm-escrow-deposit. Any 500, whatever its body, is an
   * EscrowConfirmationFailedError after one request. The call is idempotent on
   * (quoteId, txHash) (spec), so other 5xx, network errors and timeouts are retried with
   * the backoff, with or without an Idempotency-Key.
   */
  async confirmEscrowDeposit(body: ConfirmEscrowDepositBody, options?: CallOptions) {
    const payload = validate(confirmEscrowDepositSchema, body)
    const idempotencyKey =
      options?.idempotencyKey === undefined
        ? undefined
        : validate(idempotencyKeySchema, options.idempotencyKey)
    const { body: response, status } = await this.#send({
      method: 'POST',
      path: this.#path('confirmEscrowDeposit'),
      body: payload,
      idempotencyKey,
      safeToRepeat: true,
      family: 'execute',
      escrowConfirm: true,
      signal: options?.signal,
    })
    return parseResponse(escrowConfirmedSchema, response, status)
  }

  /** GET /rfq/status/{quoteId}. */
  async getQuoteStatus(quoteId: string) {
    const id = requireId(longIdSchema, quoteId)
    const { body, status } = await this.#send({
      method: 'GET',
      path: this.#path('quoteStatus', id),
      safeToRepeat: true,
      family: 'default',
    })
    return parseResponse(quoteStatusSchema, body, status)
  }

  // --- Payouts --------------------------------------------------------------------

  /** GET /payouts/{id}, by the execute UUID or the read id. */
  async getPayout(id: string, options?: { signal?: AbortSignal }) {
    const payoutId = requireId(longIdSchema, id)
    const { body, status } = await this.#send({
      method: 'GET',
      path: this.#path('payout', payoutId),
      safeToRepeat: true,
      family: 'default',
      signal: options?.signal,
    })
    return parseResponse(payoutSchema, body, status)
  }

  /** GET /payouts (a spec gap); returns one page and the cursor of the next. */
  async listPayouts(query: ListQuery & { status?: string } = {}) {
    const { body, status } = await this.#send({
      method: 'GET',
      path: this.#path('payouts'),
      query: { limit: query.limit, cursor: query.cursor, status: query.status },
      safeToRepeat: true,
      family: 'default',
    })
    return parsePage(payoutSchema, body, status)
  }

  // --- Recipients -------------------------------------------------------------------

  readonly recipients = {
    create: async (body: RecipientCreateBody, options?: CallOptions) => {
      const payload = validate(recipientCreateSchema, body)
      const { body: response, status } = await this.#send({
        method: 'POST',
        path: this.#path('recipients'),
        body: payload,
        idempotencyKey: this.#idempotencyKey(options),
        safeToRepeat: true,
        family: 'default',
        signal: options?.signal,
      })
      return parseResponse(recipientSchema, response, status)
    },
    bulkCreate: async (body: { recipients: RecipientCreateBody[] }, options?: CallOptions) => {
      const payload = validate(recipientBulkCreateSchema, body)
      const { body: response, status } = await this.#send({
        method: 'POST',
        path: this.#path('recipientsBulk'),
        body: payload,
        idempotencyKey: this.#idempotencyKey(options),
        safeToRepeat: true,
        family: 'default',
        signal: options?.signal,
      })
      return parseResponse(listOf(recipientSchema), response, status)
    },
    list: async (query: ListQuery = {}) => {
      const { body, status } = await this.#send({
        method: 'GET',
        path: this.#path('recipients'),
        query: { limit: query.limit, cursor: query.cursor },
        safeToRepeat: true,
        family: 'default',
      })
      return parsePage(recipientSchema, body, status)
    },
    get: async (id: string) => {
      const { body, status } = await this.#send({
        method: 'GET',
        path: this.#path('recipient', requireId(idSchema, id)),
        safeToRepeat: true,
        family: 'default',
      })
      return parseResponse(recipientSchema, body, status)
    },
    update: async (id: string, body: RecipientUpdateBody) => {
      const payload = validate(recipientUpdateSchema, body)
      const { body: response, status } = await this.#send({
        method: 'PATCH',
        path: this.#path('recipient', requireId(idSchema, id)),
        body: payload,
        safeToRepeat: false,
        family: 'default',
      })
      return parseResponse(recipientSchema, response, status)
    },
    delete: async (id: string) => {
      await this.#send({
        method: 'DELETE',
        path: this.#path('recipient', requireId(idSchema, id)),
        safeToRepeat: false,
        family: 'default',
      })
    },
  }

  // --- Webhooks ----------------------------------------------------------------------

  readonly webhooks = {
    subscriptions: {
      /** Creates a subscription; the response carries the whsec_ secret, once. */
      create: async (body: WebhookSubscriptionCreateBody, options?: CallOptions) => {
        const payload = validate(this.#subscriptionCreateSchema, body)
        const { body: response, status } = await this.#send({
          method: 'POST',
          path: this.#path('subscriptions'),
          body: payload,
          idempotencyKey: this.#idempotencyKey(options),
          safeToRepeat: true,
          family: 'default',
          signal: options?.signal,
        })
        return parseResponse(webhookSubscriptionSchema, response, status)
      },
      list: async () => {
        const { body, status } = await this.#send({
          method: 'GET',
          path: this.#path('subscriptions'),
          safeToRepeat: true,
          family: 'default',
        })
        return parsePage(webhookSubscriptionSchema, body, status).data
      },
      get: async (id: string) => {
        const { body, status } = await this.#send({
          method: 'GET',
          path: this.#path('subscription', requireId(idSchema, id)),
          safeToRepeat: true,
          family: 'default',
        })
        return parseResponse(webhookSubscriptionSchema, body, status)
      },
      update: async (id: string, body: WebhookSubscriptionUpdateBody) => {
        const payload = validate(this.#subscriptionUpdateSchema, body)
        const { body: response, status } = await this.#send({
          method: 'PATCH',
          path: this.#path('subscription', requireId(idSchema, id)),
          body: payload,
          safeToRepeat: false,
          family: 'default',
        })
        return parseResponse(webhookSubscriptionSchema, response, status)
      },
      delete: async (id: string) => {
        await this.#send({
          method: 'DELETE',
          path: this.#path('subscription', requireId(idSchema, id)),
          safeToRepeat: false,
          family: 'default',
        })
      },
      /** Not idempotent: the old secret dies at once, so it is never repeated blindly. */
      rotateSecret: async (id: string) => {
        const { body, status } = await this.#send({
          method: 'POST',
          path: this.#path('subscriptionRotateSecret', requireId(idSchema, id)),
          safeToRepeat: false,
          family: 'default',
        })
        return parseResponse(rotatedSecretSchema, body, status)
      },
    },
    deliveries: {
      list: async (query: { subscriptionId?: string; status?: string } & ListQuery = {}) => {
        const { body, status } = await this.#send({
          method: 'GET',
          path: this.#path('deliveries'),
          query: { ...query },
          safeToRepeat: true,
          family: 'default',
        })
        return parsePage(webhookDeliverySchema, body, status).data
      },
      get: async (id: string) => {
        const { body, status } = await this.#send({
          method: 'GET',
          path: this.#path('delivery', requireId(idSchema, id)),
          safeToRepeat: true,
          family: 'default',
        })
        return parseResponse(webhookDeliverySchema, body, status)
      },
      /** Asks the service to re-enqueue a delivery; 202 with the new delivery id. */
      replay: async (id: string) => {
        const { body, status } = await this.#send({
          method: 'POST',
          path: this.#path('deliveryReplay', requireId(idSchema, id)),
          safeToRepeat: false,
          family: 'replay',
        })
        return parseResponse(replayedDeliverySchema, body, status)
      },
    },
  }

  /** Closes the keep-alive sockets. */
  async close() {
    await this.#transport.close()
  }

  toJSON() {
    return { environment: this.environment, baseUrl: this.baseUrl }
  }

  [inspect.custom]() {
    return `PayoutsClient { environment: '${this.environment}', baseUrl: '${this.baseUrl}' }`
  }
}

/** A page of a list endpoint: `{ data, nextCursor }` or a bare array (spec gap). */
const pageSchemas = new WeakMap<z.ZodType, z.ZodType>()
function parsePage<T extends z.ZodType>(item: T, body: unknown, status: number) {
  const page = (pageSchemas.get(item) ?? pageSchema(item)) as ReturnType<typeof pageSchema<T>>
  pageSchemas.set(item, page)
  return parseResponse(page, body, status)
}

function pageSchema<T extends z.ZodType>(item: T) {
  return zod.union([
    zod.array(item).transform((data) => ({ data, nextCursor: null as string | null })),
    zod
      .looseObject({ data: zod.array(item), nextCursor: zod.string().nullish() })
      .transform((value) => ({ data: value.data, nextCursor: value.nextCursor ?? null })),
  ])
}
