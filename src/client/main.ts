/** `@svc/adonis-payouts/client`: the framework-free client of the Payout Service. */
export { PayoutsClient } from './payouts_client.ts'
export type {
  PayoutsClientOptions,
  CallOptions,
  ExecuteInput,
  BatchRow,
  ListQuery,
} from './payouts_client.ts'
export * from './errors.ts'
export { DEFAULT_PATHS, type PathName } from './paths.ts'
export { DEFAULT_BUCKETS, RateLimiter, type BucketSpec, type RateFamily } from './rate_limiter.ts'
export { parseRetryAfter, type RateLimitState, type RetryOptions } from './transport.ts'
export type { PayoutsEnvironment } from './api_key.ts'
export type * from '../schemas/resources.ts'
export type * from '../schemas/requests.ts'
