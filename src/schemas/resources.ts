import { z } from 'zod'

/**
 * Response schemas. Every object is loose: unknown fields pass through untouched, so a
 * field the service adds tomorrow never breaks a parse (spec, Versioning).
 */

const num = z.number().finite()

export const feesSchema = z.looseObject({
  serviceFee: num,
  serviceFeeBps: z.number().int(),
  partnerFee: num.default(0),
  gasFee: num.default(0),
})
export type Fees = z.infer<typeof feesSchema>

const executeDataCommon = {
  payoutId: z.string().min(1),
  quoteId: z.string().min(1),
  status: z.string().min(1),
  toAmount: num,
  partnerFxRate: num,
  effectiveRate: num,
  fees: feesSchema,
}

const stringMap = z.record(z.string(), z.string())

export const fiatToFiatExecuteDataSchema = z.looseObject({
  ...executeDataCommon,
  bankingInstructions: stringMap,
})

/** depositAmountAtomic arrives as a decimal string and becomes a bigint (spec). */
export const atomicAmountSchema = z
  .string()
  .regex(/^\d+$/, 'must be an integer string')
  .transform((value) => BigInt(value))

export const stablecoinToFiatExecuteDataSchema = z.looseObject({
  ...executeDataCommon,
  escrowAddress: z.string().min(1),
  depositAmountAtomic: atomicAmountSchema,
  tokenAddress: z.string().min(1),
  chainId: z.number().int(),
})

export const onrampExecuteDataSchema = z.looseObject({
  ...executeDataCommon,
  paymentUrl: z.string().optional(),
  bankingInstructions: stringMap.optional(),
})

export const executeDataSchemaByFlow = {
  fiat_to_fiat: fiatToFiatExecuteDataSchema,
  stablecoin_to_fiat: stablecoinToFiatExecuteDataSchema,
  onramp: onrampExecuteDataSchema,
} as const

export type FiatToFiatExecuteData = z.infer<typeof fiatToFiatExecuteDataSchema>
export type StablecoinToFiatExecuteData = z.infer<typeof stablecoinToFiatExecuteDataSchema>
export type OnrampExecuteData = z.infer<typeof onrampExecuteDataSchema>

/** The execute result, discriminated by the flow the request selected. */
export type ExecuteResult =
  | ({ flow: 'fiat_to_fiat' } & FiatToFiatExecuteData)
  | ({ flow: 'stablecoin_to_fiat' } & StablecoinToFiatExecuteData)
  | ({ flow: 'onramp' } & OnrampExecuteData)

/** `{ success: true, data }` wrapper of execute responses. */
export function successWrapper<T extends z.ZodType>(data: T) {
  return z.looseObject({ success: z.literal(true), data })
}

/**
 * A payout's routing detail (spec, Payout): the schema `version`, the `onramp` leg
 * (fiat-to-stablecoin and fiat-to-fiat) and the `offramp` leg (stablecoin-to-fiat and
 * fiat-to-fiat). The legs' full key sets are not shown (`protocol`, `status`, `amount`,
 * `currency` seen), so each leg passes through whole.
 */
export const providerMetadataSchema = z.looseObject({
  version: z.number().int().optional(),
  onramp: z.looseObject({}).optional(),
  offramp: z.looseObject({}).optional(),
})
export type ProviderMetadata = z.infer<typeof providerMetadataSchema>

export const payoutSchema = z.looseObject({
  id: z.string().min(1),
  transactionType: z.string().optional(),
  status: z.string().min(1),
  sourceAmount: num.optional(),
  sourceCurrency: z.string().optional(),
  payoutAmount: num.optional(),
  payoutCurrency: z.string().optional(),
  recipientId: z.string().optional(),
  paymentMethod: z.string().optional(),
  paymentPurpose: z.string().optional(),
  reference: z.string().optional(),
  providerMetadata: providerMetadataSchema.optional(),
  createdAt: z.string().optional(),
  completedAt: z.string().optional(),
  /** Not in the spec's read shape; the emulator adds it, the ledger uses it when present. */
  step: z.string().optional(),
  payoutId: z.string().optional(),
})
export type Payout = z.infer<typeof payoutSchema>

export const stablecoinQuoteSchema = z.looseObject({
  protocol: z.string().startsWith('rt_'),
  fromCcy: z.string(),
  toCcy: z.string(),
  fromAmount: num,
  toAmount: num,
  exchangeRate: num,
  effRate: num,
  fee: num,
  isCryptoQuote: z.boolean(),
  swapPath: z.string(),
})
export type StablecoinQuote = z.infer<typeof stablecoinQuoteSchema>

export const onrampQuoteSchema = z.looseObject({
  protocol: z.string().startsWith('rt_'),
  fromCcy: z.string(),
  toToken: z.string(),
  fromAmount: num,
  toAmount: num,
  rate: num,
  fee: num,
})
export type OnrampQuote = z.infer<typeof onrampQuoteSchema>

const railSchema = z.looseObject({ code: z.string(), label: z.string() })

export const coverageSchema = z.looseObject({
  fiat: z.array(
    z.looseObject({
      code: z.string(),
      name: z.string().optional(),
      decimals: z.number().int(),
      onramp: z.boolean(),
      offramp: z.boolean(),
      minAmount: num.optional(),
      maxAmount: num.optional(),
      rails: z.array(railSchema),
    })
  ),
  wallet: z.looseObject({
    tokens: z.array(z.string()),
    chains: z.array(railSchema),
  }),
})
export type Coverage = z.infer<typeof coverageSchema>

/** GET /rfq/status/{quoteId} (spec gap: shape not shown). */
export const quoteStatusSchema = z.looseObject({
  quoteId: z.string(),
  status: z.string(),
  payoutId: z.string().optional(),
  flow: z.string().optional(),
  expiresAt: z.string().optional(),
  txHash: z.string().optional(),
})
export type QuoteStatus = z.infer<typeof quoteStatusSchema>

export const paymentMethodSchema = z.looseObject({
  id: z.string(),
  type: z.string().optional(),
  currency: z.string().optional(),
  rail: z.string().optional(),
})

export const recipientSchema = z.looseObject({
  id: z.string().min(1),
  name: z.string().optional(),
  email: z.string().optional(),
  country: z.string().optional(),
  currency: z.string().optional(),
  type: z.string().optional(),
  paymentMethods: z.array(paymentMethodSchema).optional(),
  metadata: z.record(z.string(), z.unknown()).optional(),
  createdAt: z.string().optional(),
  updatedAt: z.string().optional(),
})
export type Recipient = z.infer<typeof recipientSchema>

export const webhookSubscriptionSchema = z.looseObject({
  id: z.string().min(1),
  url: z.string(),
  events: z.array(z.string()),
  label: z.string().optional(),
  active: z.boolean().optional(),
  createdAt: z.string().optional(),
  /** Present only on creation and rotation. */
  secret: z.string().startsWith('whsec_').optional(),
})
export type WebhookSubscription = z.infer<typeof webhookSubscriptionSchema>

export const webhookDeliverySchema = z.looseObject({
  id: z.string().min(1),
  subscriptionId: z.string().optional(),
  eventType: z.string().optional(),
  status: z.string(),
  attempts: z.number().int().optional(),
  createdAt: z.string().optional(),
  lastAttemptAt: z.string().optional(),
  nextAttemptAt: z.string().optional(),
  replayOf: z.string().optional(),
})
export type WebhookDelivery = z.infer<typeof webhookDeliverySchema>

/** Lists are accepted as a bare array or wrapped as `{ data: [...] }` (spec gap). */
export function listOf<T extends z.ZodType>(item: T) {
  return z.union([
    z.array(item),
    z
      .looseObject({ data: z.array(item), nextCursor: z.string().nullish() })
      .transform((v) => v.data),
  ])
}

/**
 * One page of a list endpoint: `{ data, nextCursor }`, or a bare array read as the last
 * page (spec gap).
 */
export function pageOf<T extends z.ZodType>(item: T) {
  return z.union([
    z.array(item).transform((data) => ({ data, nextCursor: null as string | null })),
    z
      .looseObject({ data: z.array(item), nextCursor: z.string().nullish() })
      .transform((value) => ({ data: value.data, nextCursor: value.nextCursor ?? null })),
  ])
}

/** `{ success: true, data }` wrapper of the onramp quotes (every route). */
export const onrampQuotesSchema = successWrapper(z.array(onrampQuoteSchema))

/** `{ success: true, data }` wrapper of the single best onramp route. */
export const bestOnrampQuoteSchema = successWrapper(onrampQuoteSchema)

/** Execute responses, one per flow: the flow decides which fields must be present. */
export const executeResponseSchemaByFlow = {
  fiat_to_fiat: successWrapper(fiatToFiatExecuteDataSchema),
  stablecoin_to_fiat: successWrapper(stablecoinToFiatExecuteDataSchema),
  onramp: successWrapper(onrampExecuteDataSchema),
} as const

/** Execute-batch response: one result per item, in order (spec gap: shape not shown). */
export const executeBatchResultSchema = successWrapper(
  z.looseObject({
    results: z.array(
      z.union([
        z.looseObject({
          index: z.number().int(),
          success: z.literal(true),
          data: z.record(z.string(), z.unknown()),
        }),
        z.looseObject({
          index: z.number().int(),
          success: z.literal(false),
          error: z.looseObject({ code: z.string().optional(), error: z.string().optional() }),
        }),
      ])
    ),
  })
)

/** Confirm-escrow-deposit's success body. */
export const escrowConfirmedSchema = z.looseObject({ success: z.literal(true) })

/** A rotated subscription: its id and the new whsec_ secret, shown once. */
export const rotatedSecretSchema = z.looseObject({
  id: z.string(),
  secret: z.string().startsWith('whsec_'),
})

/** A replay's answer (202): the new delivery's id and the delivery it repeats. */
export const replayedDeliverySchema = z.looseObject({
  id: z.string(),
  replayOf: z.string().optional(),
  status: z.string().optional(),
})

/** The three error body shapes the spec shows, folded into one. */
export const errorBodySchema = z.looseObject({
  code: z.string().optional(),
  error: z.string().optional(),
  success: z.literal(false).optional(),
  details: z.record(z.string(), z.unknown()).optional(),
})
export type ErrorBody = z.infer<typeof errorBodySchema>
