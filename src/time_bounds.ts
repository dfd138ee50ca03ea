/**
 * Time bounds: a promise settled by its work or by a deadline, whichever comes first. Used
 * around listeners, jobs, the webhook route and database work alike; the database's own
 * bounds (statement timeouts, bounded transactions) are in `database/deadline.ts`.
 */
import { E_PAYOUTS_TIMEOUT } from './errors.ts'

/**
 * Settles as `work` does, or rejects with `E_PAYOUTS_TIMEOUT` once `ms` have passed. The
 * work itself goes on (a promise cannot be cancelled): `onTimeout` may release what it holds.
 * A later failure of the abandoned work is swallowed, since nobody waits for it any more.
 */
export function withDeadline<T>(
  work: Promise<T>,
  ms: number,
  what: string,
  onTimeout?: (error: Error) => void
): Promise<T> {
  if (!(ms > 0) || !Number.isFinite(ms)) return work
  return new Promise<T>((resolve, reject) => {
    let settled = false
    const timer = setTimeout(() => {
      if (settled) return
      settled = true
      const error = new E_PAYOUTS_TIMEOUT([what, ms])
      work.catch(() => {})
      try {
        onTimeout?.(error)
      } finally {
        reject(error)
      }
    }, ms)
    work.then(
      (value) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        resolve(value)
      },
      (error) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        reject(error)
      }
    )
  })
}

/** Whether an error is a deadline of ours (the work may still finish in the background). */
export function isDeadlineError(error: unknown): boolean {
  return error instanceof E_PAYOUTS_TIMEOUT
}
