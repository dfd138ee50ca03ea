import type { Database } from '@adonisjs/lucid/database'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { dbDate } from '../database/dates.ts'

/** A delivery as the route hands it to the inbox. */
export interface InboxDeliveryInput {
  deliveryId: string
  eventType: string
  rawBody: Buffer
  signatureHeader: string | null
  source: 'webhook' | 'websocket'
}

/** A stored delivery, as the processor reads it back. */
export interface InboxRow {
  id: number
  deliveryId: string
  eventType: string
  rawBody: Buffer
  source: string
  attempts: number
}

/** Unique-violation codes of SQLite, PostgreSQL and MySQL/MariaDB. */
function isUniqueViolation(error: unknown): boolean {
  const code = (error as { code?: string }).code
  return (
    code === 'SQLITE_CONSTRAINT_UNIQUE' ||
    code === 'SQLITE_CONSTRAINT_PRIMARYKEY' ||
    code === '23505' ||
    code === 'ER_DUP_ENTRY'
  )
}

/**
 * The durable inbox (`<prefix>webhook_deliveries`). Insert is the only work on the
 * webhook hot path; claiming uses a lease (`next_attempt_at`) so a row held by a process
 * that died is picked up again, and a conditional update so two instances never both
 * claim it.
 */
export class InboxStore {
  constructor(
    private db: Database,
    private table: string,
    private connection?: string
  ) {}

  #client(): QueryClientContract {
    return this.db.connection(this.connection)
  }

  /** Persists a delivery; a Svc-Delivery-Id seen before is reported as a duplicate. */
  async insert(input: InboxDeliveryInput): Promise<'stored' | 'duplicate'> {
    const client = this.#client()
    try {
      await client
        .insertQuery()
        .table(this.table)
        .insert({
          delivery_id: input.deliveryId,
          event_type: input.eventType,
          raw_body: input.rawBody.toString('base64'),
          signature_header: input.signatureHeader,
          source: input.source,
          state: 'pending',
          attempts: 0,
          received_at: dbDate(client),
        })
      return 'stored'
    } catch (error) {
      if (isUniqueViolation(error)) return 'duplicate'
      throw error
    }
  }

  /**
   * Claims up to `limit` rows that are due: new ones, failed ones whose backoff expired,
   * and ones whose processing lease expired (the process holding them died). The claim is
   * a conditional update, so only one instance wins each row.
   */
  async claimDue(now: Date, limit: number, leaseMs: number): Promise<InboxRow[]> {
    const client = this.#client()
    const candidates = await client
      .from(this.table)
      .select('id', 'state', 'attempts')
      .where((query) => {
        query.where('state', 'pending').orWhere((failed) => {
          failed
            .whereIn('state', ['failed', 'processing'])
            .where('next_attempt_at', '<=', dbDate(client, now))
        })
      })
      .orderBy('id', 'asc')
      .limit(limit)
    const claimed: InboxRow[] = []
    const lease = dbDate(client, new Date(now.getTime() + leaseMs))
    for (const candidate of candidates) {
      const updated = await client
        .from(this.table)
        .where('id', candidate.id)
        .where('state', candidate.state)
        .where('attempts', candidate.attempts)
        .update({ state: 'processing', next_attempt_at: lease, attempts: candidate.attempts + 1 })
      if (Number(Array.isArray(updated) ? updated[0] : updated) !== 1) continue
      const row = await client.from(this.table).where('id', candidate.id).first()
      // Deleted between the claim and the read (pruning, an operator): nothing to process.
      if (!row) continue
      claimed.push({
        id: Number(row.id),
        deliveryId: row.delivery_id,
        eventType: row.event_type,
        rawBody: Buffer.from(row.raw_body, 'base64'),
        source: row.source,
        attempts: Number(row.attempts),
      })
    }
    return claimed
  }

  /** Marks a row done; `note` records why an authentic but unusable delivery was skipped. */
  async markProcessed(id: number, note: string | null = null) {
    const client = this.#client()
    await client
      .from(this.table)
      .where('id', id)
      .update({
        state: 'processed',
        processed_at: dbDate(client),
        next_attempt_at: null,
        last_error: note,
      })
  }

  /** Records a failure: retried at `retryAt`, or dead-lettered when it is null. */
  async markFailed(id: number, error: string, retryAt: Date | null) {
    const client = this.#client()
    await client
      .from(this.table)
      .where('id', id)
      .update({
        state: retryAt ? 'failed' : 'dead',
        next_attempt_at: retryAt ? dbDate(client, retryAt) : null,
        last_error: error.slice(0, 2000),
      })
  }

  /**
   * Puts matching rows back in the queue (for `payouts:replay`). Processed rows move only
   * with `force`; re-applying them is safe, the state machine ignores what it has seen.
   */
  async requeue(filter: {
    ids?: string[]
    state?: 'failed' | 'dead' | 'processed' | 'pending'
    since?: Date
    until?: Date
    force?: boolean
  }): Promise<number[]> {
    const client = this.#client()
    const query = client.from(this.table).select('id', 'state')
    if (filter.ids?.length) query.whereIn('delivery_id', filter.ids)
    if (filter.state) query.where('state', filter.state)
    if (filter.since) query.where('received_at', '>=', dbDate(client, filter.since))
    if (filter.until) query.where('received_at', '<', dbDate(client, filter.until))
    const rows: Array<{ id: number; state: string }> = await query
    const ids = rows
      .filter((row) => row.state !== 'processing' && (row.state !== 'processed' || filter.force))
      .map((row) => Number(row.id))
    if (ids.length > 0) {
      await client
        .from(this.table)
        .whereIn('id', ids)
        .update({ state: 'pending', attempts: 0, next_attempt_at: null })
    }
    return ids
  }

  /** States of the given rows, after a replay. */
  async statesOf(ids: number[]): Promise<string[]> {
    if (ids.length === 0) return []
    const rows: Array<{ state: string }> = await this.#client()
      .from(this.table)
      .select('state')
      .whereIn('id', ids)
    return rows.map((row) => row.state)
  }
}
