import { randomUUID } from 'node:crypto'
import { signPayload } from '../src/signature/main.ts'

/** The signing secret the bench apps are configured with. */
export const BENCH_SECRET = 'whsec_bench_secret_0123456789'

/** A `payout.status.updated` envelope, as the service sends it. */
export function statusEvent(
  payoutId: string = randomUUID(),
  status = 'processing',
  step = 'compliance_cleared'
): string {
  const now = new Date().toISOString()
  return JSON.stringify({
    type: 'payout.status.updated',
    createdAt: now,
    data: { payoutId, status, provider: 'bench-rail', step, stepChangedAt: now },
  })
}

/** Headers of a signed delivery: fresh timestamp, the given unique delivery id. */
export function signedHeaders(raw: string, id: string): Record<string, string> {
  return {
    'content-type': 'application/json',
    'svc-signature': signPayload(BENCH_SECRET, Math.floor(Date.now() / 1000), raw),
    'svc-delivery-id': id,
    'svc-event-type': 'payout.status.updated',
  }
}

let sequence = 0

/** A fresh delivery id, unique across runs and processes. */
export function deliveryId(tag: string): string {
  sequence++
  return `dlv_${tag}_${process.pid}_${Date.now().toString(36)}_${sequence}`
}
