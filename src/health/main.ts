/** `@svc/adonis-payouts/health`: the check to register in `start/health.ts`. */
export { PayoutsCheck } from './payouts_check.ts'
export type {
  HealthLine,
  HealthLines,
  HeartbeatsLine,
  PayoutsHealthReport,
  ReachabilityLine,
  Verdict,
} from './types.ts'
