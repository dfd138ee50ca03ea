import { AsyncLocalStorage } from 'node:async_hooks'

/**
 * One change's place in its payout's order of telling: `ready()` says when the listener may
 * hear it (the payout's change before it reached its listener), `go()` that it is reaching
 * it now, or never will from here (skipped, let go, failed): the next one may go. `batch`
 * names the committed batch it belongs to (see `listening`).
 */
export interface Turn {
  ready(): Promise<void> | undefined
  go(): void
  readonly batch: object
}

/** A turn as the order keeps it: whether it went, and the turn of its payout before it. */
interface Place {
  went: Promise<void>
  gone: boolean
  batch: object
  before?: Place
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
 * in a `payouts:created` listener) holds nothing back. A change waits for the question the
 * change before it asks, and for the changes ahead of that one in its own batch, which are
 * told one by one. So a batch waits `waitMs` at most from its COMMIT, all its changes
 * together (the ledger gives a third of the lease), and a change applied while a listener
 * is called does not wait for its payout's changes still behind that very listener in its
 * batch (`listening`): it would wait for itself. Either way it is then heard first.
 *
 * Not ordered: changes told by another process, those the outbox sweep tells (a change whose
 * telling gave up goes there, and is heard after its payout's later ones), and what a
 * listener does after it was called: a listener that awaits lets the next change's listener
 * start (the notifier's later events of a change and its broadcast are such work).
 */
export class TellingOrder {
  /** Per payout (its connection, account and UUID), the last change's place taken. */
  #last = new Map<string, Place>()
  /** Set while a listener is called: the batch it is told from; `active` ends with the call. */
  #listening = new AsyncLocalStorage<{ active: boolean; batch?: object }>()

  /**
   * The turns of a committed batch's changes, in its order, one per key (`null`: the outcome
   * tells nothing). Called from the commit hook, synchronously: the hooks' order is the
   * commits' order. The batch waits `waitMs` at most from now, all its changes together.
   */
  take(keys: Array<string | null>, waitMs: number): Array<Turn | undefined> {
    const store = this.#listening.getStore()
    const told = store?.active ? store.batch : undefined
    const batch = {}
    const deadline = Date.now() + waitMs
    return keys.map((key) => {
      if (key === null) return undefined
      const previous = this.#last.get(key)
      let resolve!: () => void
      const place: Place = {
        went: new Promise<void>((done) => (resolve = done)),
        gone: false,
        batch,
        before: previous?.gone === false ? previous : undefined,
      }
      this.#last.set(key, place)
      // Not behind the listener being called now: were it, it would wait for this apply.
      const waitsFor = place.before && !(told && behind(place.before, told)) ? place.before : null
      return {
        batch,
        ready: () =>
          waitsFor && !waitsFor.gone ? bounded(waitsFor.went, deadline - Date.now()) : undefined,
        go: () => {
          if (place.gone) return
          place.gone = true
          place.before = undefined
          resolve()
          if (this.#last.get(key) === place) this.#last.delete(key)
        },
      }
    })
  }

  /**
   * Calls a listener, told from `batch`: a change applied during the call does not wait for
   * its payout's changes still behind that listener in that batch (they wait for the call).
   */
  async listening<T>(batch: object | undefined, call: () => T | Promise<T>): Promise<T> {
    const store = { active: true, batch }
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

/** Whether `place`, or a turn of its payout it waits for, belongs to `batch` and has not gone. */
function behind(place: Place | undefined, batch: object): boolean {
  for (let at = place; at && !at.gone; at = at.before) if (at.batch === batch) return true
  return false
}

/** Settles when `went` does, or after `ms` (at once when it is not above 0). */
function bounded(went: Promise<void>, ms: number): Promise<void> {
  if (ms <= 0) return Promise.resolve()
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms)
    timer.unref()
  })
  return Promise.race([went, late]).finally(() => clearTimeout(timer))
}

/** The process's one order: every ledger of it takes its turns here. */
export const tellingOrder = new TellingOrder()
