import { AsyncLocalStorage } from 'node:async_hooks'
import debug from '../debug.ts'
import { safeError } from '../safe_error.ts'

/**
 * The order in which this process tells a payout's changes: the order they committed in.
 *
 * Each transaction's changes are told after its COMMIT, and telling them may first ask the
 * database something (a lease renewed, a deposit read). A payout's row lock (SQLite's single
 * writer) orders its transactions, but not what each one asks afterwards: with one
 * connection, the first one's question queues behind the second one's whole transaction,
 * whose own telling needs nothing, and `completed` was heard before `processing`. So the
 * commit hooks, which run in commit order, queue each payout's telling behind the telling
 * its previous commit started in this process (any ledger of it: the process is what a
 * listener hears from). Across processes nothing orders them: each tells its own.
 *
 * Two bounds keep a queue from waiting on itself or forever:
 * - a change applied by a listener while it is told a change (its own apply, awaited inside
 *   its hook) does not wait for the telling it is part of;
 * - a telling waits for the one before it at most `waitMs` (the caller gives a third of the
 *   lease: its changes' lease is not renewed while they wait, and a listener that hangs does
 *   not hold the payout's later changes past it).
 */
export class TellingOrder {
  /** Per payout (its connection, account and UUID), the telling its last commit started. */
  #last = new Map<string, Promise<void>>()
  /** Set while a listener is told: an apply it makes does not wait for its own telling. */
  #telling = new AsyncLocalStorage<true>()

  /**
   * Starts `tell` once the tellings already queued for `payouts` are done (or `waitMs` has
   * passed), and queues it for the next commit of each of them. Called from a commit hook,
   * synchronously: the hooks' order is the commits' order.
   */
  after(payouts: string[], waitMs: number, tell: () => Promise<void>): Promise<void> {
    const before = this.#telling.getStore()
      ? []
      : [...new Set(payouts)].flatMap((key) => this.#last.get(key) ?? [])
    const told = waitedFor(before, waitMs)
      .then(() => this.#telling.run(true, tell))
      .catch((error) => debug('ledger: changes not told: %s', safeError(error).message))
    for (const key of payouts) this.#last.set(key, told)
    void told.finally(() => {
      for (const key of payouts) if (this.#last.get(key) === told) this.#last.delete(key)
    })
    return told
  }

  /** How many payouts have a telling queued or running (0 once all are told). */
  get size(): number {
    return this.#last.size
  }
}

/** Settles when all of `tellings` have (they never reject), or after `ms`. */
function waitedFor(tellings: Array<Promise<void>>, ms: number): Promise<void> {
  if (tellings.length === 0) return Promise.resolve()
  let timer: NodeJS.Timeout | undefined
  const bound = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms)
    timer.unref()
  })
  return Promise.race([Promise.all(tellings).then(() => {}), bound]).finally(() =>
    clearTimeout(timer)
  )
}

/** The process's one order: every ledger of it queues its tellings here. */
export const tellingOrder = new TellingOrder()
