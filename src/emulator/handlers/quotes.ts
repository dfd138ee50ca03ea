import { ENDPOINTS } from '../../contract/endpoints.ts'
import { isStablecoin } from '../../schemas/common.ts'
import { EMULATOR_COVERAGE } from '../coverage.ts'
import { knownCurrency, rate, round, routeToken } from '../pricing.ts'
import { invalid, parse, type ApiResult, type Handler } from './shared.ts'

/** Onramp quotes: every route (`all`) or the one that pays out most (`best`). */
function onrampQuotes(query: URLSearchParams, kind: 'all' | 'best'): ApiResult {
  const parsed = parse(ENDPOINTS.onrampQuotes.request, {
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
}

/** Coverage and quotes: public coverage, two fiat-to-stablecoin routes, two onramp routes. */
export function quoteHandlers() {
  return {
    getCoverage: () => ({ status: 200, body: EMULATOR_COVERAGE }),
    fiatToStablecoinQuotes: ({ query }) => {
      const parsed = parse(ENDPOINTS.fiatToStablecoinQuotes.request, {
        fromCurrency: query.get('fromCurrency') ?? undefined,
        toCurrency: query.get('toCurrency') ?? undefined,
        amount: query.has('amount') ? Number(query.get('amount')) : undefined,
      })
      if ('error' in parsed) return parsed.error
      const { fromCurrency, toCurrency, amount } = parsed.data
      if (!isStablecoin(toCurrency)) return invalid('toCurrency', 'must be a supported stablecoin')
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
    onrampQuotes: ({ query }) => onrampQuotes(query, 'all'),
    bestOnrampQuote: ({ query }) => onrampQuotes(query, 'best'),
  } satisfies Record<string, Handler>
}
