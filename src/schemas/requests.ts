import { z } from 'zod'
import { currencySchema, positiveAmountSchema, uuidSchema, WEBHOOK_EVENT_TYPES } from './common.ts'
import { webhookUrlRefusal } from './webhook_urls.ts'

/** Fields every execute flow accepts (spec, Execute request body). */
const executeCommon = {
  fromCurrency: currencySchema,
  toCurrency: currencySchema,
  amount: positiveAmountSchema,
  recipientId: uuidSchema,
  targetAmount: positiveAmountSchema.optional(),
  recipientPaymentMethodId: uuidSchema.optional(),
  routeProtocol: z.string().startsWith('rt_').optional(),
  paymentPurpose: z.string().max(255).optional(),
  reference: z.string().max(255).optional(),
  supportingDocumentKey: z.string().max(1024).optional(),
}

export const fiatToFiatExecuteSchema = z.object({
  ...executeCommon,
  userPaymentMethodId: uuidSchema,
})

export const stablecoinToFiatExecuteSchema = z.object({
  ...executeCommon,
  walletAddress: z.string().min(10).max(128),
})

export const onrampExecuteSchema = z.object({
  ...executeCommon,
  userPaymentMethodId: uuidSchema,
})

export const executeSchemaByFlow = {
  fiat_to_fiat: fiatToFiatExecuteSchema,
  stablecoin_to_fiat: stablecoinToFiatExecuteSchema,
  onramp: onrampExecuteSchema,
} as const

export type FiatToFiatExecuteBody = z.infer<typeof fiatToFiatExecuteSchema>
export type StablecoinToFiatExecuteBody = z.infer<typeof stablecoinToFiatExecuteSchema>
export type OnrampExecuteBody = z.infer<typeof onrampExecuteSchema>
export type ExecuteBody = FiatToFiatExecuteBody | StablecoinToFiatExecuteBody | OnrampExecuteBody

/**
 * Rows per execute-batch request (spec gap: "batch sizes" are not shown; this package's
 * reading). `payouts.executeBatch` splits larger batches into requests of at most this many.
 */
export const EXECUTE_BATCH_MAX_ITEMS = 100

/** Execute-batch body (spec gap: shape not shown; `{ items: [...] }` chosen). */
export const executeBatchSchema = z.object({
  items: z.array(z.record(z.string(), z.unknown())).min(1).max(EXECUTE_BATCH_MAX_ITEMS),
})

export const confirmEscrowDepositSchema = z.object({
  quoteId: uuidSchema,
  txHash: z.string().regex(/^0x[0-9a-fA-F]{64}$/, 'must be a 0x-prefixed 32-byte hex hash'),
})
export type ConfirmEscrowDepositBody = z.infer<typeof confirmEscrowDepositSchema>

export const fiatToStablecoinQuoteQuerySchema = z.object({
  fromCurrency: currencySchema,
  toCurrency: currencySchema,
  amount: positiveAmountSchema,
})

export const onrampQuoteQuerySchema = z.object({
  sourceCurrency: currencySchema,
  amount: positiveAmountSchema,
  payoutCurrency: currencySchema.optional(),
})

/** A payment method attached to a recipient (spec gap: fields not shown). */
export const paymentMethodInputSchema = z.object({
  type: z.enum(['bank_account', 'mobile_money', 'wallet']).default('bank_account'),
  currency: currencySchema,
  rail: z.string().max(64).optional(),
  details: z.record(z.string(), z.string().max(255)).optional(),
})

const recipientFields = {
  name: z.string().min(1).max(255),
  email: z.email().max(255).optional(),
  country: z.string().length(2).optional(),
  currency: currencySchema.optional(),
  paymentMethods: z.array(paymentMethodInputSchema).max(10).optional(),
  metadata: z.record(z.string(), z.string().max(500)).optional(),
}
const recipientType = z.enum(['individual', 'business'])

/** Recipient create body (spec gap: fields not shown beyond the id). */
export const recipientCreateSchema = z.object({
  ...recipientFields,
  type: recipientType.default('individual'),
})
export type RecipientCreateBody = z.input<typeof recipientCreateSchema>

/** Update carries only what changes: no defaults, so nothing is overwritten by accident. */
export const recipientUpdateSchema = z.object({ ...recipientFields, type: recipientType }).partial()
export type RecipientUpdateBody = z.input<typeof recipientUpdateSchema>

/**
 * Recipients per bulk request (spec gap: "recipient counts" are not shown; this package's
 * reading). `payouts.recipients.createMany` splits larger lists into requests of this many.
 */
export const RECIPIENTS_BULK_MAX_ITEMS = 100

export const recipientBulkCreateSchema = z.object({
  recipients: z.array(recipientCreateSchema).min(1).max(RECIPIENTS_BULK_MAX_ITEMS),
})

/**
 * A webhook subscription URL, checked by the service's rule without resolving its host
 * (`webhookUrlRefusal`). `allowInsecureLoopback` is the development switch for loopback
 * targets (the emulator).
 */
export function webhookUrlSchema(allowInsecureLoopback = false) {
  return z.url().superRefine((value, ctx) => {
    const refusal = webhookUrlRefusal(value, { allowLoopback: allowInsecureLoopback })
    if (refusal) ctx.addIssue({ code: 'custom', message: refusal })
  })
}

export function webhookSubscriptionCreateSchema(allowInsecureLoopback = false) {
  return z.object({
    url: webhookUrlSchema(allowInsecureLoopback),
    events: z.array(z.enum(WEBHOOK_EVENT_TYPES)).min(1),
    label: z.string().max(255).optional(),
  })
}
export type WebhookSubscriptionCreateBody = {
  url: string
  events: Array<(typeof WEBHOOK_EVENT_TYPES)[number]>
  label?: string
}

export function webhookSubscriptionUpdateSchema(allowInsecureLoopback = false) {
  return webhookSubscriptionCreateSchema(allowInsecureLoopback)
    .partial()
    .extend({ active: z.boolean().optional() })
}
export type WebhookSubscriptionUpdateBody = Partial<WebhookSubscriptionCreateBody> & {
  active?: boolean
}
