import { randomBytes, randomUUID } from 'node:crypto'
import type { z } from 'zod'
import { detectFlow, isStablecoin, type ExecuteFlow } from '../schemas/common.ts'
import {
  confirmEscrowDepositSchema,
  executeBatchSchema,
  executeSchemaByFlow,
  fiatToStablecoinQuoteQuerySchema,
  onrampQuoteQuerySchema,
  recipientBulkCreateSchema,
  recipientCreateSchema,
  recipientUpdateSchema,
  webhookSubscriptionCreateSchema,
  webhookSubscriptionUpdateSchema,
} from '../schemas/requests.ts'
import { CHAIN_IDS, EMULATOR_COVERAGE, tokenAddress, USD_RATES } from './coverage.ts'
import type { EmulatorClock } from './clock.ts'
import type { Lifecycle } from './lifecycle.ts'
import type { Family } from './rate_limits.ts'
import {
  omit,
  payoutView,
  recipientView,
  type EmulatorState,
  type PayoutRecord,
  type Scope,
} from './state.ts'
import { refuseWebhookUrl, type SubscriptionRecord, type WebhookDispatcher } from './webhooks.ts'

export interface ApiResult {
  status: number
  body?: unknown
}

export interface ApiContext {
  accountId: string
  body: unknown
  query: URLSearchParams
  params: string[]
}

export interface Route {
  method: string
  pattern: RegExp
  /** null: public, no key. */
  scope: Scope | null
  family: Family
  /** Honours Idempotency-Key. */
  idempotent: boolean
  /** confirm-escrow-deposit answers its own 400 shape. */
  confirmShape?: boolean
  handler: (ctx: ApiContext) => ApiResult | Promise<ApiResult>
}

/** A 400 naming the field and what was wrong (spec, Errors rule 1). */
export function invalid(
  field: string,
  reason: string,
  extra: Record<string, unknown> = {}
): ApiResult {
  return {
    status: 400,
    body: {
      code: 'INVALID_PARAMETER',
      error: `${field || 'body'}: ${reason}`,
      details: { field, reason, ...extra },
    },
  }
}

const notFound = (what: string): ApiResult => ({
  status: 404,
  body: { code: 'NOT_FOUND', error: `${what} not found` },
})

function parse<T extends z.ZodType>(
  schema: T,
  input: unknown
): { data: z.output<T> } | { error: ApiResult } {
  const result = schema.safeParse(input)
  if (result.success) return { data: result.data }
  const issue = result.error.issues[0] as z.core.$ZodIssue & {
    maximum?: unknown
    minimum?: unknown
  }
  const bound = issue.maximum ?? issue.minimum
  return {
    error: invalid(
      issue.path.join('.'),
      issue.message,
      bound === undefined ? {} : { bound: Number(bound) }
    ),
  }
}

function round(value: number, decimals: number) {
  const f = 10 ** decimals
  return Math.round(value * f) / f
}

function decimalsOf(code: string) {
  if (isStablecoin(code)) return 6
  return EMULATOR_COVERAGE.fiat.find((f) => f.code === code)?.decimals ?? 2
}

function knownCurrency(code: string) {
  return isStablecoin(code) || EMULATOR_COVERAGE.fiat.some((f) => f.code === code)
}

function rate(from: string, to: string) {
  return (USD_RATES[to] ?? 1) / (USD_RATES[from] ?? 1)
}

const FEE_BPS = 50

function routeToken() {
  return `rt_${randomBytes(12).toString('base64url')}`
}

function page<T>(items: T[], query: URLSearchParams) {
  const limit = Math.min(Math.max(Number(query.get('limit') ?? 50) || 50, 1), 200)
  const offset = Math.max(Number(query.get('cursor') ?? 0) || 0, 0)
  const data = items.slice(offset, offset + limit)
  return { data, nextCursor: offset + limit < items.length ? String(offset + limit) : null }
}

export interface ApiDeps {
  state: EmulatorState
  clock: EmulatorClock
  lifecycle: Lifecycle
  webhooks: WebhookDispatcher
  allowInsecureWebhooks: boolean
  emit: (payout: PayoutRecord, type: 'payout.created' | 'payout.status.updated') => void
}

/** Every public endpoint of the service. */
export function buildRoutes(deps: ApiDeps): Route[] {
  const { state, clock, lifecycle, webhooks } = deps

  function execute(accountId: string, raw: unknown): ApiResult {
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
      return invalid('', 'body must be an object')
    const flow: ExecuteFlow = detectFlow(raw as Record<string, unknown>)
    const parsed = parse(executeSchemaByFlow[flow], raw)
    if ('error' in parsed) return parsed.error
    const body = parsed.data as Record<string, any>
    for (const field of ['fromCurrency', 'toCurrency']) {
      if (!knownCurrency(body[field])) return invalid(field, 'unsupported currency')
    }
    const recipient = state.recipients.get(body.recipientId)
    if (!recipient || recipient.accountId !== accountId)
      return invalid('recipientId', 'not found for this account')
    if (body.userPaymentMethodId) {
      const own = state.accountPaymentMethods.get(accountId) ?? []
      if (!own.some((m) => m.id === body.userPaymentMethodId)) {
        return invalid('userPaymentMethodId', 'not found for this account')
      }
    }
    if (
      body.recipientPaymentMethodId &&
      !recipient.paymentMethods.some((m) => m.id === body.recipientPaymentMethodId)
    ) {
      return invalid('recipientPaymentMethodId', 'not a payment method of this recipient')
    }
    const boundsCode = isStablecoin(body.fromCurrency) ? 'USD' : body.fromCurrency
    const bounds = EMULATOR_COVERAGE.fiat.find((f) => f.code === boundsCode)
    if (
      bounds &&
      ((bounds.minAmount !== undefined && body.amount < bounds.minAmount) ||
        (bounds.maxAmount !== undefined && body.amount > bounds.maxAmount))
    ) {
      return {
        status: 422,
        body: {
          code: 'AMOUNT_OUT_OF_BOUNDS',
          error: `amount must be between ${bounds.minAmount ?? 0} and ${bounds.maxAmount ?? 'unbounded'} ${boundsCode}`,
          details: {
            field: 'amount',
            min: bounds.minAmount,
            max: bounds.maxAmount,
            currency: boundsCode,
          },
        },
      }
    }
    const fx = rate(body.fromCurrency, body.toCurrency)
    const serviceFee = round((body.amount * FEE_BPS) / 10_000, decimalsOf(body.fromCurrency))
    const gasFee = flow === 'fiat_to_fiat' ? 0 : 0.25
    const toAmount = round((body.amount - serviceFee - gasFee) * fx, decimalsOf(body.toCurrency))
    const payout: PayoutRecord = {
      payoutId: randomUUID(),
      readId: `po_${randomBytes(12).toString('hex')}`,
      accountId,
      quoteId: randomUUID(),
      flow,
      status: 'pending',
      step: 'initiated',
      sourceAmount: body.amount,
      sourceCurrency: body.fromCurrency,
      payoutAmount: toAmount,
      payoutCurrency: body.toCurrency,
      recipientId: recipient.id,
      paymentMethod: flow === 'stablecoin_to_fiat' ? 'crypto_wallet' : 'bank_transfer',
      paymentPurpose: body.paymentPurpose,
      reference: body.reference,
      createdAt: clock.iso(),
    }
    state.payouts.set(payout.payoutId, payout)
    state.readIds.set(payout.readId, payout.payoutId)
    state.executeCalls++
    const data: Record<string, unknown> = {
      payoutId: payout.payoutId,
      quoteId: payout.quoteId,
      toAmount,
      partnerFxRate: round(fx, 6),
      effectiveRate: round(toAmount / body.amount, 6),
      fees: { serviceFee, serviceFeeBps: FEE_BPS, partnerFee: 0, gasFee },
    }
    if (flow === 'stablecoin_to_fiat') {
      const chainId = CHAIN_IDS.polygon
      const escrowAddress = `0x${randomBytes(20).toString('hex')}`
      const depositAmountAtomic = BigInt(Math.round(body.amount * 1_000_000))
      state.quotes.set(payout.quoteId, {
        quoteId: payout.quoteId,
        accountId,
        flow,
        status: 'awaiting_escrow_deposit',
        payoutId: payout.payoutId,
        escrowAddress,
        depositAmountAtomic,
        chainId,
        tokenAddress: tokenAddress(body.fromCurrency, chainId),
      })
      Object.assign(data, {
        status: 'awaiting_escrow_deposit',
        escrowAddress,
        depositAmountAtomic: depositAmountAtomic.toString(),
        tokenAddress: tokenAddress(body.fromCurrency, chainId),
        chainId,
      })
    } else {
      const status = flow === 'fiat_to_fiat' ? 'accepted' : 'pending'
      state.quotes.set(payout.quoteId, {
        quoteId: payout.quoteId,
        accountId,
        flow,
        status,
        payoutId: payout.payoutId,
      })
      data.status = status
      const instructions = {
        accountNumber: String(
          100000000 + (Number.parseInt(payout.payoutId.slice(0, 6), 16) % 899999999)
        ),
        bankName: 'Emulator Settlement Bank',
        swiftCode: 'EMULUS33',
        reference: payout.readId,
      }
      if (flow === 'fiat_to_fiat' || body.fromCurrency === 'EUR')
        data.bankingInstructions = instructions
      else data.paymentUrl = `https://pay.emulator.invalid/checkout/${payout.readId}`
    }
    deps.emit(payout, 'payout.created')
    if (flow !== 'stablecoin_to_fiat') lifecycle.start(payout)
    return { status: 200, body: { success: true, data } }
  }

  const subscriptionView = (s: SubscriptionRecord) => omit(s, ['secret', 'accountId'])

  return [
    {
      method: 'GET',
      pattern: /^\/config\/coverage$/,
      scope: null,
      family: 'default',
      idempotent: false,
      handler: () => ({ status: 200, body: EMULATOR_COVERAGE }),
    },
    {
      method: 'GET',
      pattern: /^\/quotes\/fiat-to-stablecoin\/all$/,
      scope: 'quotes:read',
      family: 'quotes',
      idempotent: false,
      handler: ({ query }) => {
        const parsed = parse(fiatToStablecoinQuoteQuerySchema, {
          fromCurrency: query.get('fromCurrency') ?? undefined,
          toCurrency: query.get('toCurrency') ?? undefined,
          amount: query.has('amount') ? Number(query.get('amount')) : undefined,
        })
        if ('error' in parsed) return parsed.error
        const { fromCurrency, toCurrency, amount } = parsed.data
        if (!isStablecoin(toCurrency))
          return invalid('toCurrency', 'must be a supported stablecoin')
        if (!knownCurrency(fromCurrency)) return invalid('fromCurrency', 'unsupported currency')
        const base = rate(fromCurrency, toCurrency)
        return {
          status: 200,
          body: [
            { fee: 0.005, path: `${fromCurrency}>${toCurrency}`, crypto: false },
            { fee: 0.003, path: `${fromCurrency}>USD>${toCurrency}`, crypto: true },
          ].map((r) => {
            const fee = round(amount * r.fee, 2)
            return {
              protocol: routeToken(),
              fromCcy: fromCurrency,
              toCcy: toCurrency,
              fromAmount: amount,
              toAmount: round((amount - fee) * base, 6),
              exchangeRate: round(base, 6),
              effRate: round(((amount - fee) * base) / amount, 6),
              fee,
              isCryptoQuote: r.crypto,
              swapPath: r.path,
            }
          }),
        }
      },
    },
    ...(['all', 'best'] as const).map((kind): Route => ({
      method: 'GET',
      pattern: new RegExp(`^/quotes/onramp/${kind}$`),
      scope: 'quotes:read',
      family: 'quotes',
      idempotent: false,
      handler: ({ query }) => {
        const parsed = parse(onrampQuoteQuerySchema, {
          sourceCurrency: query.get('sourceCurrency') ?? undefined,
          amount: query.has('amount') ? Number(query.get('amount')) : undefined,
          payoutCurrency: query.get('payoutCurrency') ?? undefined,
        })
        if ('error' in parsed) return parsed.error
        const { sourceCurrency, amount } = parsed.data
        const token = parsed.data.payoutCurrency ?? 'USDC'
        if (!isStablecoin(token)) return invalid('payoutCurrency', 'must be a supported stablecoin')
        const quotes = [0.01, 0.0075].map((feeRate) => {
          const fee = round(amount * feeRate, 2)
          const r = rate(sourceCurrency, token)
          return {
            protocol: routeToken(),
            fromCcy: sourceCurrency,
            toToken: token,
            fromAmount: amount,
            toAmount: round((amount - fee) * r, 6),
            rate: round(r, 6),
            fee,
          }
        })
        const best = quotes.reduce((a, b) => (b.toAmount > a.toAmount ? b : a))
        return { status: 200, body: { success: true, data: kind === 'all' ? quotes : best } }
      },
    })),
    {
      method: 'POST',
      pattern: /^\/rfq\/execute$/,
      scope: 'payouts:write',
      family: 'execute',
      idempotent: true,
      handler: ({ accountId, body }) => execute(accountId, body),
    },
    {
      method: 'POST',
      pattern: /^\/rfq\/execute-batch$/,
      scope: 'payouts:write',
      family: 'execute',
      idempotent: true,
      handler: ({ accountId, body }) => {
        const parsed = parse(executeBatchSchema, body)
        if ('error' in parsed) return parsed.error
        const results = parsed.data.items.map((item, index) => {
          const result = execute(accountId, item)
          if (result.status === 200)
            return { index, success: true, data: (result.body as any).data }
          return { index, success: false, error: result.body }
        })
        return { status: 200, body: { success: true, data: { results } } }
      },
    },
    {
      method: 'POST',
      pattern: /^\/rfq\/confirm-escrow-deposit$/,
      scope: 'payouts:write',
      family: 'execute',
      idempotent: true,
      confirmShape: true,
      handler: ({ accountId, body }) => {
        const parsed = confirmEscrowDepositSchema.safeParse(body)
        if (!parsed.success)
          return { status: 400, body: { success: false, error: 'invalid request' } }
        const failed: ApiResult = {
          status: 500,
          body: { success: false, error: 'escrow deposit confirmation failed' },
        }
        const quote = state.quotes.get(parsed.data.quoteId)
        if (!quote || quote.accountId !== accountId || quote.flow !== 'stablecoin_to_fiat')
          return failed
        // Idempotent on (quoteId, txHash).
        if (quote.status === 'deposit_confirmed')
          return quote.txHash === parsed.data.txHash
            ? { status: 200, body: { success: true } }
            : failed
        if (quote.status !== 'awaiting_escrow_deposit') return failed
        const tx = state.transactions.get(parsed.data.txHash)
        if (
          !tx ||
          tx.to !== quote.escrowAddress ||
          tx.chainId !== quote.chainId ||
          tx.amountAtomic < quote.depositAmountAtomic!
        )
          return failed
        confirmDeposit(deps, quote.quoteId, tx.txHash)
        return { status: 200, body: { success: true } }
      },
    },
    {
      method: 'GET',
      pattern: /^\/rfq\/status\/([^/]+)$/,
      scope: 'payouts:read',
      family: 'default',
      idempotent: false,
      handler: ({ accountId, params }) => {
        const quote = state.quotes.get(params[0])
        if (!quote || quote.accountId !== accountId) return notFound('quote')
        return {
          status: 200,
          body: {
            quoteId: quote.quoteId,
            status: quote.status,
            flow: quote.flow,
            payoutId: quote.payoutId,
            ...(quote.txHash ? { txHash: quote.txHash } : {}),
          },
        }
      },
    },
    {
      method: 'GET',
      pattern: /^\/payouts$/,
      scope: 'payouts:read',
      family: 'default',
      idempotent: false,
      handler: ({ accountId, query }) => {
        const status = query.get('status')
        const list = [...state.payouts.values()].filter(
          (p) => p.accountId === accountId && (!status || p.status === status)
        )
        const result = page(list, query)
        return {
          status: 200,
          body: { data: result.data.map(payoutView), nextCursor: result.nextCursor },
        }
      },
    },
    {
      method: 'GET',
      pattern: /^\/payouts\/([^/]+)$/,
      scope: 'payouts:read',
      family: 'default',
      idempotent: false,
      handler: ({ accountId, params }) => {
        const payout = state.findPayout(accountId, params[0])
        return payout ? { status: 200, body: payoutView(payout) } : notFound('payout')
      },
    },
    {
      method: 'POST',
      pattern: /^\/recipients$/,
      scope: 'recipients:write',
      family: 'default',
      idempotent: true,
      handler: ({ accountId, body }) => {
        const parsed = parse(recipientCreateSchema, body)
        if ('error' in parsed) return parsed.error
        return { status: 201, body: recipientView(state.createRecipient(accountId, parsed.data)) }
      },
    },
    {
      method: 'POST',
      pattern: /^\/recipients\/bulk$/,
      scope: 'recipients:write',
      family: 'default',
      idempotent: true,
      handler: ({ accountId, body }) => {
        const parsed = parse(recipientBulkCreateSchema, body)
        if ('error' in parsed) return parsed.error
        return {
          status: 201,
          body: {
            data: parsed.data.recipients.map((r) =>
              recipientView(state.createRecipient(accountId, r))
            ),
          },
        }
      },
    },
    {
      method: 'GET',
      pattern: /^\/recipients$/,
      scope: 'recipients:read',
      family: 'default',
      idempotent: false,
      handler: ({ accountId, query }) => {
        const list = [...state.recipients.values()].filter((r) => r.accountId === accountId)
        const result = page(list, query)
        return {
          status: 200,
          body: { data: result.data.map(recipientView), nextCursor: result.nextCursor },
        }
      },
    },
    ...(['GET', 'PATCH', 'DELETE'] as const).map((method): Route => ({
      method,
      pattern: /^\/recipients\/([^/]+)$/,
      scope: method === 'GET' ? 'recipients:read' : 'recipients:write',
      family: 'default',
      idempotent: false,
      handler: ({ accountId, params, body }) => {
        const recipient = state.recipients.get(params[0])
        if (!recipient || recipient.accountId !== accountId) return notFound('recipient')
        if (method === 'DELETE') {
          state.recipients.delete(recipient.id)
          return { status: 204 }
        }
        if (method === 'PATCH') {
          const parsed = parse(recipientUpdateSchema, body)
          if ('error' in parsed) return parsed.error
          const { paymentMethods, ...rest } = parsed.data
          Object.assign(recipient, rest, { updatedAt: clock.iso() })
          if (paymentMethods) {
            recipient.paymentMethods = paymentMethods.map((m) => ({
              id: randomUUID(),
              type: m.type,
              currency: m.currency,
              rail: m.rail,
            }))
          }
        }
        return { status: 200, body: recipientView(recipient) }
      },
    })),
    {
      method: 'POST',
      pattern: /^\/webhooks\/subscriptions$/,
      scope: 'webhooks:write',
      family: 'default',
      idempotent: true,
      handler: ({ accountId, body }) => {
        const parsed = parse(webhookSubscriptionCreateSchema(deps.allowInsecureWebhooks), body)
        if ('error' in parsed) return parsed.error
        const refusal = refuseWebhookUrl(parsed.data.url, deps.allowInsecureWebhooks)
        if (refusal) return invalid('url', refusal)
        if (webhooks.activeCount(accountId) >= 25) {
          return {
            status: 409,
            body: {
              code: 'MAX_ACTIVE_SUBSCRIPTIONS_EXCEEDED',
              error: 'the account already has 25 subscriptions',
            },
          }
        }
        const subscription = webhooks.createSubscription(accountId, parsed.data)
        return {
          status: 201,
          body: { ...subscriptionView(subscription), secret: subscription.secret },
        }
      },
    },
    {
      method: 'GET',
      pattern: /^\/webhooks\/subscriptions$/,
      scope: 'webhooks:read',
      family: 'default',
      idempotent: false,
      handler: ({ accountId }) => ({
        status: 200,
        body: {
          data: [...webhooks.subscriptions.values()]
            .filter((s) => s.accountId === accountId)
            .map((s) => subscriptionView(s)),
        },
      }),
    },
    ...(['GET', 'PATCH', 'DELETE'] as const).map((method): Route => ({
      method,
      pattern: /^\/webhooks\/subscriptions\/([^/]+)$/,
      scope: method === 'GET' ? 'webhooks:read' : 'webhooks:write',
      family: 'default',
      idempotent: false,
      handler: ({ accountId, params, body }) => {
        const subscription = webhooks.subscriptions.get(params[0])
        if (!subscription || subscription.accountId !== accountId) return notFound('subscription')
        if (method === 'DELETE') {
          webhooks.subscriptions.delete(subscription.id)
          return { status: 204 }
        }
        if (method === 'PATCH') {
          const parsed = parse(webhookSubscriptionUpdateSchema(deps.allowInsecureWebhooks), body)
          if ('error' in parsed) return parsed.error
          if (parsed.data.url) {
            const refusal = refuseWebhookUrl(parsed.data.url, deps.allowInsecureWebhooks)
            if (refusal) return invalid('url', refusal)
          }
          Object.assign(subscription, parsed.data)
        }
        return { status: 200, body: subscriptionView(subscription) }
      },
    })),
    {
      method: 'POST',
      pattern: /^\/webhooks\/subscriptions\/([^/]+)\/rotate-secret$/,
      scope: 'webhooks:write',
      family: 'default',
      idempotent: false,
      handler: ({ accountId, params }) => {
        const subscription = webhooks.subscriptions.get(params[0])
        if (!subscription || subscription.accountId !== accountId) return notFound('subscription')
        return {
          status: 200,
          body: { id: subscription.id, secret: webhooks.rotateSecret(subscription) },
        }
      },
    },
    {
      method: 'GET',
      pattern: /^\/webhooks\/deliveries$/,
      scope: 'webhooks:read',
      family: 'default',
      idempotent: false,
      handler: ({ accountId, query }) => {
        const subscriptionId = query.get('subscriptionId')
        const status = query.get('status')
        const list = [...webhooks.deliveries.values()].filter(
          (d) =>
            d.accountId === accountId &&
            (!subscriptionId || d.subscriptionId === subscriptionId) &&
            (!status || d.status === status)
        )
        const result = page(list, query)
        return {
          status: 200,
          body: { data: result.data.map((d) => webhooks.view(d)), nextCursor: result.nextCursor },
        }
      },
    },
    {
      method: 'GET',
      pattern: /^\/webhooks\/deliveries\/([^/]+)$/,
      scope: 'webhooks:read',
      family: 'default',
      idempotent: false,
      handler: ({ accountId, params }) => {
        const delivery = webhooks.deliveries.get(params[0])
        if (!delivery || delivery.accountId !== accountId) return notFound('delivery')
        return { status: 200, body: webhooks.view(delivery) }
      },
    },
    {
      method: 'POST',
      pattern: /^\/webhooks\/deliveries\/([^/]+)\/replay$/,
      scope: 'webhooks:write',
      family: 'replay',
      idempotent: false,
      handler: ({ accountId, params }) => {
        const delivery = webhooks.deliveries.get(params[0])
        if (!delivery || delivery.accountId !== accountId) return notFound('delivery')
        const replay = webhooks.replay(delivery)
        if (!replay) return notFound('subscription')
        return { status: 202, body: { id: replay.id, replayOf: delivery.id, status: 'pending' } }
      },
    },
  ]
}

/** Moves a stablecoin quote out of awaiting_escrow_deposit and starts its payout. */
export function confirmDeposit(
  deps: Pick<ApiDeps, 'state' | 'lifecycle'>,
  quoteId: string,
  txHash: string
) {
  const quote = deps.state.quotes.get(quoteId)
  if (!quote || quote.status !== 'awaiting_escrow_deposit') return false
  quote.status = 'deposit_confirmed'
  quote.txHash = txHash
  const payout = deps.state.payouts.get(quote.payoutId)
  if (payout) deps.lifecycle.start(payout)
  return true
}
