import { dbDate } from '../database/dates.ts'
import { whereAccountNotLeading } from '../database/dialects.ts'
import { own, type InboxContext } from './inbox_context.ts'

/** Which rows `payouts:replay` puts back in the queue. */
export interface RequeueFilter {
  ids?: string[]
  state?: 'failed' | 'dead' | 'processed' | 'pending'
  since?: Date
  until?: Date
  force?: boolean
}

/** `InboxStore.requeue`: the account's matching rows made pending again; answers their ids. */
export async function requeue(context: InboxContext, filter: RequeueFilter): Promise<number[]> {
  const client = context.client()
  // By delivery id through the (account, delivery_id) index; otherwise the account's filter
  // is kept out of SQLite's plan (see `whereAccountNotLeading`), so a time range or a state
  // reads its own index, not the account's every row.
  const query = (
    filter.ids?.length
      ? own(context, client.from(context.table))
      : whereAccountNotLeading(client, client.from(context.table), context.account)
  ).select('id', 'state')
  if (filter.ids?.length) query.whereIn('delivery_id', filter.ids)
  if (filter.state) query.where('state', filter.state)
  if (filter.since) query.where('received_at', '>=', dbDate(client, filter.since))
  if (filter.until) query.where('received_at', '<', dbDate(client, filter.until))
  const rows: Array<{ id: number; state: string }> = await query
  const ids = rows
    .filter((row) => row.state !== 'processing' && (row.state !== 'processed' || filter.force))
    .map((row) => Number(row.id))
  if (ids.length > 0) {
    await whereAccountNotLeading(client, client.from(context.table), context.account)
      .whereIn('id', ids)
      .update({ state: 'pending', attempts: 0, next_attempt_at: null })
  }
  return ids
}

/** `InboxStore.statesOf`: the states of the given rows. */
export async function statesOf(context: InboxContext, ids: number[]): Promise<string[]> {
  if (ids.length === 0) return []
  const client = context.client()
  const rows: Array<{ state: string }> = await whereAccountNotLeading(
    client,
    client.from(context.table),
    context.account
  )
    .select('state')
    .whereIn('id', ids)
  return rows.map((row) => row.state)
}
