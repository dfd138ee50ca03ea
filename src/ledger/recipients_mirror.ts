import { randomUUID } from 'node:crypto'
import { DateTime } from 'luxon'
import { PayoutsApiError, PayoutsValidationError } from '../client/errors.ts'
import type { PayoutsClient } from '../client/payouts_client.ts'
import { idempotencyKeySchema } from '../schemas/common.ts'
import {
  RECIPIENTS_BULK_MAX_ITEMS,
  recipientCreateSchema,
  type RecipientCreateBody,
  type RecipientUpdateBody,
} from '../schemas/requests.ts'
import { chunkKey, MAX_BATCH_KEY_LENGTH } from './batch_keys.ts'
import type { Recipient as RemoteRecipient } from '../schemas/resources.ts'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import { boundedTransaction } from '../database/deadline.ts'
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

  /**
   * Creates many recipients through `POST /recipients/bulk`, 100 to a request, each request
   * under `<idempotencyKey>-c<n>`, and mirrors each one as `create` does; answers the local
   * rows in the order of `rows`. Every row is checked first (an error names it:
   * `rows.3.name`), nothing sent when one is bad. With your own key, calling again after a
   * failure (a lost answer, a refusal of a later request) gets the recipients already made
   * again instead of new ones, and sends the rest; without one, each call makes new ones.
   */
  async createMany(
    rows: RecipientCreateBody[],
    options: { ownerId?: string | null; idempotencyKey?: string } = {}
  ): Promise<Recipient[]> {
    if (!Array.isArray(rows) || rows.length === 0) {
      throw new PayoutsValidationError('rows', 'must be a non-empty array of recipients')
    }
    if (rows.length > 10_000) {
      throw new PayoutsValidationError('rows', 'must hold at most 10000 recipients')
    }
    rows.forEach((row, index) => {
      const checked = recipientCreateSchema.safeParse(row)
      if (!checked.success) {
        const issue = checked.error.issues[0]
        const field = issue.path.map(String).join('.')
        throw new PayoutsValidationError(`rows.${index}${field ? `.${field}` : ''}`, issue.message)
      }
    })
    const key = options.idempotencyKey ?? randomUUID()
    const checkedKey = idempotencyKeySchema.safeParse(key)
    if (!checkedKey.success || key.length > MAX_BATCH_KEY_LENGTH) {
      throw new PayoutsValidationError(
        'idempotencyKey',
        checkedKey.success
          ? `must be at most ${MAX_BATCH_KEY_LENGTH} characters (its requests add -c<n>)`
          : checkedKey.error.issues[0].message
      )
    }
    const mirrored: Recipient[] = []
    for (let start = 0; start < rows.length; start += RECIPIENTS_BULK_MAX_ITEMS) {
      const chunk = rows.slice(start, start + RECIPIENTS_BULK_MAX_ITEMS)
      const made = await this.client.recipients.bulkCreate(
        { recipients: chunk },
        { idempotencyKey: chunkKey(key, start / RECIPIENTS_BULK_MAX_ITEMS) }
      )
      if (made.length !== chunk.length) {
        throw new PayoutsApiError({
          status: 201,
          code: 'INVALID_RESPONSE',
          message: `unexpected recipients/bulk answer: ${made.length} recipients for ${chunk.length} rows`,
          outcomeUnknown: true,
        })
      }
      for (const remote of made) mirrored.push(await this.#upsert(remote, options.ownerId))
    }
    return mirrored
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
    // Lucid's updateOrCreate reads, then writes, in a transaction of its own: on SQLite, while
    // another process writes the file (the worker), that read's lock cannot be upgraded and
    // SQLite refuses at once ("database is locked"). Here the write lock is waited for first,
    // and the COMMIT is confirmed, as for every write of the plugin.
    const client = Recipient.$adapter.modelConstructorClient(Recipient, {
      connection: this.connection,
    })
    return boundedTransaction(
      client,
      { timeoutMs: 0, what: 'recipient mirror', writes: Recipient.table },
      (trx) =>
        Recipient.updateOrCreate({ account: this.account, remoteId: remote.id }, values, {
          client: trx,
        })
    )
  }
}
