/**
 * A signed-looking delivery of a `payout.created` event for `InboxStore.insert` (the store
 * does not verify): its data names the payout `deliveryId` unless `data` is given.
 */
export const inboxDelivery = (deliveryId: string, data: object = { payoutId: deliveryId }) => ({
  deliveryId,
  eventType: 'payout.created',
  rawBody: Buffer.from(JSON.stringify({ type: 'payout.created', data })),
  signatureHeader: 't=1,v1=x',
  source: 'webhook' as const,
})
