import type { Logger } from '@adonisjs/core/logger'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import debug from '../debug.ts'
import { tableNames } from './schema.ts'
import { safeError } from '../safe_error.ts'

/**
 * PostgreSQL's LISTEN/NOTIFY between the process that commits ledger changes and the relays
 * of the web processes: a notice says "read the log now", it carries nothing. Elsewhere the
 * relays poll.
 */

/** Whether this is PostgreSQL (LISTEN/NOTIFY); kept here for the relays that import it. */
export { isPostgres } from './dialects.ts'

/** The channel a ledger's commits are announced on: its events table's name. */
export function changesChannel(tablePrefix?: string): string {
  return tableNames(tablePrefix).payoutEvents
}

/**
 * Announces commits on the channel, coalesced: one NOTIFY in flight at a time, and one more
 * after it for all the commits it did not cover. Always after COMMIT, on a pooled connection
 * of its own (autocommit): never inside the transaction that wrote the changes.
 */
export class CommitNotices {
  /** NOTIFY statements sent by this process (diagnostics: the bench's relay cost). */
  static sent = 0
  #sending?: Promise<void>
  #again = false

  constructor(
    private client: () => QueryClientContract,
    private channel: string,
    /** Bound of each NOTIFY statement. */
    private timeoutMs: number
  ) {}

  /** After a COMMIT that logged changes; never throws, never waits. */
  committed() {
    if (this.#sending) {
      this.#again = true
      return
    }
    this.#sending = this.#send().finally(() => (this.#sending = undefined))
  }

  /** The NOTIFY in flight, if any, ended. */
  async idle() {
    await this.#sending
  }

  async #send() {
    do {
      this.#again = false
      try {
        CommitNotices.sent++
        const query = this.client().rawQuery('SELECT pg_notify(?, ?)', [this.channel, ''])
        await (this.timeoutMs > 0 ? query.timeout(this.timeoutMs) : query)
      } catch (error) {
        // The relays' poll reads it anyway, a little later.
        debug('notices: NOTIFY %s failed: %s', this.channel, safeError(error).message)
      }
    } while (this.#again)
  }
}

/** A connection of node-postgres, as knex opens it. */
interface PgConnection {
  query(sql: string): Promise<unknown>
  on(event: 'notification', fn: (message: { channel: string }) => void): unknown
  on(event: 'error' | 'end', fn: (error?: Error) => void): unknown
}

/** What a listener needs: the connection to open its own from, the channel, whom to wake. */
export interface CommitListenerOptions {
  client: () => QueryClientContract
  channel: string
  logger: Logger
  /** A notice arrived, or LISTEN was (re)established: whatever committed meanwhile is due. */
  onNotice: () => void
}

/** Waits before reconnecting after a dropped LISTEN connection: doubling, at most this. */
const RECONNECT_MS = { first: 250, max: 10_000 }

/**
 * LISTENs on the channel over one dedicated connection, opened from the app's Lucid
 * connection config (outside its pool) and released on close. A connection that drops is
 * opened again, with backoff; `listening` says whether notices arrive now.
 */
export class CommitListener {
  #options: CommitListenerOptions
  #connection?: PgConnection
  /** Connections released or dropped: their late events change nothing. */
  #gone = new WeakSet<PgConnection>()
  #opening?: Promise<void>
  #timer?: NodeJS.Timeout
  #backoffMs = RECONNECT_MS.first
  #closed = false
  #failing = false

  constructor(options: CommitListenerOptions) {
    this.#options = options
  }

  /** Whether LISTEN is up: notices arrive now. */
  get listening() {
    return this.#connection !== undefined
  }

  start() {
    this.#closed = false
    if (!this.#connection && !this.#opening && !this.#timer) this.#open()
  }

  /** Stops reconnecting and releases the connection. */
  async close() {
    this.#closed = true
    clearTimeout(this.#timer)
    this.#timer = undefined
    await this.#opening
    if (this.#connection) this.#drop(this.#connection)
  }

  #knex() {
    return this.#options.client().getWriteClient().client as unknown as {
      acquireRawConnection(): Promise<PgConnection>
      destroyRawConnection(connection: PgConnection): Promise<void>
    }
  }

  #open() {
    this.#timer = undefined
    this.#opening = this.#listen().finally(() => (this.#opening = undefined))
  }

  async #listen() {
    const { channel, logger } = this.#options
    let connection: PgConnection | undefined
    try {
      connection = await this.#knex().acquireRawConnection()
      const opened = connection
      opened.on('notification', (message) => {
        if (this.#connection === opened && message.channel === channel) this.#options.onNotice()
      })
      opened.on('error', (error) => this.#lost(opened, error))
      opened.on('end', () => this.#lost(opened))
      await opened.query(`LISTEN "${channel.replace(/"/g, '""')}"`)
    } catch (error) {
      if (connection) this.#drop(connection)
      return this.#retry(error as Error)
    }
    if (this.#gone.has(connection)) return this.#retry()
    this.#connection = connection
    if (this.#closed) return this.#drop(connection)
    this.#backoffMs = RECONNECT_MS.first
    if (this.#failing) logger.info('payouts relay listens for commits again')
    this.#failing = false
    debug('notices: listening on %s', channel)
    // What committed while nobody listened sent no notice here.
    this.#options.onNotice()
  }

  /** The connection failed or ended (terminated, the network): another one, after the backoff. */
  #lost(connection: PgConnection, error?: Error) {
    if (this.#gone.has(connection)) return
    const current = this.#connection === connection
    this.#drop(connection)
    if (current) this.#retry(error)
  }

  #drop(connection: PgConnection) {
    this.#gone.add(connection)
    if (this.#connection === connection) this.#connection = undefined
    void this.#knex()
      .destroyRawConnection(connection)
      .catch(() => {})
  }

  #retry(error?: Error) {
    if (this.#closed || this.#timer) return
    if (!this.#failing) {
      this.#options.logger.warn(
        { err: safeError(error) },
        'payouts relay cannot LISTEN for commits: it polls until it can again'
      )
    }
    this.#failing = true
    this.#timer = setTimeout(() => this.#open(), this.#backoffMs)
    this.#timer.unref()
    this.#backoffMs = Math.min(this.#backoffMs * 2, RECONNECT_MS.max)
  }
}
