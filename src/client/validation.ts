import { z } from 'zod'
import { detectFlow, FLOWS, type ExecuteFlow } from '../schemas/common.ts'
import { executeSchemaByFlow, type ExecuteBody } from '../schemas/requests.ts'
import { PayoutsApiError, PayoutsValidationError } from './errors.ts'
import type { CallOptions, ExecuteInput } from './types.ts'

/** The dotted path of the field a zod issue is about (`items.0.amount`). */
export function fieldOf(issue: z.core.$ZodIssue): string {
  return issue.path.map(String).join('.')
}

/** Validates input before anything is sent; the error names the field. */
export function validate<T extends z.ZodType>(schema: T, input: unknown): z.output<T> {
  const result = schema.safeParse(input)
  if (!result.success) {
    const issue = result.error.issues[0]
    throw new PayoutsValidationError(fieldOf(issue), issue.message)
  }
  return result.data
}

/**
 * Checks an execute input as `execute` does before sending it: its flow (given or
 * inferred from the currencies) and that flow's body. Throws `PayoutsValidationError`.
 */
export function validateExecuteInput(input: ExecuteInput): {
  flow: ExecuteFlow
  payload: ExecuteBody
} {
  if (input === null || typeof input !== 'object') {
    throw new PayoutsValidationError('', 'execute input must be an object')
  }
  const { flow: requested, ...body } = input
  if (requested !== undefined && !FLOWS.includes(requested)) {
    throw new PayoutsValidationError('flow', `must be one of ${FLOWS.join(', ')}`)
  }
  const flow = requested ?? detectFlow(body)
  return { flow, payload: validate(executeSchemaByFlow[flow], body) }
}

// Built once: building a schema costs more than the HTTP round trip on loopback.
/** Quote and payout ids: at most 255 characters. */
export const longIdSchema = z.string().min(1).max(255)
/** Other ids: any non-empty string. */
export const idSchema = z.string().min(1)

/**
 * An identifier for a path. The common, valid case is checked by hand (in a warm request
 * path a zod parse of one string costs a few percent of a loopback round trip); anything
 * else goes through the schema, which produces the typed error.
 */
export function requireId(schema: typeof idSchema | typeof longIdSchema, value: unknown): string {
  const max = schema === longIdSchema ? 255 : Number.POSITIVE_INFINITY
  if (typeof value === 'string' && value.length > 0 && value.length <= max) return value
  return validate(schema, value)
}

/** Parses a 2xx body; a body of the wrong shape is a typed error, not a ZodError. */
export function parseResponse<T extends z.ZodType>(
  schema: T,
  body: unknown,
  status: number
): z.output<T> {
  const result = schema.safeParse(body)
  if (!result.success) {
    const issue = result.error.issues[0]
    throw new PayoutsApiError({
      status,
      code: 'INVALID_RESPONSE',
      message: `unexpected response shape at ${fieldOf(issue) || '(root)'}: ${issue.message}`,
    })
  }
  return result.data
}

/** The per-call options a call reads, and nothing else the caller's object may hold. */
export function callOptions(options: CallOptions | undefined): CallOptions {
  return { idempotencyKey: options?.idempotencyKey, signal: options?.signal }
}
