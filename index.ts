/** The public face of `@svc/adonis-payouts`. */
export { configure } from './configure.ts'
export { defineConfig } from './src/config.ts'
export { stubsRoot } from './stubs/main.ts'
export { PayoutsService } from './src/service/payouts_service.ts'
export { PayoutsManager } from './src/service/payouts_manager.ts'
export * as errors from './src/errors.ts'
export * as apiErrors from './src/client/errors.ts'
export { signPayload, verifySignature, parseSignatureHeader } from './src/signature/main.ts'
