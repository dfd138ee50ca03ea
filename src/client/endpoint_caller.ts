import { randomUUID } from 'node:crypto'
import type { z } from 'zod'
import {
  ENDPOINTS,
  isSafeToRepeat,
  type EndpointName,
  type EndpointSpec,
  type PathName,
} from '../contract/endpoints.ts'
import { idempotencyKeySchema } from '../schemas/common.ts'
import { fillPath } from './paths.ts'
import type { RawResponse, RequestSpec, Transport } from './transport.ts'
import { parseResponse, validate } from './validation.ts'

/** What one call adds to its endpoint: the id in its path, its query or body, its options. */
export interface CallInput {
  id?: string
  query?: RequestSpec['query']
  body?: unknown
  /** The caller's Idempotency-Key, if any (see the endpoint's `idempotencyKey`). */
  idempotencyKey?: string
  signal?: AbortSignal
}

type Endpoints = typeof ENDPOINTS

/** Endpoints whose answer is read with one schema (execute's depends on the flow). */
type SingleSchemaEndpoint = {
  [N in EndpointName]: Endpoints[N]['response'] extends z.ZodType | null ? N : never
}[EndpointName]

/** What `call` returns for an endpoint: its parsed 2xx body, or nothing for a 204. */
export type ResponseOf<N extends SingleSchemaEndpoint> = Endpoints[N]['response'] extends z.ZodType
  ? z.output<Endpoints[N]['response']>
  : void

/**
 * Sends the requests of the contract table (`src/contract/endpoints.ts`): method, path
 * (the client's `paths` override included), key or none, rate-limit family, whether it is
 * safe to repeat and the Idempotency-Key rule all come from the endpoint's row.
 */
export class EndpointCaller {
  constructor(
    private transport: Transport,
    private paths: Record<PathName, string>
  ) {}

  /** Sends one request of the endpoint; returns the status and the JSON body of a 2xx. */
  send(name: EndpointName, input: CallInput = {}): Promise<RawResponse> {
    const endpoint: EndpointSpec = ENDPOINTS[name]
    const route = this.paths[endpoint.pathName as PathName]
    return this.transport.send({
      endpoint: name,
      method: endpoint.method,
      route,
      path: fillPath(route, input.id),
      query: input.query,
      body: input.body,
      auth: endpoint.scope !== null,
      idempotencyKey: this.#idempotencyKey(endpoint, input.idempotencyKey),
      safeToRepeat: isSafeToRepeat(endpoint),
      family: endpoint.family,
      signal: input.signal,
      escrowConfirm: endpoint.escrowConfirmation,
    })
  }

  /** Sends one request of the endpoint and parses the answer with the endpoint's schema. */
  async call<N extends SingleSchemaEndpoint>(name: N, input?: CallInput): Promise<ResponseOf<N>> {
    const { body, status } = await this.send(name, input)
    const schema: z.ZodType | null = ENDPOINTS[name].response
    return (schema === null ? undefined : parseResponse(schema, body, status)) as ResponseOf<N>
  }

  #idempotencyKey(endpoint: EndpointSpec, given: string | undefined): string | undefined {
    if (endpoint.idempotencyKey === 'never') return undefined
    if (given !== undefined) return validate(idempotencyKeySchema, given)
    return endpoint.idempotencyKey === 'always' ? randomUUID() : undefined
  }
}
