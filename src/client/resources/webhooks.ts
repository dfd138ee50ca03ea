import { ENDPOINTS } from '../../contract/endpoints.ts'
import type {
  WebhookSubscriptionCreateBody,
  WebhookSubscriptionUpdateBody,
} from '../../schemas/requests.ts'
import type { EndpointCaller } from '../endpoint_caller.ts'
import type { CallOptions, ListQuery } from '../types.ts'
import { callOptions, idSchema, requireId, validate } from '../validation.ts'

/**
 * `client.webhooks`: subscriptions and deliveries. `allowInsecureLoopback` lets
 * subscriptions point at http://127.0.0.1 and localhost (the emulator, development only).
 */
export function webhooksResource(endpoints: EndpointCaller, allowInsecureLoopback: boolean) {
  const createSchema = ENDPOINTS.createSubscription.request(allowInsecureLoopback)
  const updateSchema = ENDPOINTS.updateSubscription.request(allowInsecureLoopback)
  return {
    subscriptions: {
      /** Creates a subscription; the response carries the whsec_ secret, once. */
      create: async (body: WebhookSubscriptionCreateBody, options?: CallOptions) => {
        const payload = validate(createSchema, body)
        return endpoints.call('createSubscription', { body: payload, ...callOptions(options) })
      },
      list: async () => {
        const { data } = await endpoints.call('listSubscriptions')
        return data
      },
      get: async (id: string) => {
        return endpoints.call('getSubscription', { id: requireId(idSchema, id) })
      },
      update: async (id: string, body: WebhookSubscriptionUpdateBody) => {
        const payload = validate(updateSchema, body)
        return endpoints.call('updateSubscription', { id: requireId(idSchema, id), body: payload })
      },
      delete: async (id: string) => {
        await endpoints.call('deleteSubscription', { id: requireId(idSchema, id) })
      },
      /** Not idempotent: the old secret dies at once, so it is never repeated blindly. */
      rotateSecret: async (id: string) => {
        return endpoints.call('rotateSubscriptionSecret', { id: requireId(idSchema, id) })
      },
    },
    deliveries: {
      list: async (query: { subscriptionId?: string; status?: string } & ListQuery = {}) => {
        const { data } = await endpoints.call('listDeliveries', { query: { ...query } })
        return data
      },
      get: async (id: string) => {
        return endpoints.call('getDelivery', { id: requireId(idSchema, id) })
      },
      /** Asks the service to re-enqueue a delivery; 202 with the new delivery id. */
      replay: async (id: string) => {
        return endpoints.call('replayDelivery', { id: requireId(idSchema, id) })
      },
    },
  }
}

/** The type of `client.webhooks`. */
export type WebhooksResource = ReturnType<typeof webhooksResource>
