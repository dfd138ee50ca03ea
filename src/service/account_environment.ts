import { createHash } from 'node:crypto'
import type { Database } from '@adonisjs/lucid/database'
import { dbDate } from '../database/dates.ts'
import { dropIdleConnections, withStatementTimeout } from '../database/deadline.ts'
import { E_PAYOUTS_ACCOUNT_ENVIRONMENT, E_PAYOUTS_ACCOUNT_KEY } from '../errors.ts'
import { withDeadline } from '../time_bounds.ts'

/** Where an account's environment is kept, and the account with the key it now has. */
export interface AccountEnvironmentInput {
  db: Database
  connection?: string
  /** The `accounts` table (`tableNames(prefix).accounts`). */
  table: string
  account: string
  /** The environment of the key configured now (the client's: sk_live_ is production). */
  environment: string
  /** The key configured now: only its fingerprint is kept (a SHA-256, never the key). */
  apiKey?: string
  timeoutMs: number
}

/** What the check found: `rotated` when the account's key is not the one it last used. */
export interface AccountCheck {
  rotated: boolean
}

/**
 * A key's fingerprint: enough to tell two keys apart, nothing to rebuild one from (a key is
 * 43 random characters).
 */
export function keyFingerprint(apiKey: string): string {
  return createHash('sha256').update(apiKey).digest('hex').slice(0, 32)
}

interface AccountRow {
  name: string
  environment: string
  key_fingerprint: string | null
}

/**
 * Checks an account's key against what the ledger recorded when the account first used it:
 * - a key of the other environment is refused (E_PAYOUTS_ACCOUNT_ENVIRONMENT): the account's
 *   rows were made by the service of the first one, and a live key must never reconcile,
 *   retry or answer for sandbox rows, nor the reverse;
 * - a key another account last used is refused (E_PAYOUTS_ACCOUNT_KEY): two accounts' keys
 *   swapped in the environment would re-send one account's intents with the other's key,
 *   which the service would take for new payouts;
 * - a key never seen is the account's new key (a rotation): recorded, and told (`rotated`).
 * Two processes recording at once: one insert wins, the other reads what it wrote.
 */
export async function checkAccountEnvironment(
  input: AccountEnvironmentInput
): Promise<AccountCheck> {
  const { db, connection, table, account, environment, timeoutMs } = input
  const fingerprint = input.apiKey ? keyFingerprint(input.apiKey) : null
  const client = () => db.connection(connection)
  // Each statement bounded on its own too: one past it has its connection destroyed, not
  // returned to the pool (a stalled database must not keep the next attempt waiting).
  const bounded = <Query extends { timeout(ms: number): Query }>(query: Query) =>
    withStatementTimeout(query, timeoutMs)
  const read = async (): Promise<AccountRow[]> => {
    const query = client()
      .from(table)
      .where('name', account)
      .select('name', 'environment', 'key_fingerprint')
    if (fingerprint) query.orWhere('key_fingerprint', fingerprint)
    return bounded(query)
  }
  const work = async (): Promise<AccountCheck> => {
    let rows = await read()
    // The key another account last used: refused before anything is recorded for this one.
    const other = rows.find((row) => row.name !== account)
    if (other) throw new E_PAYOUTS_ACCOUNT_KEY([account, other.name])
    let own = rows.find((row) => row.name === account)
    if (!own) {
      own = { name: account, environment, key_fingerprint: fingerprint }
      try {
        const writer = client()
        await bounded(writer.table(table).insert({ ...own, created_at: dbDate(writer) }))
      } catch (error) {
        // Another process recorded it first (the name is the primary key): its row counts.
        rows = await read()
        own = rows.find((row) => row.name === account)
        if (!own) throw error
      }
    }
    if (own.environment !== environment) {
      throw new E_PAYOUTS_ACCOUNT_ENVIRONMENT([account, own.environment, environment])
    }
    if (!fingerprint || own.key_fingerprint === fingerprint) return { rotated: false }
    await bounded(
      client().from(table).where('name', account).update({ key_fingerprint: fingerprint })
    )
    return { rotated: own.key_fingerprint !== null }
  }
  return withDeadline(work(), timeoutMs, `the key check of account ${account}`).catch((error) => {
    // The idle connections most likely share the stalled one's fate.
    dropIdleConnections(client(), error)
    throw error
  })
}
