import { z } from 'zod'

/** payout.created data (spec, Events). */
export const payoutCreatedDataSchema = z.looseObject({
  payoutId: z.string().min(1),
  transactionType: z.string().optional(),
  payoutAmount: z.number().finite().optional(),
  payoutCurrency: z.string().optional(),
  sourceCurrency: z.string().optional(),
  recipientId: z.string().optional(),
  status: z.string().default('pending'),
  createdAt: z.string().optional(),
})

/** payout.status.updated data (spec, Events). */
export const payoutStatusUpdatedDataSchema = z.looseObject({
  payoutId: z.string().min(1),
  status: z.string().min(1),
  provider: z.string().optional(),
  step: z.string().optional(),
  stepChangedAt: z.string().optional(),
})

/**
 * The webhook envelope. `createdAt` governs; the `created_at` spelling seen in one
 * example is accepted too (spec, Envelope).
 */
export const eventEnvelopeSchema = z
  .looseObject({
    type: z.string().min(1),
    createdAt: z.string().optional(),
    created_at: z.string().optional(),
    data: z.record(z.string(), z.unknown()),
  })
  .transform(({ created_at: legacy, ...rest }) => ({
    ...rest,
    createdAt: rest.createdAt ?? legacy,
  }))
export type EventEnvelope = z.infer<typeof eventEnvelopeSchema>
export type PayoutCreatedData = z.infer<typeof payoutCreatedDataSchema>
export type PayoutStatusUpdatedData = z.infer<typeof payoutStatusUpdatedDataSchema>

const utf8 = new TextDecoder('utf-8')

/**
 * JSON.parse of a message's raw bytes as UTF-8, a leading byte order mark skipped (RFC 8259
 * lets a parser ignore it; `JSON.parse` alone refuses it). The bytes themselves are not
 * changed: the signature was checked over them and the inbox keeps them as received.
 */
export function parseJsonBytes(raw: Uint8Array): unknown {
  return JSON.parse(utf8.decode(raw))
}
