/**
 * Default paths, without the optional `/api` prefix (that belongs in `baseUrl`). Those the
 * spec does not show are REST-conventional choices (docs/spec-gaps.md); every one can be
 * overridden through the client's `paths` option. `{id}` is replaced, URL-encoded.
 */
export const DEFAULT_PATHS = {
  coverage: '/config/coverage',
  quotesFiatToStablecoin: '/quotes/fiat-to-stablecoin/all',
  quotesOnramp: '/quotes/onramp/all',
  quotesOnrampBest: '/quotes/onramp/best',
  execute: '/rfq/execute',
  executeBatch: '/rfq/execute-batch',
  confirmEscrowDeposit: '/rfq/confirm-escrow-deposit',
  quoteStatus: '/rfq/status/{id}',
  payouts: '/payouts',
  payout: '/payouts/{id}',
  recipients: '/recipients',
  recipientsBulk: '/recipients/bulk',
  recipient: '/recipients/{id}',
  subscriptions: '/webhooks/subscriptions',
  subscription: '/webhooks/subscriptions/{id}',
  subscriptionRotateSecret: '/webhooks/subscriptions/{id}/rotate-secret',
  deliveries: '/webhooks/deliveries',
  delivery: '/webhooks/deliveries/{id}',
  deliveryReplay: '/webhooks/deliveries/{id}/replay',
} as const

export type PathName = keyof typeof DEFAULT_PATHS

/** Fills `{id}` with an encoded identifier. */
export function fillPath(template: string, id?: string): string {
  return id === undefined ? template : template.replace('{id}', encodeURIComponent(id))
}
