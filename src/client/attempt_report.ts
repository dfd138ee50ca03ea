import { PayoutsApiError, PayoutsTimeoutError } from './errors.ts'
import type { ClientResponseEvent } from './hooks.ts'
import type { RawResponse, RequestSpec } from './transport_types.ts'

/** The `response` hook's event of one attempt: no path, header or body in it. */
export function responseEvent(
  spec: RequestSpec,
  attempt: number,
  outcome: RawResponse | PayoutsApiError,
  startedAt: number,
  willRetry: boolean
): ClientResponseEvent {
  const event: ClientResponseEvent = {
    endpoint: spec.endpoint,
    method: spec.method,
    route: spec.route,
    attempt,
    status: outcome.status,
    durationMs: performance.now() - startedAt,
    requestId: null,
    willRetry,
  }
  if (outcome instanceof PayoutsApiError) {
    event.code = outcome.code
    if (outcome.retryAfterMs !== null) event.retryAfterMs = outcome.retryAfterMs
  }
  return event
}

/** Why a retry is made, for traces: the status, or `network` / `timeout` when none came. */
export function retryReason(error: PayoutsApiError): string {
  if (error instanceof PayoutsTimeoutError) return 'timeout'
  if (error.status === 0) return 'network'
  return String(error.status)
}
