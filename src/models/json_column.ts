/** JSON stored as text, so SQLite, PostgreSQL and MySQL behave the same. */
export const jsonColumn = {
  prepare: (value: unknown) =>
    value === null || value === undefined
      ? null
      : JSON.stringify(value, (_key, v) => (typeof v === 'bigint' ? v.toString() : v)),
  consume: (value: unknown) => {
    if (value === null || value === undefined) return null
    if (typeof value !== 'string') return value
    try {
      return JSON.parse(value)
    } catch {
      return null
    }
  },
}
