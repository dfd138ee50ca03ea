import type { z } from 'zod'
import type { EmulatorClock } from '../clock.ts'
import type { Lifecycle } from '../lifecycle.ts'
import type { EmulatorState, PayoutRecord } from '../state.ts'
import type { WebhookDispatcher } from '../webhooks.ts'

/** A handler's answer: the status and the JSON body (none for a 204). */
export interface ApiResult {
  status: number
  body?: unknown
}

/** What a handler gets from a request that passed authentication and the rate limit. */
export interface ApiContext {
  accountId: string
  body: unknown
  query: URLSearchParams
  /** The path's `{id}`, decoded. */
  params: string[]
}

/** Answers one endpoint. */
export type Handler = (ctx: ApiContext) => ApiResult | Promise<ApiResult>

/** The emulator's parts the handlers work on. */
export interface ApiDeps {
  state: EmulatorState
  clock: EmulatorClock
  lifecycle: Lifecycle
  webhooks: WebhookDispatcher
  allowInsecureWebhooks: boolean
  emit: (payout: PayoutRecord, type: 'payout.created' | 'payout.status.updated') => void
}

/** A 400 naming the field and what was wrong (spec, Errors rule 1). */
export function invalid(
  field: string,
  reason: string,
  extra: Record<string, unknown> = {}
): ApiResult {
  return {
    status: 400,
    body: {
      code: 'INVALID_PARAMETER',
      error: `${field || 'body'}: ${reason}`,
      details: { field, reason, ...extra },
    },
  }
}

/** A 404 naming what was not found. */
export function notFound(what: string): ApiResult {
  return { status: 404, body: { code: 'NOT_FOUND', error: `${what} not found` } }
}

/** Parses a request with its schema; a failure is the 400 of its first issue. */
export function parse<T extends z.ZodType>(
  schema: T,
  input: unknown
): { data: z.output<T> } | { error: ApiResult } {
  const result = schema.safeParse(input)
  if (result.success) return { data: result.data }
  const issue = result.error.issues[0] as z.core.$ZodIssue & {
    maximum?: unknown
    minimum?: unknown
  }
  const bound = issue.maximum ?? issue.minimum
  return {
    error: invalid(
      issue.path.join('.'),
      issue.message,
      bound === undefined ? {} : { bound: Number(bound) }
    ),
  }
}

/** One page of a list: `limit` (1 to 200, default 50) rows from the offset in `cursor`. */
export function page<T>(items: T[], query: URLSearchParams) {
  const limit = Math.min(Math.max(Number(query.get('limit') ?? 50) || 50, 1), 200)
  const offset = Math.max(Number(query.get('cursor') ?? 0) || 0, 0)
  const data = items.slice(offset, offset + limit)
  return { data, nextCursor: offset + limit < items.length ? String(offset + limit) : null }
}
