import type { IncomingMessage, ServerResponse } from 'node:http'
import { API_KEY_PATTERN, idempotencyKeySchema } from '../schemas/common.ts'
import type { ApiResult, Route } from './api.ts'
import type { EmulatorClock } from './clock.ts'
import type { Faults } from './faults.ts'
import type { RateLimits } from './rate_limits.ts'
import { hashBody, type EmulatorState } from './state.ts'

const IDEMPOTENCY_WINDOW_MS = 24 * 3600 * 1000
const MAX_BODY = 1024 * 1024

export interface HttpDeps {
  state: EmulatorState
  clock: EmulatorClock
  faults: Faults
  rateLimits: RateLimits | null
  routes: Route[]
  admin: (path: string, method: string, body: unknown) => Promise<ApiResult | null>
}

function send(
  res: ServerResponse,
  result: ApiResult,
  headers: Record<string, string | number> = {}
) {
  if (res.destroyed) return
  const payload = result.body === undefined ? '' : JSON.stringify(result.body)
  res.writeHead(result.status, {
    ...headers,
    ...(payload ? { 'content-type': 'application/json' } : {}),
  })
  res.end(payload)
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    req.on('data', (chunk: Buffer) => {
      size += chunk.length
      if (size > MAX_BODY) {
        reject(new Error('too large'))
        req.destroy()
        return
      }
      chunks.push(chunk)
    })
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')))
    req.on('error', reject)
  })
}

/** The request's API key when its Authorization header is `Bearer <key of the format>`. */
function bearerKey(req: IncomingMessage): string | undefined {
  const key = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1]
  return key && API_KEY_PATTERN.test(key) ? key : undefined
}

/**
 * The HTTP front of the emulator, in the order the service applies its rules: both path
 * styles (with or without `/api`), faults, the rate limit (every request counts, so every
 * answer from here on carries the X-RateLimit-* headers), the route (404 when none
 * matches), authentication, scope, JSON body, idempotency, then the route's handler.
 */
export function createHandler(deps: HttpDeps) {
  const { state, clock, faults } = deps

  return async function handle(req: IncomingMessage, res: ServerResponse) {
    // The emulated clock's time: X-RateLimit-Reset and Retry-After are read against it.
    res.setHeader('date', new Date(clock.now()).toUTCString())
    const url = new URL(req.url ?? '/', 'http://emulator')
    const method = req.method ?? 'GET'
    let raw = ''
    let tooLarge = false
    try {
      raw = await readBody(req)
    } catch {
      tooLarge = true
    }
    const bodyTooLarge = {
      status: 413,
      body: { code: 'INVALID_PARAMETER', error: 'body too large' },
    }

    if (url.pathname.startsWith('/__emulator/')) {
      if (tooLarge) return send(res, bodyTooLarge)
      let adminBody: unknown
      try {
        adminBody = raw ? JSON.parse(raw) : {}
      } catch {
        return send(res, { status: 400, body: { error: 'invalid json' } })
      }
      const result = await deps.admin(url.pathname.slice('/__emulator'.length), method, adminBody)
      return send(res, result ?? { status: 404, body: { error: 'unknown admin call' } })
    }

    const path =
      url.pathname === '/api' || url.pathname.startsWith('/api/')
        ? url.pathname.slice(4) || '/'
        : url.pathname

    // Faults first: they model the network and the service's edge.
    if (faults.appliesTo(path)) {
      if (faults.config.latencyMs) await new Promise((r) => setTimeout(r, faults.config.latencyMs))
      if (faults.roll('resetRate')) {
        faults.stats.resets++
        return req.socket.destroy()
      }
      if (faults.roll('timeoutRate')) {
        faults.stats.timeouts++
        setTimeout(() => req.socket.destroy(), faults.config.timeoutHoldMs ?? 15_000).unref()
        return
      }
      if (faults.roll('errorRate')) {
        faults.stats.errors++
        const status = [500, 502, 503][Math.floor(faults.random() * 3)]
        return send(res, { status, body: { error: 'internal error' } })
      }
      if (faults.roll('rateLimitStormRate')) {
        faults.stats.rateLimited++
        return send(
          res,
          { status: 429, body: { error: 'rate limit exceeded' } },
          {
            'retry-after': 1,
            'x-ratelimit-limit': 60,
            'x-ratelimit-remaining': 0,
            'x-ratelimit-reset': clock.nowSeconds() + 1,
          }
        )
      }
    }

    let route: Route | undefined
    let params: string[] = []
    for (const candidate of deps.routes) {
      const match = candidate.pattern.exec(path)
      if (match && candidate.method === method) {
        route = candidate
        params = match.slice(1).map(decodeURIComponent)
        break
      }
    }

    const key = bearerKey(req)
    const keyRecord = key ? state.validKey(key) : undefined

    // Rate limit (spec, Limits): per key, per account for replay. A request without a
    // usable key counts per client address, and an unknown path in the default family.
    const headers: Record<string, string | number> = {}
    if (deps.rateLimits) {
      const family = route?.family ?? 'default'
      const subject = !keyRecord
        ? `address:${req.socket.remoteAddress ?? 'unknown'}`
        : family === 'replay'
          ? `account:${keyRecord.accountId}`
          : `key:${keyRecord.key}`
      const decision = deps.rateLimits.take(subject, family)
      headers['x-ratelimit-limit'] = decision.limit
      headers['x-ratelimit-remaining'] = decision.remaining
      headers['x-ratelimit-reset'] = decision.reset
      if (!decision.allowed) {
        faults.stats.throttled++
        headers['retry-after'] = decision.retryAfter
        return send(res, { status: 429, body: { error: 'rate limit exceeded' } }, headers)
      }
    }
    if (tooLarge) return send(res, bodyTooLarge, headers)
    if (!route)
      return send(res, { status: 404, body: { code: 'NOT_FOUND', error: 'not found' } }, headers)

    // Authentication and scope.
    let accountId = 'public'
    if (route.scope) {
      if (!key) {
        const error = 'missing or malformed Authorization header'
        return send(res, { status: 401, body: { code: 'UNAUTHORIZED', error } }, headers)
      }
      if (key.startsWith('sk_live_')) {
        const mismatch = { success: false, error: 'environment_scope mismatch' }
        return send(res, { status: 403, body: mismatch }, headers)
      }
      if (!keyRecord) {
        const error = 'unknown or revoked API key'
        return send(res, { status: 401, body: { code: 'UNAUTHORIZED', error } }, headers)
      }
      if (!keyRecord.scopes.has(route.scope)) {
        const error = `API key lacks the ${route.scope} scope`
        return send(res, { status: 403, body: { code: 'FORBIDDEN', error } }, headers)
      }
      accountId = keyRecord.accountId
    }

    let body: unknown
    if (method === 'POST' || method === 'PATCH') {
      try {
        body = raw.length ? JSON.parse(raw) : undefined
      } catch {
        if (route.confirmShape)
          return send(
            res,
            { status: 400, body: { success: false, error: 'invalid request' } },
            headers
          )
        return send(
          res,
          { status: 400, body: { code: 'INVALID_JSON', error: 'body is not valid JSON' } },
          headers
        )
      }
    }

    const run = () => route!.handler({ accountId, body, query: url.searchParams, params })
    /** Notes the payouts an execute or execute-batch made, under the key they were made by. */
    const noteExecuted = (result: ApiResult, madeUnder: string | undefined) => {
      if (result.status === 200 && (route!.name === 'execute' || route!.name === 'executeBatch'))
        state.noteExecuted(accountId, route!.name, madeUnder, result.body)
    }

    const idempotencyKey = req.headers['idempotency-key']
    if (!route.idempotent || typeof idempotencyKey !== 'string') {
      const result = await run()
      noteExecuted(result, undefined)
      return send(res, result, headers)
    }
    if (!idempotencyKeySchema.safeParse(idempotencyKey).success) {
      return send(
        res,
        {
          status: 400,
          body: {
            code: 'INVALID_PARAMETER',
            error: 'Idempotency-Key must be 8 to 255 url-safe characters',
            details: { field: 'Idempotency-Key', bound: 255 },
          },
        },
        headers
      )
    }
    state.prune()
    const recordKey = `${accountId}:${method}:${path}:${idempotencyKey}`
    const bodyHash = hashBody(body)
    const existing = state.idempotency.get(recordKey)
    if (existing && existing.expiresAt > clock.now()) {
      if (existing.bodyHash !== bodyHash) {
        return send(
          res,
          {
            status: 409,
            body: {
              code: 'IDEMPOTENCY_KEY_REUSED',
              error: 'Idempotency-Key reused with a different body',
            },
          },
          headers
        )
      }
      if (existing.state === 'in_flight') {
        return send(
          res,
          {
            status: 409,
            body: {
              code: 'IDEMPOTENCY_REQUEST_IN_FLIGHT',
              error: 'a request with this Idempotency-Key is in flight',
            },
          },
          { ...headers, 'retry-after': 1 }
        )
      }
      return send(
        res,
        { status: existing.status!, body: existing.body },
        { ...headers, 'idempotent-replayed': 'true' }
      )
    }
    const record = {
      bodyHash,
      state: 'in_flight' as const,
      expiresAt: clock.now() + IDEMPOTENCY_WINDOW_MS,
    }
    state.idempotency.set(recordKey, record)
    let result: ApiResult
    try {
      // Holding the request here (after the in-flight record) is how tests see 409
      // IDEMPOTENCY_REQUEST_IN_FLIGHT, and how a crash test kills a client mid-request.
      if (faults.config.processingDelayMs)
        await new Promise((r) => setTimeout(r, faults.config.processingDelayMs))
      result = await run()
    } catch (error) {
      state.idempotency.delete(recordKey)
      throw error
    }
    if (result.status >= 500 && !route.confirmShape) state.idempotency.delete(recordKey)
    else
      state.idempotency.set(recordKey, {
        ...record,
        state: 'done',
        status: result.status,
        body: result.body,
      })
    noteExecuted(result, idempotencyKey)
    return send(res, result, headers)
  }
}
