import { E_PAYOUTS_API_KEY_MISSING } from '../errors.ts'
import type { PayoutsClient } from '../client/payouts_client.ts'
import { PayoutsApiError, PayoutsTimeoutError } from '../client/errors.ts'
import type { PayoutsConfig } from '../define_config.ts'
import { redactCredentials } from '../client/redact.ts'
import type { ReachabilityLine } from './types.ts'

export type { ReachabilityLine } from './types.ts'

/**
 * Asks the service one cheap authenticated read (`GET /payouts?limit=1`) with a short
 * timeout and no retry, and reuses the answer for `health.reachability.cacheForMs`, so a
 * monitor polling the health endpoint does not poll the service as often.
 */
export class Reachability {
  #config: Pick<PayoutsConfig, 'baseUrl' | 'health'>
  #client: () => PayoutsClient
  #probe?: PayoutsClient
  #last?: { at: number; line: ReachabilityLine }
  #inFlight?: Promise<ReachabilityLine>

  /** `client` builds the probe client (one attempt, the short timeout) on first use. */
  constructor(config: Pick<PayoutsConfig, 'baseUrl' | 'health'>, client: () => PayoutsClient) {
    this.#config = config
    this.#client = client
  }

  /** The cached answer while fresh; otherwise asks the service (once for concurrent callers). */
  async read(): Promise<ReachabilityLine> {
    const { cacheForMs } = this.#config.health.reachability
    if (this.#last && Date.now() - this.#last.at < cacheForMs) {
      return { ...this.#last.line, cached: true }
    }
    this.#inFlight ??= this.#ask().finally(() => (this.#inFlight = undefined))
    return this.#inFlight
  }

  async #ask(): Promise<ReachabilityLine> {
    const at = Date.now()
    // Named in the line and its message: never with the URL's credentials.
    const baseUrl = redactCredentials(this.#config.baseUrl)
    const { timeoutMs } = this.#config.health.reachability
    const base = { baseUrl, cached: false, checkedAt: new Date(at).toISOString() }
    let line: ReachabilityLine
    try {
      this.#probe ??= this.#client()
      await this.#probe.listPayouts({ limit: 1 })
      const ms = Date.now() - at
      line = { ...base, status: 'ok', value: ms, message: `${baseUrl} answered in ${ms} ms` }
    } catch (error) {
      const message =
        error instanceof E_PAYOUTS_API_KEY_MISSING
          ? (error as Error).message
          : error instanceof PayoutsTimeoutError
            ? `${baseUrl} unreachable: no answer within ${timeoutMs} ms`
            : error instanceof PayoutsApiError && error.status > 0
              ? `${baseUrl} refused the read: ${redactCredentials(error.message)}`
              : `${baseUrl} unreachable: ${redactCredentials((error as Error).message)}`
      line = { ...base, status: 'error', value: null, message }
    }
    this.#last = { at, line }
    return line
  }

  /** Closes the probe client's sockets. */
  async close() {
    await this.#probe?.close()
    this.#probe = undefined
  }
}
