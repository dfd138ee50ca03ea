/** `@svc/adonis-payouts/client`: the framework-free client of the Payout Service. */
export { PayoutsClient } from './payouts_client.ts'
export type { PayoutsClientOptions } from './payouts_client.ts'
export type { CallOptions, ExecuteInput, BatchRow, ListQuery } from './types.ts'
export type {
  ClientHookEvents,
  ClientHookListener,
  ClientHookName,
  ClientRequestEvent,
  ClientResponseEvent,
} from './hooks.ts'
export type { EndpointName } from '../contract/endpoints.ts'
export * from './errors.ts'
export { DEFAULT_PATHS, type PathName } from './paths.ts'
export { DEFAULT_BUCKETS, RateLimiter, type BucketSpec, type RateFamily } from './rate_limiter.ts'
export { parseRetryAfter } from './response_headers.ts'
export type { RateLimitState, RetryOptions } from './transport.ts'
export type { PayoutsEnvironment } from './api_key.ts'
export type * from '../schemas/resources.ts'
export type * from '../schemas/requests.ts'
