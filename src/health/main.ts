/** `@svc/adonis-payouts/health`: the check to register in `start/health.ts`. */
export { PayoutsCheck } from './payouts_check.ts'
export type { HealthLine, HealthLines, PayoutsHealthReport, Verdict } from '../service/health.ts'
export type { ReachabilityLine } from './reachability.ts'
