/** Zod schemas shared by the client, the emulator and the webhook pipeline. */
export * from './common.ts'
export * from './requests.ts'
export * from './resources.ts'
export * from './events.ts'
