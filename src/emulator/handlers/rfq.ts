import { randomBytes, randomUUID } from 'node:crypto'
import { ENDPOINTS } from '../../contract/endpoints.ts'
import { detectFlow, isStablecoin, type ExecuteFlow } from '../../schemas/common.ts'
import { CHAIN_IDS, EMULATOR_COVERAGE, tokenAddress } from '../coverage.ts'
import { decimalsOf, FEE_BPS, knownCurrency, rate, round } from '../pricing.ts'
import type { PayoutRecord } from '../state.ts'
import { invalid, notFound, parse, type ApiDeps, type ApiResult, type Handler } from './shared.ts'

/**
 * Executes one payout: checks the body of its flow, the account's recipient and payment
 * methods and the amount bounds, prices it, stores the payout and its quote, announces
 * `payout.created` and starts the lifecycle (a stablecoin payout waits for its deposit).
 */
function execute(deps: ApiDeps, accountId: string, raw: unknown): ApiResult {
  const { state, clock, lifecycle } = deps
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    return invalid('', 'body must be an object')
  const flow: ExecuteFlow = detectFlow(raw as Record<string, unknown>)
  const parsed = parse(ENDPOINTS.execute.request[flow], raw)
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

/** Execute (one or a batch), confirm an escrow deposit, read a quote's status. */
export function rfqHandlers(deps: ApiDeps) {
  const { state } = deps
  return {
    execute: ({ accountId, body }) => execute(deps, accountId, body),
    executeBatch: ({ accountId, body }) => {
      const parsed = parse(ENDPOINTS.executeBatch.request, body)
      if ('error' in parsed) return parsed.error
      const results = parsed.data.items.map((item, index) => {
        const result = execute(deps, accountId, item)
        if (result.status === 200) return { index, success: true, data: (result.body as any).data }
        return { index, success: false, error: result.body }
      })
      return { status: 200, body: { success: true, data: { results } } }
    },
    confirmEscrowDeposit: ({ accountId, body }) => {
      const parsed = ENDPOINTS.confirmEscrowDeposit.request.safeParse(body)
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
    getQuoteStatus: ({ accountId, params }) => {
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
  } satisfies Record<string, Handler>
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
