import type { EndpointName } from '../contract/endpoints.ts'
import type { ClientLogger } from './types.ts'

/**
 * `request`: one attempt of a call is about to be sent (a retry is another attempt). Nothing
 * secret: no key, no headers, no Idempotency-Key value, no body, no query, no path with an id.
 */
export interface ClientRequestEvent {
  /** The contract's endpoint name (`getPayout`, `execute`, ...). */
  endpoint: EndpointName
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE'
  /** The path template as configured (`/payouts/{id}`), never the path with its id. */
  route: string
  /** 1 on the first attempt, 2 on the first retry, ... */
  attempt: number
  /**
   * Sending it again cannot do the work twice (a GET, a POST with an Idempotency-Key, or one
   * the contract makes idempotent), so it is retried after any transient failure.
   */
  idempotent: boolean
}

/** `response`: one attempt got its answer, or failed without one. */
export interface ClientResponseEvent {
  endpoint: EndpointName
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE'
  route: string
  attempt: number
  /** The HTTP status; 0 when no answer came (network error, timeout, abort). */
  status: number
  /** From sending to the answer's body read (or the failure). */
  durationMs: number
  /** The service's request id: always null, the service's spec names none. */
  requestId: string | null
  /** The error's code when the attempt failed (`RATE_LIMITED`, `SERVER_ERROR`, `TIMEOUT`, ...). */
  code?: string
  /** The wait the service asked for (Retry-After), when it gave one. */
  retryAfterMs?: number
  /** The client sends the request again after this (unless the call is aborted meanwhile). */
  willRetry: boolean
}

/** What each hook's listener receives. */
export interface ClientHookEvents {
  request: ClientRequestEvent
  response: ClientResponseEvent
}

export type ClientHookName = keyof ClientHookEvents

export type ClientHookListener<Name extends ClientHookName> = (
  event: ClientHookEvents[Name]
) => void

type AnyListener = (event: never) => unknown

/**
 * The client's `request` and `response` listeners. Listeners run synchronously, in the order
 * they were added; one that throws (or returns a rejected promise) is logged at warn, without
 * its error, and the request goes on. With no listener, callers build no event (`has`).
 */
export class ClientHooks {
  /** Replaced, never mutated: an emit in progress keeps the list it started with. */
  #listeners: Record<ClientHookName, readonly AnyListener[]> = { request: [], response: [] }

  constructor(private logger?: ClientLogger) {}

  on<Name extends ClientHookName>(name: Name, listener: ClientHookListener<Name>): void {
    this.#check(name, listener)
    this.#listeners[name] = [...this.#listeners[name], listener]
  }

  /** Removes the listener (its last registration, when it was added more than once). */
  off<Name extends ClientHookName>(name: Name, listener: ClientHookListener<Name>): void {
    this.#check(name, listener)
    const list = this.#listeners[name]
    const index = list.lastIndexOf(listener)
    if (index !== -1) this.#listeners[name] = list.toSpliced(index, 1)
  }

  /** Whether anybody listens: callers build the event only then. */
  has(name: ClientHookName): boolean {
    return this.#listeners[name].length > 0
  }

  emit<Name extends ClientHookName>(name: Name, event: ClientHookEvents[Name]): void {
    for (const listener of this.#listeners[name] as readonly ClientHookListener<Name>[]) {
      try {
        const result: unknown = listener(event)
        if (result instanceof Promise) result.catch(() => this.#failed(name, event))
      } catch {
        this.#failed(name, event)
      }
    }
  }

  /** The listener's error may carry anything it saw: only where it happened is logged. */
  #failed(name: ClientHookName, event: ClientRequestEvent | ClientResponseEvent) {
    try {
      this.logger?.warn(
        { hook: name, endpoint: event.endpoint, attempt: event.attempt },
        'payouts client hook listener failed; ignored'
      )
    } catch {
      // A failing logger does not fail the request either.
    }
  }

  #check(name: string, listener: unknown) {
    if (name !== 'request' && name !== 'response') {
      throw new TypeError(`unknown client hook "${String(name)}": use "request" or "response"`)
    }
    if (typeof listener !== 'function') throw new TypeError('a hook listener must be a function')
  }
}
