import {
  ENDPOINTS,
  type EndpointName,
  type EndpointSpec,
  type HttpMethod,
  type RateFamily,
  type Scope,
} from '../contract/endpoints.ts'
import { payoutHandlers } from './handlers/payouts.ts'
import { quoteHandlers } from './handlers/quotes.ts'
import { recipientHandlers } from './handlers/recipients.ts'
import { rfqHandlers } from './handlers/rfq.ts'
import type { ApiDeps, Handler } from './handlers/shared.ts'
import { webhookHandlers } from './handlers/webhooks.ts'

export type { ApiContext, ApiDeps, ApiResult, Handler } from './handlers/shared.ts'

/** One endpoint as the emulator serves it: the contract's row, its matcher, its handler. */
export interface Route {
  name: EndpointName
  method: HttpMethod
  /** The path template compiled: one capture group per `{id}`. */
  pattern: RegExp
  /** null: public, no key. */
  scope: Scope | null
  family: RateFamily
  /** Honours Idempotency-Key. */
  idempotent: boolean
  /** confirm-escrow-deposit answers its own 400 shape and keeps its 500s. */
  confirmShape: boolean
  handler: Handler
}

/**
 * Compiles a path template (`/rfq/status/{id}`) to a regular expression matching the whole
 * path, with one capture group (a single segment) per `{...}`.
 */
export function compilePathTemplate(template: string): RegExp {
  const source = template
    .split(/\{[^}]+\}/)
    .map((literal) => literal.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
    .join('([^/]+)')
  return new RegExp(`^${source}$`)
}

/** Every endpoint of the table with its compiled path, in the table's order. */
const COMPILED = (Object.keys(ENDPOINTS) as EndpointName[]).map((name) => {
  const endpoint: EndpointSpec = ENDPOINTS[name]
  return { name, endpoint, pattern: compilePathTemplate(endpoint.path) }
})

/** Every public endpoint of the service, each answered by its handler. */
export function buildRoutes(deps: ApiDeps): Route[] {
  const handlers: Record<EndpointName, Handler> = {
    ...quoteHandlers(),
    ...rfqHandlers(deps),
    ...payoutHandlers(deps),
    ...recipientHandlers(deps),
    ...webhookHandlers(deps),
  }
  return COMPILED.map(({ name, endpoint, pattern }) => ({
    name,
    method: endpoint.method,
    pattern,
    scope: endpoint.scope,
    family: endpoint.family,
    idempotent: endpoint.idempotencyKey !== 'never',
    confirmShape: endpoint.escrowConfirmation === true,
    handler: handlers[name],
  }))
}
