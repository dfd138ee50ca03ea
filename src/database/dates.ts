import { DateTime } from 'luxon'
import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { isMysql } from './dialects.ts'

/** What the date helpers need of a Lucid query or transaction client. */
export type DateClient = Pick<QueryClientContract, 'dialect'>

/**
 * A timestamp in the connection's own format, always in UTC, for writes and comparisons
 * that skip the models (the inbox hot path, insert-or-ignore). SQLite and MySQL store it
 * without an offset, so every process must write the same zone whatever its `TZ`.
 */
export function dbDate(client: DateClient, value: Date | DateTime = new Date()): string {
  const format = client.dialect.dateTimeFormat
  const fast = FROM_ISO[format]
  if (fast) {
    // A DateTime's instant is its milliseconds, whatever its zone: written in UTC either way.
    const time = value instanceof Date ? value.getTime() : value.toMillis()
    if (time >= ISO_FROM && time < ISO_UNTIL) return fast(new Date(time).toISOString())
  }
  const dt = value instanceof DateTime ? value : DateTime.fromJSDate(value)
  return dt.toUTC().toFormat(format)
}

/**
 * The dialects' `dateTimeFormat`s cut from `toISOString()` (always UTC, `yyyy-MM-ddTHH:mm:ss.SSSZ`
 * for years 1000 to 9999): Luxon's `toFormat` cost about a fiftieth of the webhook route's time,
 * and 8 % of an inbox batch's (each payout's dates are DateTimes), where this is a slice. Any
 * other format, an invalid DateTime (NaN) or a year outside goes through Luxon.
 */
const FROM_ISO: Record<string, (iso: string) => string> = {
  'yyyy-MM-dd HH:mm:ss': (iso) => `${iso.slice(0, 10)} ${iso.slice(11, 19)}`,
  "yyyy-MM-dd'T'HH:mm:ss.SSSZZ": (iso) => `${iso.slice(0, 23)}+00:00`,
}
const ISO_FROM = Date.UTC(1000, 0, 1)
const ISO_UNTIL = Date.UTC(10000, 0, 1)

/**
 * The zone mysql2 built its JS Dates in, from the connection's `timezone` option: unset or
 * `local` is the process's zone, `Z` is UTC, `+HH:MM` a fixed offset.
 */
function mysqlZone(client: DateClient): string {
  const config = (client.dialect as { config?: { connection?: { timezone?: unknown } } }).config
  const timezone = config?.connection?.timezone
  if (timezone === 'Z') return 'utc'
  if (typeof timezone === 'string' && /^[+-]\d{2}:\d{2}$/.test(timezone)) return `UTC${timezone}`
  return 'system'
}

/**
 * A timestamp read from the database as a UTC DateTime. Strings without an offset (SQLite,
 * mysql2 with `dateStrings`) are UTC, as the plugin wrote them. PostgreSQL's timestamptz
 * arrives as a correct instant. mysql2 builds a DATETIME's Date in its connection's zone: its
 * wall clock there is the UTC wall clock the plugin wrote.
 */
export function fromDbDate(client: DateClient, value: unknown): DateTime | null {
  if (value === null || value === undefined || value === '') return null
  if (DateTime.isDateTime(value)) return value.toUTC()
  if (typeof value === 'string') {
    const fast = utcFromSqlString(value)
    if (fast) return fast
    const sql = DateTime.fromSQL(value, { zone: 'utc' })
    return sql.isValid ? sql : DateTime.fromISO(value, { zone: 'utc' })
  }
  if (value instanceof Date) {
    const instant = DateTime.fromJSDate(value, { zone: 'utc' })
    if (!isMysql(client)) return instant
    return instant.setZone(mysqlZone(client)).setZone('utc', { keepLocalTime: true })
  }
  if (typeof value === 'number') return DateTime.fromMillis(value, { zone: 'utc' })
  return null
}

/** `yyyy-MM-dd HH:mm:ss` with an optional fraction: what SQLite and MySQL's strings hold. */
const SQL_DATE_TIME = /^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,](\d{1,30}))?$/

/**
 * A string of the shape the plugin writes (`SQL_DATE_TIME`, in UTC) as the UTC DateTime
 * `DateTime.fromSQL(value, { zone: 'utc' })` makes of it, without Luxon's parser: a payout
 * has seven such columns, and reading them was a tenth of an inbox batch's hydration. Its
 * fraction is cut to milliseconds as Luxon cuts it. Null for anything else (another shape,
 * a year before 1000, a date or time out of range), which goes through Luxon.
 */
function utcFromSqlString(value: string): DateTime | null {
  const parts = SQL_DATE_TIME.exec(value)
  if (!parts) return null
  const [year, month, day, hour, minute, second] = parts.slice(1, 7).map(Number)
  if (year < 1000) return null
  // Luxon refuses a part out of range (February 30th), where Date.UTC would carry it over.
  if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month)) return null
  if (hour > 23 || minute > 59 || second > 59) return null
  const millis = parts[7] === undefined ? 0 : Math.floor(Number.parseFloat(`0.${parts[7]}`) * 1000)
  // A fraction of 17 nines and more reads as 1 000 ms, which Luxon refuses.
  if (millis > 999) return null
  const time = Date.UTC(year, month - 1, day, hour, minute, second, millis)
  return DateTime.fromMillis(time, { zone: 'utc' })
}

const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]

/** Days in a month of the Gregorian calendar (month from 1). */
function daysIn(year: number, month: number): number {
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0)
  return month === 2 && leap ? 29 : DAYS_IN_MONTH[month - 1]
}
