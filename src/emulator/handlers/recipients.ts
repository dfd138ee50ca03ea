import { randomUUID } from 'node:crypto'
import { ENDPOINTS } from '../../contract/endpoints.ts'
import { recipientView } from '../state.ts'
import { notFound, page, parse, type ApiContext, type ApiDeps, type Handler } from './shared.ts'

/** Recipients: create (one or many), list, read, update and delete, per account. */
export function recipientHandlers({ state, clock }: ApiDeps) {
  const find = ({ accountId, params }: ApiContext) => {
    const recipient = state.recipients.get(params[0])
    return recipient && recipient.accountId === accountId ? recipient : undefined
  }

  return {
    createRecipient: ({ accountId, body }) => {
      const parsed = parse(ENDPOINTS.createRecipient.request, body)
      if ('error' in parsed) return parsed.error
      return { status: 201, body: recipientView(state.createRecipient(accountId, parsed.data)) }
    },
    bulkCreateRecipients: ({ accountId, body }) => {
      const parsed = parse(ENDPOINTS.bulkCreateRecipients.request, body)
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
    listRecipients: ({ accountId, query }) => {
      const list = [...state.recipients.values()].filter((r) => r.accountId === accountId)
      const result = page(list, query)
      return {
        status: 200,
        body: { data: result.data.map(recipientView), nextCursor: result.nextCursor },
      }
    },
    getRecipient: (ctx) => {
      const recipient = find(ctx)
      return recipient ? { status: 200, body: recipientView(recipient) } : notFound('recipient')
    },
    updateRecipient: (ctx) => {
      const recipient = find(ctx)
      if (!recipient) return notFound('recipient')
      const parsed = parse(ENDPOINTS.updateRecipient.request, ctx.body)
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
      return { status: 200, body: recipientView(recipient) }
    },
    deleteRecipient: (ctx) => {
      const recipient = find(ctx)
      if (!recipient) return notFound('recipient')
      state.recipients.delete(recipient.id)
      return { status: 204 }
    },
  } satisfies Record<string, Handler>
}
