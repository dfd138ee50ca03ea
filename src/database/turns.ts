import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { isSqlite } from './dialects.ts'

/**
 * How long a transaction's work in this process runs before it lets the event loop take a
 * turn (see `Turns`), ms.
 */
export const TURN_MS = 3

/**
 * Long synchronous work inside a transaction, split into turns of the event loop: the
 * requests that arrived meanwhile (a webhook's acknowledgement, on the same process) are
 * read and answered between them, instead of behind a whole batch's models being built,
 * reduced and compared. `next()` answers a promise of the next turn once `ms` of work have
 * run since the last one, nothing otherwise (so a small batch never waits).
 */
export class Turns {
  #since = performance.now()

  constructor(private readonly ms: number) {}

  /** A turn of the event loop if this work has run `ms` since the last one; else nothing. */
  next(): Promise<void> | undefined {
    if (this.ms <= 0 || performance.now() - this.#since < this.ms) return undefined
    return new Promise((resolve) =>
      setImmediate(() => {
        this.#since = performance.now()
        resolve()
      })
    )
  }
}

/**
 * The turns of a transaction on this client: none on SQLite, whose one connection (and, in
 * another process, whose one write lock) every other statement waits for while the
 * transaction is open, so it is best ended soon; there the batches are short instead (the
 * inline drain's slices). On PostgreSQL and MySQL the other statements run on their own
 * connections meanwhile.
 */
export function turnsFor(client: QueryClientContract, ms = TURN_MS): Turns {
  return new Turns(isSqlite(client) ? 0 : ms)
}
