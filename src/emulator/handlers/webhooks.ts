import { ENDPOINTS } from '../../contract/endpoints.ts'
import { omit } from '../state.ts'
import type { SubscriptionRecord } from '../webhooks.ts'
import {
  invalid,
  notFound,
  page,
  parse,
  type ApiContext,
  type ApiDeps,
  type Handler,
} from './shared.ts'

/** The most active subscriptions one account may have. */
const MAX_ACTIVE_SUBSCRIPTIONS = 25

/** The 409 for one more active subscription than the account may have. */
const tooManyActive = () => ({
  status: 409,
  body: {
    code: 'MAX_ACTIVE_SUBSCRIPTIONS_EXCEEDED',
    error: `the account already has ${MAX_ACTIVE_SUBSCRIPTIONS} active subscriptions`,
  },
})

/** A subscription as the API shows it: never its secret or its account. */
const subscriptionView = (s: SubscriptionRecord) => omit(s, ['secret', 'accountId'])

/** Webhook subscriptions (secret rotation included) and deliveries (replay included). */
export function webhookHandlers({ webhooks, allowInsecureWebhooks }: ApiDeps) {
  const findSubscription = ({ accountId, params }: ApiContext) => {
    const subscription = webhooks.subscriptions.get(params[0])
    return subscription && subscription.accountId === accountId ? subscription : undefined
  }
  const findDelivery = ({ accountId, params }: ApiContext) => {
    const delivery = webhooks.deliveries.get(params[0])
    return delivery && delivery.accountId === accountId ? delivery : undefined
  }

  return {
    createSubscription: async ({ accountId, body }) => {
      const parsed = parse(ENDPOINTS.createSubscription.request(allowInsecureWebhooks), body)
      if ('error' in parsed) return parsed.error
      const target = await webhooks.checkUrl(parsed.data.url)
      if ('refusal' in target) return invalid('url', target.refusal)
      if (webhooks.activeCount(accountId) >= MAX_ACTIVE_SUBSCRIPTIONS) return tooManyActive()
      const subscription = webhooks.createSubscription(accountId, parsed.data)
      return {
        status: 201,
        body: { ...subscriptionView(subscription), secret: subscription.secret },
      }
    },
    listSubscriptions: ({ accountId }) => ({
      status: 200,
      body: {
        data: [...webhooks.subscriptions.values()]
          .filter((s) => s.accountId === accountId)
          .map((s) => subscriptionView(s)),
      },
    }),
    getSubscription: (ctx) => {
      const subscription = findSubscription(ctx)
      if (!subscription) return notFound('subscription')
      return { status: 200, body: subscriptionView(subscription) }
    },
    updateSubscription: async (ctx) => {
      const subscription = findSubscription(ctx)
      if (!subscription) return notFound('subscription')
      const schema = ENDPOINTS.updateSubscription.request(allowInsecureWebhooks)
      const parsed = parse(schema, ctx.body)
      if ('error' in parsed) return parsed.error
      if (parsed.data.url) {
        const target = await webhooks.checkUrl(parsed.data.url)
        if ('refusal' in target) return invalid('url', target.refusal)
      }
      // Reactivating is one more active subscription: the limit holds here as at creation.
      const activates = parsed.data.active === true && !subscription.active
      if (activates && webhooks.activeCount(ctx.accountId) >= MAX_ACTIVE_SUBSCRIPTIONS)
        return tooManyActive()
      Object.assign(subscription, parsed.data)
      return { status: 200, body: subscriptionView(subscription) }
    },
    deleteSubscription: (ctx) => {
      const subscription = findSubscription(ctx)
      if (!subscription) return notFound('subscription')
      webhooks.subscriptions.delete(subscription.id)
      return { status: 204 }
    },
    rotateSubscriptionSecret: (ctx) => {
      const subscription = findSubscription(ctx)
      if (!subscription) return notFound('subscription')
      return {
        status: 200,
        body: { id: subscription.id, secret: webhooks.rotateSecret(subscription) },
      }
    },
    listDeliveries: ({ accountId, query }) => {
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
    getDelivery: (ctx) => {
      const delivery = findDelivery(ctx)
      return delivery ? { status: 200, body: webhooks.view(delivery) } : notFound('delivery')
    },
    replayDelivery: (ctx) => {
      const delivery = findDelivery(ctx)
      if (!delivery) return notFound('delivery')
      const replay = webhooks.replay(delivery)
      if (!replay) return notFound('subscription')
      return { status: 202, body: { id: replay.id, replayOf: delivery.id, status: 'pending' } }
    },
  } satisfies Record<string, Handler>
}
