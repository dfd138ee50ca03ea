import type { Database } from '@adonisjs/lucid/database'
import { dbDate } from '../database/dates.ts'
import { dropIdleConnections, withStatementTimeout } from '../database/deadline.ts'
import { E_PAYOUTS_ACCOUNT_ENVIRONMENT } from '../errors.ts'
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
  timeoutMs: number
}

/**
 * Records the environment of an account's key the first time the account uses the ledger,
 * and refuses a key of the other environment afterwards (E_PAYOUTS_ACCOUNT_ENVIRONMENT): the
 * account's rows (payouts, intents, deliveries) were made by the service of the first one,
 * and a live key must never reconcile, retry or answer for sandbox rows, nor the reverse.
 * Two processes recording at once: one insert wins, the other reads what it wrote.
 */
export async function checkAccountEnvironment(input: AccountEnvironmentInput): Promise<void> {
  const { db, connection, table, account, environment, timeoutMs } = input
  const client = () => db.connection(connection)
  // Each statement bounded on its own too: one past it has its connection destroyed, not
  // returned to the pool (a stalled database must not keep the next attempt waiting).
  const read = async () => {
    const row = await withStatementTimeout(
      client().from(table).where('name', account).select('environment'),
      timeoutMs
    ).first()
    return (row?.environment as string | undefined) ?? null
  }
  const recorded = await withDeadline(
    (async () => {
      const found = await read()
      if (found) return found
      try {
        const writer = client()
        await withStatementTimeout(
          writer.table(table).insert({ name: account, environment, created_at: dbDate(writer) }),
          timeoutMs
        )
        return environment
      } catch (error) {
        // Another process recorded it first (the name is the primary key).
        const raced = await read()
        if (raced) return raced
        throw error
      }
    })(),
    timeoutMs,
    `the environment of account ${account}`
  ).catch((error) => {
    // The idle connections most likely share the stalled one's fate.
    dropIdleConnections(client(), error)
    throw error
  })
  if (recorded !== environment) {
    throw new E_PAYOUTS_ACCOUNT_ENVIRONMENT([account, recorded, environment])
  }
}
