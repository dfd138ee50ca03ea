import type { ExecuteFlow } from '../schemas/common.ts'
import type { ExecuteBody } from '../schemas/requests.ts'

/** Per-call options of the calls that create something. */
export interface CallOptions {
  /** Sent as Idempotency-Key; a fresh UUID is used when it is missing. */
  idempotencyKey?: string
  signal?: AbortSignal
}

/** Paging of a list call: how many rows, and the cursor the previous page returned. */
export interface ListQuery {
  limit?: number
  cursor?: string
}

/** Execute input: the body of any flow, optionally naming the flow (never sent). */
export type ExecuteInput = ExecuteBody & { flow?: ExecuteFlow } & Record<string, unknown>

/** Execute-batch result row. */
export type BatchRow =
  | { index: number; success: true; data: Record<string, unknown> }
  | { index: number; success: false; error: { code?: string; error?: string } }

/** Where the client logs its requests and retries (AdonisJS's logger fits). */
export interface ClientLogger {
  debug(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
}
