import type { QueryClientContract } from '@adonisjs/lucid/types/database'

/** Lucid dialects whose SQL has INSERT ... ON CONFLICT DO NOTHING ... RETURNING. */
export const RETURNING_DIALECTS = new Set([
  'postgres',
  'redshift',
  'better-sqlite3',
  'sqlite3',
  'libsql',
])

const SQLITE_DIALECTS = new Set(['sqlite3', 'better-sqlite3', 'libsql'])

/** Whether `SELECT ... FOR UPDATE` means something here (SQLite has one writer instead). */
export function locksRows(client: QueryClientContract): boolean {
  return !SQLITE_DIALECTS.has(client.dialect.name)
}

/** Rows an UPDATE touched: Lucid answers a count on some dialects, `[count]` on others. */
export function affectedRows(result: unknown): number {
  return Number(Array.isArray(result) ? result[0] : result)
}
