/** How emulated time flows. */
export type ClockOptions =
  { mode: 'real' } | { mode: 'scaled'; scale: number } | { mode: 'manual'; start?: number }

interface Timer {
  id: number
  due: number
  fn: () => void
}

/**
 * The emulator's clock: real time, real time sped up, or manual (moved only by
 * `advance`). Every delay in the emulator (lifecycle steps, webhook retries, key rotation,
 * expiry) runs on it, so a test can make 40 minutes pass in milliseconds.
 */
export class EmulatorClock {
  #timers: Timer[] = []
  #nextId = 1
  #offset = 0
  #origin = Date.now()
  #start: number
  #pump?: NodeJS.Timeout
  #closed = false

  constructor(readonly options: ClockOptions = { mode: 'real' }) {
    this.#start = options.mode === 'manual' ? (options.start ?? Date.now()) : Date.now()
  }

  #scale() {
    return this.options.mode === 'scaled' ? this.options.scale : 1
  }

  /** Emulated epoch milliseconds. */
  now(): number {
    if (this.options.mode === 'manual') return this.#start + this.#offset
    return this.#start + (Date.now() - this.#origin) * this.#scale() + this.#offset
  }

  nowSeconds(): number {
    return Math.floor(this.now() / 1000)
  }

  iso(): string {
    return new Date(this.now()).toISOString()
  }

  /** Runs `fn` after `delayMs` of emulated time. */
  setTimer(fn: () => void, delayMs: number): number {
    const timer = { id: this.#nextId++, due: this.now() + Math.max(0, delayMs), fn }
    const index = this.#timers.findIndex((t) => t.due > timer.due)
    if (index === -1) this.#timers.push(timer)
    else this.#timers.splice(index, 0, timer)
    this.#schedulePump()
    return timer.id
  }

  clearTimer(id: number) {
    this.#timers = this.#timers.filter((t) => t.id !== id)
  }

  /** Moves emulated time forward, firing every timer that falls due, in order. */
  async advance(ms: number) {
    const target = this.now() + ms
    for (;;) {
      const next = this.#timers[0]
      if (!next || next.due > target) break
      this.#timers.shift()
      this.#offset += Math.max(0, next.due - this.now())
      next.fn()
      // Let async work started by the timer (HTTP deliveries) begin before the next one.
      await new Promise((resolve) => setImmediate(resolve))
    }
    this.#offset += Math.max(0, target - this.now())
    this.#schedulePump()
  }

  /** Timers not yet fired (tests check that state stays bounded). */
  get pending(): number {
    return this.#timers.length
  }

  #schedulePump() {
    if (this.options.mode === 'manual' || this.#closed) return
    clearTimeout(this.#pump)
    const next = this.#timers[0]
    if (!next) return
    const realDelay = Math.max(0, (next.due - this.now()) / this.#scale())
    this.#pump = setTimeout(() => this.#fireDue(), Math.min(realDelay, 2 ** 31 - 1))
    this.#pump.unref()
  }

  #fireDue() {
    const now = this.now()
    while (this.#timers[0] && this.#timers[0].due <= now) this.#timers.shift()!.fn()
    this.#schedulePump()
  }

  close() {
    this.#closed = true
    clearTimeout(this.#pump)
    this.#timers = []
  }
}
