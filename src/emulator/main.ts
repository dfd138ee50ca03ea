/** `@svc/adonis-payouts/emulator`: a stateful in-memory Payout Service for tests and development. */
export { PayoutsEmulator, type EmulatorOptions } from './emulator.ts'
export { EmulatorAdmin } from './admin.ts'
export type { ClockOptions } from './clock.ts'
export type { FaultConfig } from './faults.ts'
export { ALL_SCOPES, type Scope } from './state.ts'
