import { DateTime } from 'luxon'
import type { PayoutsClient } from '../client/payouts_client.ts'
import type { RecipientCreateBody, RecipientUpdateBody } from '../schemas/requests.ts'
import type { Recipient as RemoteRecipient } from '../schemas/resources.ts'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import Recipient from '../models/recipient.ts'

/** Counts of one reconciliation pass. */
export interface RecipientSyncSummary {
  created: number
  updated: number
  deleted: number
}

/**
 * Recipients through the API, mirrored locally: every create, update and delete lands in
 * the host app's table, and `sync` reconciles with the service's list.
 */
export class RecipientsMirror {
  /** The account whose recipients it mirrors (its client's key): `sync` marks only its own. */
  readonly account: string

  constructor(
    private client: Pick<PayoutsClient, 'recipients'>,
    private connection?: string,
    options: { account?: string } = {}
  ) {
    this.account = options.account ?? DEFAULT_ACCOUNT
  }

  /** The account's local recipients. */
  #locals() {
    return Recipient.query({ connection: this.connection }).where('account', this.account)
  }

  async create(body: RecipientCreateBody, options: { ownerId?: string | null } = {}) {
    const remote = await this.client.recipients.create(body)
    return this.#upsert(remote, options.ownerId)
  }

  async update(remoteId: string, body: RecipientUpdateBody) {
    const remote = await this.client.recipients.update(remoteId, body)
    return this.#upsert(remote)
  }

  /** Deletes remotely; the local row is kept, marked deleted, for history and joins. */
  async delete(remoteId: string) {
    await this.client.recipients.delete(remoteId)
    const local = await this.#locals().where('remote_id', remoteId).first()
    if (local) {
      local.deletedAt = DateTime.now()
      await local.save()
    }
  }

  /** Pages through the service's list, upserts every recipient, marks the missing deleted. */
  async sync(options: { ownerId?: string | null } = {}): Promise<RecipientSyncSummary> {
    const summary: RecipientSyncSummary = { created: 0, updated: 0, deleted: 0 }
    const seen = new Set<string>()
    let cursor: string | undefined
    do {
      const page = await this.client.recipients.list({ limit: 100, cursor })
      for (const remote of page.data) {
        seen.add(remote.id)
        const existed = await this.#locals().where('remote_id', remote.id).first()
        await this.#upsert(remote, options.ownerId)
        if (existed) summary.updated++
        else summary.created++
      }
      cursor = page.nextCursor ?? undefined
    } while (cursor)
    const locals = await this.#locals().whereNull('deleted_at')
    for (const local of locals) {
      if (seen.has(local.remoteId)) continue
      local.deletedAt = DateTime.now()
      await local.save()
      summary.deleted++
    }
    return summary
  }

  async #upsert(remote: RemoteRecipient, ownerId?: string | null) {
    const values = {
      name: remote.name ?? null,
      email: remote.email ?? null,
      country: remote.country ?? null,
      currency: remote.currency ?? null,
      type: remote.type ?? null,
      paymentMethods: (remote.paymentMethods as Array<Record<string, unknown>> | undefined) ?? null,
      metadata: remote.metadata ?? null,
      deletedAt: null,
      syncedAt: DateTime.now(),
      ...(ownerId === undefined ? {} : { ownerId }),
    }
    return Recipient.updateOrCreate({ account: this.account, remoteId: remote.id }, values, {
      connection: this.connection,
    })
  }
}
