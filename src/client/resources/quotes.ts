import { ENDPOINTS } from '../../contract/endpoints.ts'
import type { EndpointCaller } from '../endpoint_caller.ts'
import { validate } from '../validation.ts'

/** Query of the onramp quote calls. */
export interface OnrampQuoteQuery {
  sourceCurrency: string
  amount: number
  payoutCurrency?: string
}

/** `client.quotes`: the quote calls, validated before sending. */
export function quotesResource(endpoints: EndpointCaller) {
  return {
    /** Every fiat-to-stablecoin route. */
    fiatToStablecoin: async (query: {
      fromCurrency: string
      toCurrency: string
      amount: number
    }) => {
      const params = validate(ENDPOINTS.fiatToStablecoinQuotes.request, query)
      return endpoints.call('fiatToStablecoinQuotes', { query: params })
    },
    /** Every onramp route. */
    onramp: async (query: OnrampQuoteQuery) => {
      const params = validate(ENDPOINTS.onrampQuotes.request, query)
      const { data } = await endpoints.call('onrampQuotes', { query: params })
      return data
    },
    /** The single best onramp route. */
    bestOnramp: async (query: OnrampQuoteQuery) => {
      const params = validate(ENDPOINTS.bestOnrampQuote.request, query)
      const { data } = await endpoints.call('bestOnrampQuote', { query: params })
      return data
    },
  }
}

/** The type of `client.quotes`. */
export type QuotesResource = ReturnType<typeof quotesResource>
