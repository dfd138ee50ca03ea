import { ENDPOINTS } from '../../contract/endpoints.ts'
import type { RecipientCreateBody, RecipientUpdateBody } from '../../schemas/requests.ts'
import type { EndpointCaller } from '../endpoint_caller.ts'
import type { CallOptions, ListQuery } from '../types.ts'
import { callOptions, idSchema, requireId, validate } from '../validation.ts'

/** `client.recipients`: create (one or many), list, read, update and delete recipients. */
export function recipientsResource(endpoints: EndpointCaller) {
  return {
    create: async (body: RecipientCreateBody, options?: CallOptions) => {
      const payload = validate(ENDPOINTS.createRecipient.request, body)
      return endpoints.call('createRecipient', { body: payload, ...callOptions(options) })
    },
    bulkCreate: async (body: { recipients: RecipientCreateBody[] }, options?: CallOptions) => {
      const payload = validate(ENDPOINTS.bulkCreateRecipients.request, body)
      return endpoints.call('bulkCreateRecipients', { body: payload, ...callOptions(options) })
    },
    list: async (query: ListQuery = {}) => {
      return endpoints.call('listRecipients', {
        query: { limit: query.limit, cursor: query.cursor },
      })
    },
    get: async (id: string) => {
      return endpoints.call('getRecipient', { id: requireId(idSchema, id) })
    },
    update: async (id: string, body: RecipientUpdateBody) => {
      const payload = validate(ENDPOINTS.updateRecipient.request, body)
      return endpoints.call('updateRecipient', { id: requireId(idSchema, id), body: payload })
    },
    delete: async (id: string) => {
      await endpoints.call('deleteRecipient', { id: requireId(idSchema, id) })
    },
  }
}

/** The type of `client.recipients`. */
export type RecipientsResource = ReturnType<typeof recipientsResource>
