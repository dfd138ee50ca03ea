import type { Database } from '@adonisjs/lucid/database'
import { dbDate, fromDbDate } from '../database/dates.ts'
import { withDeadline } from '../time_bounds.ts'
import { dropIdleConnections, withStatementTimeout } from '../database/deadline.ts'
import { affectedRows } from '../database/dialects.ts'
import { E_PAYOUTS_WEBHOOK_SECRET_NOT_STORED } from '../errors.ts'
import { DEFAULT_ACCOUNT } from '../constants.ts'

/** Encrypts and decrypts with the app's APP_KEY (AdonisJS `encryption`). */
export interface SecretCipher {
  encrypt(value: string): string
  decrypt<T = string>(value: string): T | null
}

/** A subscription's signing secrets as stored here, decrypted. */
export interface StoredSubscription {
  subscriptionId: string
  url: string
  secret: string
  previousSecret: string | null
  previousValidUntil: Date | null
}

/** What else a `SecretStore` is for. */
export interface SecretStoreOptions {
  /**
   * The account whose subscriptions it keeps (`config.account`, default `main`): accounts
   * share the table, and a route accepts its own account's secrets only.
   */
  account?: string
}

/**
 * Signing secrets kept in the app's database, encrypted, for one account. The webhook route
 * reads them through a short cache so the hot path does no query; a write in this process
 * refreshes it at once, other instances within `ttlMs`.
 */
export class SecretStore {
  #cache: { at: number; secrets: StoredSubscription[] } | null = null
  #loading?: Promise<StoredSubscription[]>
  /** Bumped by every write, so a read started before it cannot refill the cache. */
  #generation = 0
  /** The account whose secrets it keeps. */
  readonly account: string

  #invalidate() {
    this.#generation++
    this.#cache = null
    this.#loading = undefined
  }

  constructor(
    private db: Database,
    private table: string,
    private cipher: SecretCipher,
    private connection?: string,
    private ttlMs = 30_000,
    /** A load that takes longer fails its waiters; the next request loads again. */
    private loadTimeoutMs = 5000,
    options: SecretStoreOptions = {}
  ) {
    this.account = options.account ?? DEFAULT_ACCOUNT
  }

  /** The table's rows of this account: every statement goes through here. */
  #rows() {
    return this.db.connection(this.connection).from(this.table).where('account', this.account)
  }

  async save(input: { subscriptionId: string; url: string; secret: string }) {
    const client = this.db.connection(this.connection)
    const now = dbDate(client)
    const existing = await this.#rows().where('subscription_id', input.subscriptionId).first()
    const values = { url: input.url, secret: this.cipher.encrypt(input.secret), updated_at: now }
    if (existing) await this.#rows().where('id', existing.id).update(values)
    else
      await client
        .insertQuery()
        .table(this.table)
        .insert({
          ...values,
          account: this.account,
          subscription_id: input.subscriptionId,
          created_at: now,
        })
    this.#invalidate()
  }

  /** Whether this app keeps a secret for the subscription (read from the table, not the cache). */
  async has(subscriptionId: string): Promise<boolean> {
    const row = await this.#rows().where('subscription_id', subscriptionId).select('id').first()
    return Boolean(row)
  }

  /**
   * Stores a rotated secret in place of the old one, which the service no longer signs
   * with: no overlap. A previous secret left by an older rotation is cleared too.
   */
  async rotate(subscriptionId: string, secret: string) {
    const client = this.db.connection(this.connection)
    const updated = await this.#rows()
      .where('subscription_id', subscriptionId)
      .update({
        secret: this.cipher.encrypt(secret),
        previous_secret: null,
        previous_valid_until: null,
        updated_at: dbDate(client),
      })
    this.#invalidate()
    if (!affectedRows(updated)) throw new E_PAYOUTS_WEBHOOK_SECRET_NOT_STORED([subscriptionId])
  }

  /** Forgets a subscription's secrets; false when none were stored. */
  async delete(subscriptionId: string): Promise<boolean> {
    const deleted = await this.#rows().where('subscription_id', subscriptionId).delete()
    this.#invalidate()
    return affectedRows(deleted) > 0
  }

  /**
   * The stored subscriptions, from the cache while it is younger than `ttlMs` (or than
   * `maxAgeMs`, when a caller needs fresher ones).
   */
  list(options: { maxAgeMs?: number } = {}): Promise<StoredSubscription[]> {
    const maxAge = Math.min(this.ttlMs, options.maxAgeMs ?? Infinity)
    if (this.#cache && Date.now() - this.#cache.at < maxAge) {
      return Promise.resolve(this.#cache.secrets)
    }
    // One read however many webhooks arrive while the cache is stale. A read that stalls
    // is given up at its deadline, so the next request starts a fresh one.
    if (!this.#loading) {
      const loading = withDeadline(
        this.#load(),
        this.loadTimeoutMs,
        'webhook secrets load',
        (error) => dropIdleConnections(this.db.connection(this.connection), error)
      ).finally(() => {
        if (this.#loading === loading) this.#loading = undefined
      })
      this.#loading = loading
    }
    return this.#loading
  }

  async #load(): Promise<StoredSubscription[]> {
    const generation = this.#generation
    const client = this.db.connection(this.connection)
    const query = this.#rows().orderBy('id')
    const rows = await withStatementTimeout(query, this.loadTimeoutMs)
    const secrets = rows.map((row: any) => ({
      subscriptionId: row.subscription_id,
      url: row.url,
      secret: this.cipher.decrypt<string>(row.secret) ?? '',
      previousSecret: row.previous_secret ? this.cipher.decrypt<string>(row.previous_secret) : null,
      previousValidUntil: row.previous_valid_until
        ? fromDbDate(client, row.previous_valid_until)!.toJSDate()
        : null,
    }))
    if (generation === this.#generation) this.#cache = { at: Date.now(), secrets }
    return secrets
  }

  /**
   * The current secret of every stored subscription. A previous secret is never accepted:
   * a rotation through the plugin keeps none, and one left by an older version is ignored.
   */
  async activeSecrets(options: { maxAgeMs?: number } = {}): Promise<string[]> {
    const stored = await this.list(options)
    return stored.map((s) => s.secret).filter(Boolean)
  }
}
