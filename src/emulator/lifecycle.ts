import { PROCESSING_STEPS, type PayoutStep } from '../schemas/common.ts'
import type { EmulatorClock } from './clock.ts'
import type { PayoutRecord } from './state.ts'

/**
 * Scenarios chosen by the payout's `reference`: `scenario:fail` fails at converting (reads
 * then show `conversion_failed` as the running leg's providerMetadata status),
 * `scenario:cancel` is cancelled while pending, `scenario:stall` stops at collected.
 */
export function scenarioOf(reference?: string): 'fail' | 'cancel' | 'stall' | 'normal' {
  const match = /scenario:(fail|cancel|stall)/.exec(reference ?? '')
  return (match?.[1] as 'fail' | 'cancel' | 'stall') ?? 'normal'
}

export type EmitFn = (
  payout: PayoutRecord,
  type: 'payout.created' | 'payout.status.updated'
) => void

/** Moves payouts through pending → processing steps → completed on the emulated clock. */
export class Lifecycle {
  constructor(
    private clock: EmulatorClock,
    private emit: EmitFn,
    private stepIntervalMs: number
  ) {}

  /** Starts processing one interval from now (after funding). */
  start(payout: PayoutRecord) {
    const scenario = scenarioOf(payout.reference)
    if (scenario === 'cancel') {
      this.clock.setTimer(() => this.#move(payout, 'cancelled', payout.step), this.stepIntervalMs)
      return
    }
    this.clock.setTimer(() => this.#advance(payout, 0), this.stepIntervalMs)
  }

  #advance(payout: PayoutRecord, index: number) {
    if (payout.status !== 'pending' && payout.status !== 'processing') return
    const scenario = scenarioOf(payout.reference)
    const step = PROCESSING_STEPS[index]
    if (step === undefined) {
      payout.completedAt = this.clock.iso()
      this.#move(payout, 'completed', 'delivered')
      return
    }
    if (scenario === 'fail' && step === 'converting') {
      payout.failureStatus = 'conversion_failed'
      this.#move(payout, 'failed', payout.step)
      return
    }
    this.#move(payout, 'processing', step)
    if (scenario === 'stall' && step === 'collected') return
    this.clock.setTimer(() => this.#advance(payout, index + 1), this.stepIntervalMs)
  }

  #move(payout: PayoutRecord, status: PayoutRecord['status'], step: PayoutStep) {
    payout.status = status
    payout.step = step
    this.emit(payout, 'payout.status.updated')
  }

  /** Admin: jump a payout to a status (tests of reconciliation and stuck payouts). */
  force(payout: PayoutRecord, status: PayoutRecord['status'], step?: PayoutStep, emit = true) {
    payout.status = status
    if (step) payout.step = step
    if (status === 'completed') {
      payout.step = 'delivered'
      payout.completedAt = this.clock.iso()
    }
    if (emit) this.emit(payout, 'payout.status.updated')
  }
}
