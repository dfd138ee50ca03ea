import { payoutView } from '../state.ts'
import { notFound, page, type ApiDeps, type Handler } from './shared.ts'

/** Payout reads: a page of the account's payouts (by status), one payout by either id. */
export function payoutHandlers({ state }: ApiDeps) {
  return {
    listPayouts: ({ accountId, query }) => {
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
    getPayout: ({ accountId, params }) => {
      const payout = state.findPayout(accountId, params[0])
      return payout ? { status: 200, body: payoutView(payout) } : notFound('payout')
    },
  } satisfies Record<string, Handler>
}
