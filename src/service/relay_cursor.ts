/** Ids not seen yet below the frontier: a transaction that took them may still commit. */
export interface Gap {
  from: number
  to: number
  /** When the read that found it missing returned. */
  since: number
}

/** What one read of the log saw, as the cursor needs it (ids ascending, times in ms). */
export interface CursorRead {
  /** The ids after the frontier it read, in order. */
  fresh: readonly number[]
  /** When the read of `fresh` returned: the new gaps among them are found missing then. */
  seenAt: number
  /** The ids that appeared in the gaps held before it. */
  found: readonly number[]
  /** When it started reading those gaps back: a gap whose wait was over then is given up. */
  startedAt: number
}

/** Where a read leaves the cursor, worked out before anything moves (`commit` moves it). */
export interface CursorStep {
  frontier: number
  gaps: Gap[]
  /** The gaps given up: still missing in a read that started once their wait was over. */
  expired: Gap[]
}

/**
 * The relay's place in the log (`payout_events` ids), no database: the frontier (the highest
 * id read) and the gaps below it, the ids not seen yet that a transaction still open may
 * commit. A gap is read back until its ids appear or a read that started `gapWaitMs` after
 * it was found missing still misses it (its transaction rolled back): no id is skipped while
 * it may still commit, and none is taken twice. A read is worked out first (`step`) and
 * moves the cursor only once everything it needed was read (`commit`).
 */
export class RelayCursor {
  #gapWaitMs: number
  #frontier: number | null = null
  #gaps: Gap[] = []

  /** `gapWaitMs`: how long a missing id is waited for before it is given up. */
  constructor(gapWaitMs: number) {
    this.#gapWaitMs = gapWaitMs
  }

  /** Whether it was set (`begin`): every id committed from then on is read. */
  get started() {
    return this.#frontier !== null
  }

  /** The highest id read, `null` before `begin`. */
  get frontier() {
    return this.#frontier
  }

  /** The gaps waited for now: the ranges the next read reads back. */
  get gaps(): readonly Gap[] {
    return this.#gaps
  }

  /** The ids it still waits for, as ranges. */
  pendingGaps(): Array<[number, number]> {
    return this.#gaps.map((gap) => [gap.from, gap.to])
  }

  /**
   * Sets the frontier at the newest of `ids` (the newest ids of the log, ascending), and the
   * ids missing among them as gaps found at `now`. Answers the frontier.
   */
  begin(ids: readonly number[], now: number): number {
    for (let i = 1; i < ids.length; i++) {
      if (ids[i] > ids[i - 1] + 1)
        this.#gaps.push({ from: ids[i - 1] + 1, to: ids[i] - 1, since: now })
    }
    this.#frontier = ids.at(-1) ?? 0
    return this.#frontier
  }

  /** Where `read` leaves the cursor; nothing moves until `commit`. */
  step(read: CursorRead): CursorStep {
    const frontier = this.#frontier
    if (frontier === null) throw new Error('RelayCursor.step before begin')
    let gaps = this.#gaps
    for (const id of read.found) gaps = fill(gaps, id)
    // Given up: still missing in a read that started once its wait was over.
    const expired = gaps.filter((gap) => read.startedAt - gap.since >= this.#gapWaitMs)
    gaps = gaps.filter((gap) => read.startedAt - gap.since < this.#gapWaitMs)
    let expected = frontier + 1
    for (const id of read.fresh) {
      if (id > expected) gaps.push({ from: expected, to: id - 1, since: read.seenAt })
      expected = id + 1
    }
    return { frontier: read.fresh.at(-1) ?? frontier, gaps, expired }
  }

  /** Moves the cursor where `step` said: all that read needed was read. */
  commit(step: CursorStep) {
    this.#frontier = step.frontier
    this.#gaps = step.gaps
  }
}

/** `gaps` with the id that appeared taken out: its gap shrinks or splits. */
function fill(gaps: Gap[], id: number): Gap[] {
  const at = gaps.findIndex((gap) => gap.from <= id && id <= gap.to)
  if (at === -1) return gaps
  const gap = gaps[at]
  const parts = [
    { ...gap, to: id - 1 },
    { ...gap, from: id + 1 },
  ].filter((part) => part.from <= part.to)
  return [...gaps.slice(0, at), ...parts, ...gaps.slice(at + 1)]
}
