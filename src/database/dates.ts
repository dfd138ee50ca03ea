import { DateTime } from 'luxon'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'

/**
 * A timestamp in the connection's own format, for writes that skip the models (the
 * inbox hot path, insert-or-ignore). SQLite would otherwise store a JS Date as a number.
 */
export function dbDate(client: QueryClientContract, value: Date | DateTime = new Date()): string {
  const dt = value instanceof DateTime ? value : DateTime.fromJSDate(value)
  return dt.toFormat(client.dialect.dateTimeFormat)
}
