import { PayoutsApiError } from '../client/errors.ts'
import type { PayoutsClient } from '../client/main.ts'
import {
  E_PAYOUTS_WEBHOOK_ROTATION_UNCONFIRMED,
  E_PAYOUTS_WEBHOOK_SECRET_NOT_STORED,
  E_PAYOUTS_WEBHOOK_SUBSCRIPTION_NOT_FOUND,
} from '../errors.ts'
import type { SecretStore } from '../webhooks/secret_store.ts'

/**
 * Webhook subscriptions whose secrets this app keeps (encrypted with APP_KEY): each call
 * changes the service and the stored secrets together. `store` gives the secret store, or
 * throws when the app cannot keep secrets.
 */
export function webhookSubscriptions(
  client: () => PayoutsClient,
  store: () => Promise<SecretStore>
) {
  return {
    create: async (input: {
      url: string
      events?: Array<'payout.created' | 'payout.status.updated'>
      label?: string
    }) => {
      const secrets = await store()
      const created = await client().webhooks.subscriptions.create({
        url: input.url,
        events: input.events ?? ['payout.created', 'payout.status.updated'],
        label: input.label,
      })
      await secrets.save({ subscriptionId: created.id, url: created.url, secret: created.secret! })
      // The secret is returned once by the service and kept only encrypted.
      return { ...created, secret: undefined }
    },
    list: async () => {
      const secrets = await store()
      const [remote, local] = await Promise.all([
        client().webhooks.subscriptions.list(),
        secrets.list(),
      ])
      const kept = new Set(local.map((s) => s.subscriptionId))
      return remote.map((s) => ({ ...s, secretStored: kept.has(s.id) }))
    },
    /**
     * Rotates at the service, then stores the new secret in place of the old one, which
     * the service stopped signing with: no overlap. A subscription whose secret is not
     * stored here is refused before the service is asked (`E_PAYOUTS_WEBHOOK_SECRET_NOT_STORED`).
     */
    rotateSecret: async (subscriptionId: string) => {
      const secrets = await store()
      if (!(await secrets.has(subscriptionId))) {
        throw new E_PAYOUTS_WEBHOOK_SECRET_NOT_STORED([subscriptionId])
      }
      let rotated: Awaited<ReturnType<PayoutsClient['webhooks']['subscriptions']['rotateSecret']>>
      try {
        rotated = await client().webhooks.subscriptions.rotateSecret(subscriptionId)
      } catch (error) {
        // A refusal changed nothing; a lost answer may have rotated the secret there.
        if (!(error instanceof PayoutsApiError && error.outcomeUnknown)) throw error
        throw new E_PAYOUTS_WEBHOOK_ROTATION_UNCONFIRMED([subscriptionId], { cause: error })
      }
      try {
        await secrets.rotate(subscriptionId, rotated.secret)
      } catch (error) {
        throw new E_PAYOUTS_WEBHOOK_ROTATION_UNCONFIRMED([subscriptionId], { cause: error })
      }
      return { id: rotated.id }
    },
    /**
     * Deletes at the service, then the stored secrets. A 404 from the service (already
     * gone) still deletes here (`deletedAtService: false`); an id neither side knows is
     * `E_PAYOUTS_WEBHOOK_SUBSCRIPTION_NOT_FOUND`; any other refusal deletes nothing.
     */
    delete: async (subscriptionId: string) => {
      const secrets = await store()
      let deletedAtService = true
      try {
        await client().webhooks.subscriptions.delete(subscriptionId)
      } catch (error) {
        if (!(error instanceof PayoutsApiError && error.status === 404)) throw error
        deletedAtService = false
      }
      const removedLocally = await secrets.delete(subscriptionId)
      if (!deletedAtService && !removedLocally) {
        throw new E_PAYOUTS_WEBHOOK_SUBSCRIPTION_NOT_FOUND([subscriptionId])
      }
      return { id: subscriptionId, deletedAtService, removedLocally }
    },
    /** Asks the service to deliver a delivery again (new Svc-Delivery-Id). */
    replayDelivery: (deliveryId: string) => client().webhooks.deliveries.replay(deliveryId),
  }
}
