import { createHmac, timingSafeEqual } from 'node:crypto'

/** Signature timestamp tolerance (spec, Limits): 5 minutes either way. */
export const DEFAULT_TOLERANCE_SECONDS = 300

/** Computes the hex v1 digest: HMAC-SHA256 of `${t}.` followed by the raw body bytes. */
export function computeV1(secret: string, timestamp: number | string, rawBody: Uint8Array): string {
  return createHmac('sha256', secret).update(`${timestamp}.`).update(rawBody).digest('hex')
}

/** Builds an Svc-Signature header value, as the service (and the emulator) sends it. */
export function signPayload(
  secret: string,
  timestamp: number,
  rawBody: Uint8Array | string
): string {
  const bytes = typeof rawBody === 'string' ? Buffer.from(rawBody, 'utf8') : rawBody
  return `t=${timestamp},v1=${computeV1(secret, timestamp, bytes)}`
}

/** A parsed Svc-Signature header: its timestamp and every v1 digest it carries. */
export interface ParsedSignature {
  timestamp: number
  v1: string[]
}

const DIGITS = /^\d{1,15}$/
const HEX64 = /^[0-9a-f]{64}$/
const SCHEME = /^v\d+$/

/**
 * Parses Svc-Signature strictly: exactly one `t` of digits, one or more `v1` of 64
 * lowercase hex characters; other `vN` schemes are ignored (spec, Versioning); any other
 * part, duplicate `t` or empty item rejects the header. Returns null when malformed.
 */
export function parseSignatureHeader(header: string | undefined | null): ParsedSignature | null {
  if (typeof header !== 'string' || header.length === 0 || header.length > 4096) return null
  let timestamp: number | undefined
  const v1: string[] = []
  for (const part of header.split(',')) {
    const eq = part.indexOf('=')
    if (eq <= 0) return null
    const key = part.slice(0, eq).trim()
    const value = part.slice(eq + 1).trim()
    if (key === 't') {
      if (timestamp !== undefined || !DIGITS.test(value)) return null
      timestamp = Number(value)
    } else if (key === 'v1') {
      if (!HEX64.test(value)) return null
      v1.push(value)
    } else if (!SCHEME.test(key) || value.length === 0) {
      return null
    }
  }
  if (timestamp === undefined || v1.length === 0) return null
  return { timestamp, v1 }
}

/** Why a signature was refused. */
export type VerifyFailure =
  'malformed_header' | 'timestamp_out_of_tolerance' | 'no_matching_signature'

/** The verdict: the timestamp and the index of the matching secret, or the reason. */
export type VerifyResult =
  { ok: true; timestamp: number; secretIndex: number } | { ok: false; reason: VerifyFailure }

/** What `verifySignature` checks: the header, the raw body bytes, the secrets to try. */
export interface VerifyOptions {
  header: string | undefined | null
  rawBody: Uint8Array
  /** Every secret accepted now (a host-configured previous one only while its grace lasts). */
  secrets: string[]
  toleranceSeconds?: number
  nowSeconds?: number
}

/**
 * Verifies a delivery against the raw body bytes. Every candidate digest is compared in
 * constant time and all of them are checked, so timing does not reveal which one matched.
 */
export function verifySignature(options: VerifyOptions): VerifyResult {
  const parsed = parseSignatureHeader(options.header)
  if (!parsed) return { ok: false, reason: 'malformed_header' }
  const now = options.nowSeconds ?? Math.floor(Date.now() / 1000)
  const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS
  if (Math.abs(now - parsed.timestamp) > tolerance) {
    return { ok: false, reason: 'timestamp_out_of_tolerance' }
  }
  /** The index of the first secret that signed it; every candidate is still compared. */
  let matched: number | undefined
  options.secrets.forEach((secret, index) => {
    const expected = Buffer.from(computeV1(secret, parsed.timestamp, options.rawBody), 'hex')
    for (const candidate of parsed.v1) {
      if (timingSafeEqual(expected, Buffer.from(candidate, 'hex')) && matched === undefined) {
        matched = index
      }
    }
  })
  if (matched === undefined) return { ok: false, reason: 'no_matching_signature' }
  return { ok: true, timestamp: parsed.timestamp, secretIndex: matched }
}
