import type { z } from 'zod'
import type { ExecuteFlow } from '../schemas/common.ts'
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
} from '../schemas/requests.ts'
import {
  bestOnrampQuoteSchema,
  coverageSchema,
  escrowConfirmedSchema,
  executeBatchResultSchema,
  executeResponseSchemaByFlow,
  listOf,
  onrampQuotesSchema,
  pageOf,
  payoutSchema,
  quoteStatusSchema,
  recipientSchema,
  replayedDeliverySchema,
  rotatedSecretSchema,
  stablecoinQuoteSchema,
  webhookDeliverySchema,
  webhookSubscriptionSchema,
} from '../schemas/resources.ts'
import type { RateFamily } from './rate_limits.ts'

export { RATE_LIMITS, type RateFamily, type RateLimit } from './rate_limits.ts'

/** The API key scopes the service knows; each authenticated endpoint needs one. */
export const SCOPES = [
  'quotes:read',
  'payouts:write',
  'payouts:read',
  'recipients:write',
  'recipients:read',
  'webhooks:write',
  'webhooks:read',
] as const
export type Scope = (typeof SCOPES)[number]

export type HttpMethod = 'GET' | 'POST' | 'PATCH' | 'DELETE'

/**
 * How an endpoint treats the Idempotency-Key header:
 * - `always`: the service honours it and the client sends one on every call (a fresh UUID
 *   when the caller gives none), so a retry never does the work twice;
 * - `if-given`: the service honours it, but the call is idempotent without it, so the
 *   client sends only the caller's;
 * - `never`: the service ignores it.
 */
export type IdempotencyKeyUse = 'always' | 'if-given' | 'never'

/**
 * A schema, a schema per execute flow (execute picks the flow from the currencies), or a
 * schema factory taking the emulator's switch for http loopback webhook URLs.
 */
export type SchemaSource =
  | z.ZodType
  | Readonly<Record<ExecuteFlow, z.ZodType>>
  | ((allowInsecureLoopback: boolean) => z.ZodType)

/** One endpoint of the Payout Service, as both the client and the emulator see it. */
export interface EndpointSpec {
  method: HttpMethod
  /** Path template without the optional `/api` prefix; `{id}` is one path segment. */
  path: string
  /** The key of the client's `paths` option that overrides this path. */
  pathName: string
  /** The scope the API key needs; null for a public endpoint (no key sent). */
  scope: Scope | null
  family: RateFamily
  idempotencyKey: IdempotencyKeyUse
  /**
   * Confirm-escrow-deposit's error contract: errors come as `{ success: false, error }`,
   * and any 500 is its lasting failure (never retried, kept by the idempotency record).
   */
  escrowConfirmation?: true
  /** The body (POST, PATCH) or query (GET) the client validates before sending. */
  request: SchemaSource | null
  /** The 2xx body; null when the client reads none (204). */
  response: SchemaSource | null
}

/**
 * Every endpoint of the service, declared once: the client builds its requests from this
 * table and the emulator routes by it, in this order. Paths and shapes the spec does not
 * show are REST-conventional choices (docs/spec-gaps.md).
 */
export const ENDPOINTS = {
  getCoverage: {
    method: 'GET',
    path: '/config/coverage',
    pathName: 'coverage',
    scope: null,
    family: 'default',
    idempotencyKey: 'never',
    request: null,
    response: coverageSchema,
  },
  fiatToStablecoinQuotes: {
    method: 'GET',
    path: '/quotes/fiat-to-stablecoin/all',
    pathName: 'quotesFiatToStablecoin',
    scope: 'quotes:read',
    family: 'quotes',
    idempotencyKey: 'never',
    request: fiatToStablecoinQuoteQuerySchema,
    response: listOf(stablecoinQuoteSchema),
  },
  onrampQuotes: {
    method: 'GET',
    path: '/quotes/onramp/all',
    pathName: 'quotesOnramp',
    scope: 'quotes:read',
    family: 'quotes',
    idempotencyKey: 'never',
    request: onrampQuoteQuerySchema,
    response: onrampQuotesSchema,
  },
  bestOnrampQuote: {
    method: 'GET',
    path: '/quotes/onramp/best',
    pathName: 'quotesOnrampBest',
    scope: 'quotes:read',
    family: 'quotes',
    idempotencyKey: 'never',
    request: onrampQuoteQuerySchema,
    response: bestOnrampQuoteSchema,
  },
  execute: {
    method: 'POST',
    path: '/rfq/execute',
    pathName: 'execute',
    scope: 'payouts:write',
    family: 'execute',
    idempotencyKey: 'always',
    request: executeSchemaByFlow,
    response: executeResponseSchemaByFlow,
  },
  executeBatch: {
    method: 'POST',
    path: '/rfq/execute-batch',
    pathName: 'executeBatch',
    scope: 'payouts:write',
    family: 'execute',
    idempotencyKey: 'always',
    request: executeBatchSchema,
    response: executeBatchResultSchema,
  },
  confirmEscrowDeposit: {
    method: 'POST',
    path: '/rfq/confirm-escrow-deposit',
    pathName: 'confirmEscrowDeposit',
    scope: 'payouts:write',
    family: 'execute',
    idempotencyKey: 'if-given',
    escrowConfirmation: true,
    request: confirmEscrowDepositSchema,
    response: escrowConfirmedSchema,
  },
  getQuoteStatus: {
    method: 'GET',
    path: '/rfq/status/{id}',
    pathName: 'quoteStatus',
    scope: 'payouts:read',
    family: 'default',
    idempotencyKey: 'never',
    request: null,
    response: quoteStatusSchema,
  },
  listPayouts: {
    method: 'GET',
    path: '/payouts',
    pathName: 'payouts',
    scope: 'payouts:read',
    family: 'default',
    idempotencyKey: 'never',
    request: null,
    response: pageOf(payoutSchema),
  },
  getPayout: {
    method: 'GET',
    path: '/payouts/{id}',
    pathName: 'payout',
    scope: 'payouts:read',
    family: 'default',
    idempotencyKey: 'never',
    request: null,
    response: payoutSchema,
  },
  createRecipient: {
    method: 'POST',
    path: '/recipients',
    pathName: 'recipients',
    scope: 'recipients:write',
    family: 'default',
    idempotencyKey: 'always',
    request: recipientCreateSchema,
    response: recipientSchema,
  },
  bulkCreateRecipients: {
    method: 'POST',
    path: '/recipients/bulk',
    pathName: 'recipientsBulk',
    scope: 'recipients:write',
    family: 'default',
    idempotencyKey: 'always',
    request: recipientBulkCreateSchema,
    response: listOf(recipientSchema),
  },
  listRecipients: {
    method: 'GET',
    path: '/recipients',
    pathName: 'recipients',
    scope: 'recipients:read',
    family: 'default',
    idempotencyKey: 'never',
    request: null,
    response: pageOf(recipientSchema),
  },
  getRecipient: {
    method: 'GET',
    path: '/recipients/{id}',
    pathName: 'recipient',
    scope: 'recipients:read',
    family: 'default',
    idempotencyKey: 'never',
    request: null,
    response: recipientSchema,
  },
  updateRecipient: {
    method: 'PATCH',
    path: '/recipients/{id}',
    pathName: 'recipient',
    scope: 'recipients:write',
    family: 'default',
    idempotencyKey: 'never',
    request: recipientUpdateSchema,
    response: recipientSchema,
  },
  deleteRecipient: {
    method: 'DELETE',
    path: '/recipients/{id}',
    pathName: 'recipient',
    scope: 'recipients:write',
    family: 'default',
    idempotencyKey: 'never',
    request: null,
    response: null,
  },
  createSubscription: {
    method: 'POST',
    path: '/webhooks/subscriptions',
    pathName: 'subscriptions',
    scope: 'webhooks:write',
    family: 'default',
    idempotencyKey: 'always',
    request: webhookSubscriptionCreateSchema,
    response: webhookSubscriptionSchema,
  },
  listSubscriptions: {
    method: 'GET',
    path: '/webhooks/subscriptions',
    pathName: 'subscriptions',
    scope: 'webhooks:read',
    family: 'default',
    idempotencyKey: 'never',
    request: null,
    response: pageOf(webhookSubscriptionSchema),
  },
  getSubscription: {
    method: 'GET',
    path: '/webhooks/subscriptions/{id}',
    pathName: 'subscription',
    scope: 'webhooks:read',
    family: 'default',
    idempotencyKey: 'never',
    request: null,
    response: webhookSubscriptionSchema,
  },
  updateSubscription: {
    method: 'PATCH',
    path: '/webhooks/subscriptions/{id}',
    pathName: 'subscription',
    scope: 'webhooks:write',
    family: 'default',
    idempotencyKey: 'never',
    request: webhookSubscriptionUpdateSchema,
    response: webhookSubscriptionSchema,
  },
  deleteSubscription: {
    method: 'DELETE',
    path: '/webhooks/subscriptions/{id}',
    pathName: 'subscription',
    scope: 'webhooks:write',
    family: 'default',
    idempotencyKey: 'never',
    request: null,
    response: null,
  },
  rotateSubscriptionSecret: {
    method: 'POST',
    path: '/webhooks/subscriptions/{id}/rotate-secret',
    pathName: 'subscriptionRotateSecret',
    scope: 'webhooks:write',
    family: 'default',
    idempotencyKey: 'never',
    request: null,
    response: rotatedSecretSchema,
  },
  listDeliveries: {
    method: 'GET',
    path: '/webhooks/deliveries',
    pathName: 'deliveries',
    scope: 'webhooks:read',
    family: 'default',
    idempotencyKey: 'never',
    request: null,
    response: pageOf(webhookDeliverySchema),
  },
  getDelivery: {
    method: 'GET',
    path: '/webhooks/deliveries/{id}',
    pathName: 'delivery',
    scope: 'webhooks:read',
    family: 'default',
    idempotencyKey: 'never',
    request: null,
    response: webhookDeliverySchema,
  },
  replayDelivery: {
    method: 'POST',
    path: '/webhooks/deliveries/{id}/replay',
    pathName: 'deliveryReplay',
    scope: 'webhooks:write',
    family: 'replay',
    idempotencyKey: 'never',
    request: null,
    response: replayedDeliverySchema,
  },
} as const satisfies Record<string, EndpointSpec>

export type EndpointName = keyof typeof ENDPOINTS
export type PathName = (typeof ENDPOINTS)[EndpointName]['pathName']

/**
 * True when sending the request again cannot do the work twice: reads, and calls the
 * service dedupes (by Idempotency-Key or by their own content).
 */
export function isSafeToRepeat(endpoint: EndpointSpec): boolean {
  return endpoint.method === 'GET' || endpoint.idempotencyKey !== 'never'
}

/**
 * The default path of each path name, read from the table. Endpoints that share a name
 * (list and create, get, update and delete) share one path, so one override moves them all.
 */
export const DEFAULT_PATHS: Readonly<Record<PathName, string>> = Object.freeze(
  Object.values(ENDPOINTS).reduce(
    (paths, endpoint: EndpointSpec) => {
      const known = paths[endpoint.pathName as PathName]
      if (known !== undefined && known !== endpoint.path) {
        throw new Error(`path name ${endpoint.pathName} has two paths: ${known}, ${endpoint.path}`)
      }
      paths[endpoint.pathName as PathName] = endpoint.path
      return paths
    },
    {} as Record<PathName, string>
  )
)
