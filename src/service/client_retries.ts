import diagnostics from 'node:diagnostics_channel'

/** What the client says before it waits and sends a request again. */
export interface ClientRetry {
  method: string
  path: string
  /** The attempt about to be sent (1 is the first retry). */
  attempt: number
  waitMs: number
  /** The error code of the attempt that failed, when it had one. */
  code?: string
}

/**
 * Where the service's client announces each retry, so a command can show that it is
 * retrying (the app's logger keeps these at debug level). Nothing is published to a
 * channel without subscribers.
 */
export const clientRetries = diagnostics.channel('@svc/adonis-payouts:client-retry')
