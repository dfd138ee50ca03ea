import { AsyncLocalStorage } from 'node:async_hooks'

/**
 * One change's place in its payout's order of telling: `ready()` says when the listener may
 * hear it (the payout's change before it reached its listener), `go()` that it is reaching
 * it now, or never will from here (skipped, let go, failed): the next one may go.
 */
export interface Turn {
  ready(): Promise<void> | undefined
  go(): void
}

/**
 * The order in which this process's listener hears a payout's changes: the order they
 * committed in.
 *
 * Each transaction's changes are told after its COMMIT, and telling one may first ask the
 * database something (its lease renewed, the deposit it confirmed). A payout's row lock
 * (SQLite's single writer) orders its transactions, but not what each one asks afterwards:
 * with one connection, the first one's question queued behind the second one's whole
 * transaction, whose own telling asked nothing, and `completed` was heard before
 * `processing`. So each commit hook, which runs in commit order, takes a turn per change
 * (`take`), and a change reaches the listener only once its payout's previous change in
 * this process reached it, or gave up.
 *
 * What is ordered is when the listener is called, not when it returns: a listener that is
 * slow, hangs, or itself waits for a later change of its payout (a test's `fake.complete()`
 * in a `payouts:created` listener) holds nothing back. A change waits only for the question
 * the change before it asks, and for the changes before that one in its own batch, which are
 * told one by one; so a wait is bounded (`waitMs`: the ledger gives a third of the lease),
 * and an apply made while a listener is called does not wait at all (`listening`): its change
 * may sit behind that very listener in its batch.
 *
 * Not ordered: changes told by another process, and those the outbox sweep tells (a change
 * whose telling gave up goes there, and is heard after its payout's later ones).
 */
export class TellingOrder {
  /** Per payout (its connection, account and UUID), when its last change taken went. */
  #last = new Map<string, Promise<void>>()
  /** Set while a listener is called; `active` ends with the call. */
  #listening = new AsyncLocalStorage<{ active: boolean }>()

  /**
   * The turns of a committed batch's changes, in its order, one per key (`null`: the outcome
   * tells nothing). Called from the commit hook, synchronously: the hooks' order is the
   * commits' order.
   */
  take(keys: Array<string | null>, waitMs: number): Array<Turn | undefined> {
    const waits = this.#listening.getStore()?.active !== true
    return keys.map((key) => {
      if (key === null) return undefined
      const before = waits ? this.#last.get(key) : undefined
      let go!: () => void
      const went = new Promise<void>((resolve) => (go = resolve))
      this.#last.set(key, went)
      void went.then(() => {
        if (this.#last.get(key) === went) this.#last.delete(key)
      })
      return { ready: () => before && bounded(before, waitMs), go }
    })
  }

  /** Calls a listener; an apply it makes during the call takes turns that do not wait. */
  async listening<T>(call: () => T | Promise<T>): Promise<T> {
    const store = { active: true }
    try {
      return await this.#listening.run(store, call)
    } finally {
      store.active = false
    }
  }

  /** How many payouts have a change whose turn has not gone (0 once all went). */
  get size(): number {
    return this.#last.size
  }
}

/** Settles when `went` does, or after `ms`. */
function bounded(went: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms)
    timer.unref()
  })
  return Promise.race([went, late]).finally(() => clearTimeout(timer))
}

/** The process's one order: every ledger of it takes its turns here. */
export const tellingOrder = new TellingOrder()
