import {
  PAYOUT_STATUSES,
  PAYOUT_STEPS,
  TERMINAL_STATUSES,
  type PayoutStatus,
  type PayoutStep,
} from '../schemas/common.ts'

/** Where a payout stands: the only two fields the state machine orders. */
export interface PayoutPosition {
  status: PayoutStatus
  step: PayoutStep | null
}

/** What one observation says; either part may be missing or unknown to us. */
export interface ObservedPosition {
  status?: string | null
  step?: string | null
}

/** Why the reducer moved a position or left it as it was. */
export type ReduceReason =
  'applied' | 'duplicate' | 'backwards' | 'after_terminal' | 'unknown_status' | 'no_position'

/** The reducer's answer: the position after the observation, and whether it moved. */
export interface ReduceResult {
  next: PayoutPosition
  changed: boolean
  reason: ReduceReason
}

const STATUS_RANK: Record<PayoutStatus, number> = {
  pending: 0,
  processing: 1,
  completed: 2,
  failed: 2,
  cancelled: 2,
}

/** Whether a value is one of the statuses the reducer knows. */
export function isPayoutStatus(value: unknown): value is PayoutStatus {
  return typeof value === 'string' && (PAYOUT_STATUSES as readonly string[]).includes(value)
}

/** Whether a value is one of the steps the reducer knows. */
export function isPayoutStep(value: unknown): value is PayoutStep {
  return typeof value === 'string' && (PAYOUT_STEPS as readonly string[]).includes(value)
}

/** Whether a status is final (completed, failed or cancelled): nothing moves it again. */
export function isTerminal(status: PayoutStatus): boolean {
  return TERMINAL_STATUSES.includes(status)
}

/** The rank of "no step yet": below every step, so any step is a move forward from it. */
const NO_STEP_RANK = -1

function stepRank(step: PayoutStep | null): number {
  return step === null ? NO_STEP_RANK : PAYOUT_STEPS.indexOf(step)
}

/**
 * Maps the statuses execute returns (accepted, awaiting_escrow_deposit, an onramp route's
 * status) to the read statuses. Every one of them means "created, not yet submitted":
 * pending (docs/spec-gaps.md). A read status passes through unchanged.
 */
export function mapExecuteStatus(status: string): PayoutStatus {
  return isPayoutStatus(status) ? status : 'pending'
}

/**
 * Applies one observation to a position. Statuses only rise
 * (pending < processing < terminal), steps only move forward, and the first terminal
 * status wins for good. The result is the same whatever the order of the observations,
 * which is what makes duplicates, reordering and two sources harmless.
 */
export function reduce(current: PayoutPosition | null, observed: ObservedPosition): ReduceResult {
  const status = observed.status ?? null
  const step = isPayoutStep(observed.step) ? observed.step : null
  if (status !== null && !isPayoutStatus(status)) {
    return {
      next: current ?? { status: 'pending', step: null },
      changed: false,
      reason: 'unknown_status',
    }
  }
  if (current === null) {
    const initial: PayoutPosition = { status: status ?? 'pending', step }
    if (initial.status === 'completed') initial.step = 'delivered'
    return { next: initial, changed: true, reason: 'applied' }
  }
  if (status === null && step === null)
    return { next: current, changed: false, reason: 'no_position' }
  if (isTerminal(current.status)) {
    const duplicate =
      (status === null || status === current.status) && stepRank(step) <= stepRank(current.step)
    return { next: current, changed: false, reason: duplicate ? 'duplicate' : 'after_terminal' }
  }
  let nextStatus = current.status
  if (status !== null && STATUS_RANK[status] > STATUS_RANK[current.status]) nextStatus = status
  let nextStep = current.step
  if (step !== null && stepRank(step) > stepRank(current.step)) nextStep = step
  if (nextStatus === 'completed') nextStep = 'delivered'
  // A step reported while pending means processing has begun.
  if (nextStatus === 'pending' && stepRank(nextStep) > stepRank('initiated'))
    nextStatus = 'processing'
  const changed = nextStatus !== current.status || nextStep !== current.step
  if (changed) return { next: { status: nextStatus, step: nextStep }, changed, reason: 'applied' }
  const backwards =
    (status !== null && STATUS_RANK[status] < STATUS_RANK[current.status]) ||
    (step !== null && stepRank(step) < stepRank(current.step))
  return { next: current, changed: false, reason: backwards ? 'backwards' : 'duplicate' }
}

/**
 * Whether an observation shows a position behind the current one: a lower status, a step
 * before the current one within the same status, or another status once one is terminal
 * (the first terminal status wins for good). What such an observation describes is older
 * than what the ledger holds. An unknown status, or no position at all, is not behind.
 */
export function isBehind(current: PayoutPosition | null, observed: ObservedPosition): boolean {
  if (current === null) return false
  const status = observed.status ?? null
  if (status !== null && !isPayoutStatus(status)) return false
  if (status !== null && STATUS_RANK[status] < STATUS_RANK[current.status]) return true
  if (status !== null && isTerminal(current.status) && status !== current.status) return true
  if (status !== null && STATUS_RANK[status] > STATUS_RANK[current.status]) return false
  const step = isPayoutStep(observed.step) ? observed.step : null
  return step !== null && stepRank(step) < stepRank(current.step)
}
