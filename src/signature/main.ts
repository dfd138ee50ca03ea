/** `Svc-Signature`: signing (the emulator, tests) and strict, constant-time verification. */
export {
  computeV1,
  DEFAULT_TOLERANCE_SECONDS,
  parseSignatureHeader,
  signPayload,
  verifySignature,
  type ParsedSignature,
  type VerifyFailure,
  type VerifyOptions,
  type VerifyResult,
} from './signature.ts'
