import { createError, Exception } from '@adonisjs/core/exceptions'
import { DEFAULT_ACCOUNT } from './constants.ts'
import { safeCause, safeError } from './safe_error.ts'

/**
 * Errors raised by the AdonisJS side of the plugin. API errors live in
 * `src/client/errors.ts` so that the client stays framework-free. Every code the plugin
 * decides is `E_PAYOUTS_<WHAT>` (tests/integration/error_codes.spec.ts holds it).
 */

/**
 * The `config/payouts.ts` file holds a value that fails validation (at boot, or when a
 * command reads it). The client used alone throws `PayoutsConfigError`, of the same code.
 */
export const E_PAYOUTS_INVALID_CONFIG = createError<[string]>(
  'Invalid payouts config: %s',
  'E_PAYOUTS_INVALID_CONFIG',
  500
)

/** A feature was used while switched off in the config (ledger, transmit, websocket). */
export const E_PAYOUTS_FEATURE_DISABLED = createError<[string]>(
  'The payouts "%s" feature is disabled in config/payouts.ts',
  'E_PAYOUTS_FEATURE_DISABLED',
  500
)

/**
 * `payouts.webhooks.rotateSecret()` on a subscription whose secret this app does not keep:
 * refused before the service is asked, since its new secret would reach nobody.
 */
export const E_PAYOUTS_WEBHOOK_SECRET_NOT_STORED = createError<[string]>(
  'Webhook subscription "%s" is not stored in this app; nothing was rotated. Rotate it where its secret is kept',
  'E_PAYOUTS_WEBHOOK_SECRET_NOT_STORED',
  404
)

/**
 * A rotation that may have happened at the service (no answer, a 5xx) or whose new secret
 * could not be stored here. The service signs with a secret this app may not hold, so
 * deliveries can be refused until the subscription is rotated again.
 */
export const E_PAYOUTS_WEBHOOK_ROTATION_UNCONFIRMED = createError<[string]>(
  'The rotation of webhook subscription "%s" may have happened at the service without its new secret being stored here: deliveries may be refused until you rotate it again (payouts:webhooks:rotate-secret)',
  'E_PAYOUTS_WEBHOOK_ROTATION_UNCONFIRMED',
  502
)

/** `payouts.webhooks.delete()` on an id that neither the service nor this app knows. */
export const E_PAYOUTS_WEBHOOK_SUBSCRIPTION_NOT_FOUND = createError<[string]>(
  'Webhook subscription "%s" was not found at the service nor in this app; nothing was deleted',
  'E_PAYOUTS_WEBHOOK_SUBSCRIPTION_NOT_FOUND',
  404
)

/** A deposit was recorded for a quote whose confirmation with another transaction is in flight. */
export const E_PAYOUTS_ESCROW_CONFIRMATION_IN_FLIGHT = createError<[string, string]>(
  'The escrow deposit of quote "%s" is being confirmed with transaction %s; record again once it ends',
  'E_PAYOUTS_ESCROW_CONFIRMATION_IN_FLIGHT',
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

/**
 * The client was used while config/payouts.ts has no API key (none issued yet): the app
 * boots and migrates without one, but nothing can reach the service.
 */
export const E_PAYOUTS_API_KEY_MISSING = createError(
  'No Payout Service API key: set PAYOUTS_API_KEY (sk_test_... for the sandbox) in .env',
  'E_PAYOUTS_API_KEY_MISSING',
  500
)

/** @internal E_PAYOUTS_API_KEY_MISSING, naming the account whose key is missing when it is not `main`. */
export function missingKey(account: string = DEFAULT_ACCOUNT) {
  const error = new E_PAYOUTS_API_KEY_MISSING()
  if (account !== DEFAULT_ACCOUNT) {
    error.message = `No Payout Service API key for account "${account}": set accounts.${account}.apiKey in config/payouts.ts`
  }
  return error
}

/**
 * `payouts.fake()` was asked something the service would refuse, or saw the app refuse a
 * delivery (no webhook route, a bad secret): the message says which.
 */
export const E_PAYOUTS_FAKE = createError<[string]>('payouts.fake(): %s', 'E_PAYOUTS_FAKE', 500)

/**
 * `payouts.execute(input, { idempotencyKey })` with a key already used for another body or
 * another owner: nothing was sent. Use a fresh key for a different payout.
 */
export const E_PAYOUTS_IDEMPOTENCY_KEY_REUSED = createError<[string]>(
  'Idempotency key "%s" was already used for a different payout (another body or owner); nothing was sent',
  'E_PAYOUTS_IDEMPOTENCY_KEY_REUSED',
  422
)

/**
 * The execution intent of this idempotency key is past the service's replay window with
 * an unknown outcome: a human must decide (`node ace payouts:intents`); nothing was sent.
 */
export const E_PAYOUTS_INTENT_NEEDS_ATTENTION = createError<[string]>(
  'The payout of idempotency key "%s" needs attention (its outcome is unknown past the replay window); nothing was sent. See node ace payouts:intents',
  'E_PAYOUTS_INTENT_NEEDS_ATTENTION',
  409
)

/**
 * `payouts.execute()` failed at one of its own database writes. `outcomeUnknown: false`:
 * nothing was sent and nothing will be (the intent was not stored, or its attempt was not),
 * so calling again is safe. `outcomeUnknown: true`: the request may have reached the service
 * (its answer could not be stored, or an earlier attempt went out); recovery finishes it with
 * the same key, so do not call again with another key. `intentId` when the intent exists.
 */
// eslint-disable-next-line @typescript-eslint/naming-convention -- named as the other errors of this file
export class E_PAYOUTS_EXECUTE_NOT_STORED extends Exception {
  static status = 503
  static code = 'E_PAYOUTS_EXECUTE_NOT_STORED'
  readonly outcomeUnknown: boolean
  readonly intentId: number | null

  constructor(
    what: string,
    details: { outcomeUnknown: boolean; intentId: number | null; cause?: unknown }
  ) {
    super(
      // The cause's kind only: a database error's message holds its statement's values (the
      // key, the request, the service's answer with its banking instructions).
      `Payouts execute could not store ${what}${
        details.cause === undefined ? '' : ` (${safeError(details.cause).message})`
      }; ${
        details.outcomeUnknown
          ? 'the request may have reached the service: recovery finishes it with the same key'
          : 'nothing was sent'
      }`,
      { cause: safeCause(details.cause) }
    )
    this.outcomeUnknown = details.outcomeUnknown
    this.intentId = details.intentId
  }
}

/**
 * A read of the ledger failed at the database (`payouts.findBatch`, a batch's lookup of its
 * chunks). Named by the database's code alone: the failed statement holds idempotency keys.
 */
export const E_PAYOUTS_LEDGER_UNREADABLE = createError<[string, string]>(
  'Payouts could not read %s (%s)',
  'E_PAYOUTS_LEDGER_UNREADABLE',
  503
)

/**
 * A transaction's COMMIT failed at the database (its connection dropped, reset or given up
 * at its deadline): it may have been committed before the answer was lost, or not at all.
 * Lucid's `commit()` resolves and runs its `after('commit')` hooks either way (knex reports
 * the failure only on the transaction's own promise), so the plugin checks it: the caller
 * hears this instead of a success, and no change of it is told (the outbox tells the ones
 * that did commit, later, once). Named by the database's code alone.
 */
export const E_PAYOUTS_COMMIT_UNCONFIRMED = createError<[string, string]>(
  'Payouts %s: the database did not confirm its COMMIT (%s); it may have been committed or not',
  'E_PAYOUTS_COMMIT_UNCONFIRMED',
  503
)

/** `payouts.use(name)` or `--account name` for an account `config/payouts.ts` does not have. */
export const E_PAYOUTS_UNKNOWN_ACCOUNT = createError<[string, string]>(
  'Unknown payouts account "%s": config/payouts.ts has %s',
  'E_PAYOUTS_UNKNOWN_ACCOUNT',
  500
)

/**
 * An account whose ledger rows were made with a key of one environment (sandbox, production)
 * now configured with a key of the other: refused, so a live key never acts on sandbox rows.
 */
export const E_PAYOUTS_ACCOUNT_ENVIRONMENT = createError<[string, string, string]>(
  'The payouts account "%s" holds %s rows, but its key is now a %s key: give the new key its own account (docs/accounts.md)',
  'E_PAYOUTS_ACCOUNT_ENVIRONMENT',
  500
)

/**
 * An account configured with the key another account of this app last used (keys swapped,
 * or one pasted into the other's variable): refused, since its intents would be re-sent
 * under the other account's key, which the service would take for new payouts.
 */
export const E_PAYOUTS_ACCOUNT_KEY = createError<[string, string]>(
  'The payouts account "%s" is configured with the API key account "%s" last used: each account keeps its own key (docs/accounts.md)',
  'E_PAYOUTS_ACCOUNT_KEY',
  500
)

/*
 * The names of 0.1.0's development builds, kept as the same classes so `instanceof` still
 * matches; their `code` is the new one.
 */

/** @deprecated Use `E_PAYOUTS_INVALID_CONFIG`; removed in 0.2.0. */
export const E_INVALID_PAYOUTS_CONFIG = E_PAYOUTS_INVALID_CONFIG
/** @deprecated Use `E_PAYOUTS_WEBHOOK_SECRET_NOT_STORED`; removed in 0.2.0. */
export const E_WEBHOOK_SECRET_NOT_STORED = E_PAYOUTS_WEBHOOK_SECRET_NOT_STORED
/** @deprecated Use `E_PAYOUTS_WEBHOOK_ROTATION_UNCONFIRMED`; removed in 0.2.0. */
export const E_WEBHOOK_ROTATION_UNCONFIRMED = E_PAYOUTS_WEBHOOK_ROTATION_UNCONFIRMED
/** @deprecated Use `E_PAYOUTS_WEBHOOK_SUBSCRIPTION_NOT_FOUND`; removed in 0.2.0. */
export const E_WEBHOOK_SUBSCRIPTION_NOT_FOUND = E_PAYOUTS_WEBHOOK_SUBSCRIPTION_NOT_FOUND
/** @deprecated Use `E_PAYOUTS_ESCROW_CONFIRMATION_IN_FLIGHT`; removed in 0.2.0. */
export const E_ESCROW_CONFIRMATION_IN_FLIGHT = E_PAYOUTS_ESCROW_CONFIRMATION_IN_FLIGHT
/** @deprecated Use `E_PAYOUTS_UNKNOWN_ACCOUNT`; removed in 0.2.0. */
export const E_UNKNOWN_PAYOUTS_ACCOUNT = E_PAYOUTS_UNKNOWN_ACCOUNT
