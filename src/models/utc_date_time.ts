import { DateTime } from 'luxon'
import type { LucidModel, LucidRow } from '@adonisjs/lucid/types/model'
import { dbDate, fromDbDate } from '../database/dates.ts'

/** The query client a row reads and writes through (its transaction, else its connection). */
function clientOf(row: LucidRow) {
  const model = row.constructor as LucidModel
  return model.$adapter.modelClient(row)
}

/**
 * Options for every `@column.dateTime` of the plugin's models: written in UTC in the
 * dialect's format and read back as UTC, so processes in different `TZ`s agree on SQLite
 * and MySQL (Lucid's own prepare and consume use the process's local zone).
 */
export const utcDateTime = {
  prepare: (value: unknown, attribute: string, row: LucidRow) => {
    if (!value || typeof value === 'string') return value
    if (!DateTime.isDateTime(value) || !value.isValid) {
      throw new TypeError(`${row.constructor.name}.${attribute} must be a valid luxon DateTime`)
    }
    return dbDate(clientOf(row), value)
  },
  consume: (value: unknown, _attribute: string, row: LucidRow) =>
    value ? fromDbDate(clientOf(row), value) : value,
}
