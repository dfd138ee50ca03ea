import type { ErrorBody } from '../schemas/resources.ts'

/** Everything the client throws extends this, so one `instanceof` catches it all. */
export class PayoutsError extends Error {
  override name = 'PayoutsError'
}

/** The part of an HTTP context `handle` writes to (AdonisJS's, or any with this shape). */
export interface ErrorResponder {
  response: { status(code: number): { send(body: unknown): unknown } }
}

/**
 * A request failed client-side validation; nothing was sent. `field` names the input.
 * It follows AdonisJS's conventions for an error a host app lets through, as VineJS's
 * validation error does: `status` 422, a `code`, and `handle`, which the app's exception
 * handler calls to answer `{ errors: [{ field, message, code }] }` instead of a 500.
 */
export class PayoutsValidationError extends PayoutsError {
  override name = 'PayoutsValidationError'
  readonly code = 'E_PAYOUTS_VALIDATION'
  readonly status = 422
  /** What is wrong with the field, without the field's name. */
  readonly reason: string

  constructor(
    readonly field: string,
    reason: string
  ) {
    super(`${field ? `${field}: ` : ''}${reason}`)
    this.reason = reason
  }

  /** The body a host app answers with. */
  toResponse() {
    return { errors: [{ field: this.field, message: this.reason, code: this.code }] }
  }

  /** Called by AdonisJS's exception handler when the host app does not catch the error. */
  handle(_error: unknown, ctx: ErrorResponder) {
    ctx.response.status(this.status).send(this.toResponse())
  }

  toJSON() {
    return { name: this.name, code: this.code, field: this.field, message: this.message }
  }
}

/**
 * The client was constructed with a bad key, URL or environment. Its code is the one
 * `config/payouts.ts` fails with at boot (`errors.E_PAYOUTS_INVALID_CONFIG`): both say the
 * configuration is invalid, this one for the client used alone.
 */
export class PayoutsConfigError extends PayoutsError {
  override name = 'PayoutsConfigError'
  readonly code = 'E_PAYOUTS_INVALID_CONFIG'
}

export interface ApiErrorInit {
  status: number
  code?: string
  message?: string
  details?: Record<string, unknown>
  /** Seconds the service asked to wait (Retry-After), possibly fractional. */
  retryAfter?: number | null
  outcomeUnknown?: boolean
  cause?: unknown
}

/**
 * An error answered by the service (or the network on the way to it). `code` is the
 * service's code verbatim when the body has one (`RATE_LIMITED`, never `E_`-prefixed: the
 * `E_PAYOUTS_*` codes are the plugin's own), otherwise derived from the status (see
 * `codeForStatus`) or the transport (`NETWORK_ERROR`, `TIMEOUT`, `ABORTED`,
 * `INVALID_RESPONSE`); `outcomeUnknown` says the request may have taken effect.
 */
export class PayoutsApiError extends PayoutsError {
  override name = 'PayoutsApiError'
  readonly status: number
  readonly code: string
  readonly details?: Record<string, unknown>
  readonly retryAfter: number | null
  /** The same wait in milliseconds, or null when the service gave none. */
  readonly retryAfterMs: number | null
  readonly outcomeUnknown: boolean

  constructor(init: ApiErrorInit) {
    super(init.message ?? `Payout Service answered ${init.status}`, { cause: init.cause })
    this.status = init.status
    this.code = init.code ?? codeForStatus(init.status)
    this.details = init.details
    this.retryAfter = init.retryAfter ?? null
    this.retryAfterMs = this.retryAfter === null ? null : Math.round(this.retryAfter * 1000)
    this.outcomeUnknown = init.outcomeUnknown ?? false
  }

  toJSON() {
    return {
      name: this.name,
      status: this.status,
      code: this.code,
      message: this.message,
      details: this.details,
      retryAfter: this.retryAfter,
      retryAfterMs: this.retryAfterMs,
      outcomeUnknown: this.outcomeUnknown,
    }
  }
}

/** Codes used when a body carries none (spec gap: 404 and 422 codes are not shown). */
export function codeForStatus(status: number): string {
  if (status === 0) return 'NETWORK_ERROR'
  if (status === 400) return 'INVALID_PARAMETER'
  if (status === 401) return 'UNAUTHORIZED'
  if (status === 403) return 'FORBIDDEN'
  if (status === 404) return 'NOT_FOUND'
  if (status === 409) return 'CONFLICT'
  if (status === 413) return 'PAYLOAD_TOO_LARGE'
  if (status === 422) return 'BUSINESS_RULE_VIOLATION'
  if (status === 429) return 'RATE_LIMITED'
  if (status >= 500) return 'SERVER_ERROR'
  return `HTTP_${status}`
}

export class InvalidJsonError extends PayoutsApiError {
  override name = 'InvalidJsonError'
}
export class InvalidParameterError extends PayoutsApiError {
  override name = 'InvalidParameterError'
}
export class UnauthorizedError extends PayoutsApiError {
  override name = 'UnauthorizedError'
}
export class ForbiddenError extends PayoutsApiError {
  override name = 'ForbiddenError'
}
/**
 * 403 `environment_scope mismatch`: a sk_test_ key on production or the reverse. A
 * ForbiddenError like any 403: the wording only makes the message clearer.
 */
export class WrongEnvironmentError extends ForbiddenError {
  override name = 'WrongEnvironmentError'
}
export class NotFoundError extends PayoutsApiError {
  override name = 'NotFoundError'
}
export class IdempotencyKeyReusedError extends PayoutsApiError {
  override name = 'IdempotencyKeyReusedError'
}
export class IdempotencyRequestInFlightError extends PayoutsApiError {
  override name = 'IdempotencyRequestInFlightError'
}
export class MaxActiveSubscriptionsExceededError extends PayoutsApiError {
  override name = 'MaxActiveSubscriptionsExceededError'
}
/** 422: validation passed but a business rule (e.g. amount bounds) rejected it. */
export class BusinessRuleError extends PayoutsApiError {
  override name = 'BusinessRuleError'
}
/**
 * 429, retried per Retry-After until the retries run out or the service asks for a wait
 * above `retry.maxRetryAfterMs`; also thrown without sending when the service's headers say
 * the family stays exhausted longer than that. `retryAfterMs` is the wait asked for.
 */
export class RateLimitedError extends PayoutsApiError {
  override name = 'RateLimitedError'
}
/**
 * Any 500 of confirm-escrow-deposit, whatever its body: the spec collapses every persistent
 * failure into it and says not to blind-retry it.
 */
export class EscrowConfirmationFailedError extends PayoutsApiError {
  override name = 'EscrowConfirmationFailedError'
}
export class ServerError extends PayoutsApiError {
  override name = 'ServerError'
}
/** No HTTP answer: connection refused, reset, DNS. */
export class PayoutsNetworkError extends PayoutsApiError {
  override name = 'PayoutsNetworkError'
}
/** No answer within the timeout; the request may have been processed. */
export class PayoutsTimeoutError extends PayoutsApiError {
  override name = 'PayoutsTimeoutError'
}
/** The caller aborted through its AbortSignal. */
export class PayoutsAbortedError extends PayoutsApiError {
  override name = 'PayoutsAbortedError'
}
/** A 2xx whose body is not the documented shape (or not JSON). */
export class PayoutsResponseError extends PayoutsApiError {
  override name = 'PayoutsResponseError'
}

const BY_CODE: Record<string, typeof PayoutsApiError> = {
  INVALID_JSON: InvalidJsonError,
  INVALID_PARAMETER: InvalidParameterError,
  UNAUTHORIZED: UnauthorizedError,
  FORBIDDEN: ForbiddenError,
  NOT_FOUND: NotFoundError,
  IDEMPOTENCY_KEY_REUSED: IdempotencyKeyReusedError,
  IDEMPOTENCY_REQUEST_IN_FLIGHT: IdempotencyRequestInFlightError,
  MAX_ACTIVE_SUBSCRIPTIONS_EXCEEDED: MaxActiveSubscriptionsExceededError,
  RATE_LIMITED: RateLimitedError,
}

/**
 * Maps an HTTP error answer to its typed error. All three body shapes of the spec parse.
 * The status and the code decide; the `error` text (which the service may reword) only
 * names a 403's subclass, and a 403 is never retried either way.
 */
export function errorFromResponse(
  status: number,
  body: ErrorBody | null,
  retryAfter: number | null,
  context: { escrowConfirm?: boolean } = {}
): PayoutsApiError {
  const message = body?.error ?? `Payout Service answered ${status}`
  const init: ApiErrorInit = {
    status,
    code: body?.code,
    message,
    details: body?.details,
    retryAfter,
    outcomeUnknown: status >= 500,
  }
  if (status === 500 && context.escrowConfirm) {
    return new EscrowConfirmationFailedError({
      ...init,
      code: 'ESCROW_CONFIRMATION_FAILED',
      message: body?.error || 'escrow deposit confirmation failed',
      outcomeUnknown: false,
    })
  }
  if (
    status === 403 &&
    (body?.code === 'ENVIRONMENT_SCOPE_MISMATCH' || /environment_scope mismatch/i.test(message))
  ) {
    return new WrongEnvironmentError({ ...init, code: body?.code ?? 'ENVIRONMENT_SCOPE_MISMATCH' })
  }
  // Own keys only: a code like "constructor" or "toString" must not reach Object.prototype.
  const byCode = body?.code && Object.hasOwn(BY_CODE, body.code) ? BY_CODE[body.code] : undefined
  if (byCode) return new byCode(init)
  if (status === 400) return new InvalidParameterError(init)
  if (status === 401) return new UnauthorizedError(init)
  if (status === 403) return new ForbiddenError(init)
  if (status === 404) return new NotFoundError(init)
  if (status === 422) return new BusinessRuleError(init)
  if (status === 429) return new RateLimitedError(init)
  if (status >= 500) return new ServerError(init)
  return new PayoutsApiError(init)
}
