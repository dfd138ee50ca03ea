import { createError } from '@adonisjs/core/exceptions'

/**
 * Errors raised by the AdonisJS side of the plugin. API errors live in
 * `src/client/errors.ts` so that the client stays framework-free.
 */

/** The `config/payouts.ts` file holds a value that fails validation. */
export const E_INVALID_PAYOUTS_CONFIG = createError<[string]>(
  'Invalid payouts config: %s',
  'E_INVALID_PAYOUTS_CONFIG',
  500
)

/** A feature was used while switched off in the config (ledger, transmit, websocket). */
export const E_PAYOUTS_FEATURE_DISABLED = createError<[string]>(
  'The payouts "%s" feature is disabled in config/payouts.ts',
  'E_PAYOUTS_FEATURE_DISABLED',
  500
)

/** A deposit was recorded for a quote whose confirmation with another transaction is in flight. */
export const E_ESCROW_CONFIRMATION_IN_FLIGHT = createError<[string, string]>(
  'The escrow deposit of quote "%s" is being confirmed with transaction %s; record again once it ends',
  'E_ESCROW_CONFIRMATION_IN_FLIGHT',
  409
)

/**
 * A database step or a job run did not finish in its allotted time (a stalled connection,
 * a lock held elsewhere). Nothing is reported done: the caller answers 503 or tries again.
 */
export const E_PAYOUTS_TIMEOUT = createError<[string, number]>(
  'Payouts %s did not finish within %d ms',
  'E_PAYOUTS_TIMEOUT',
  503
)
