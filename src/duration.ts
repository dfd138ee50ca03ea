import string from '@adonisjs/core/helpers/string'

/**
 * A duration as the config and the commands take it: a number of milliseconds, or a string
 * such as `'10s'`, `'2h'` or `'500ms'`.
 */
export type Duration = number | string

/** What a duration is, for an error that refuses one (never the value itself). */
export const DURATION_FORM = 'milliseconds, or a duration such as "10s", "2h" or "500ms"'

/**
 * The milliseconds of a duration, read as AdonisJS reads them (`string.milliseconds.parse`):
 * a number as it is, a string of digits as milliseconds, `'10s'`, `'2 hours'`, ... and a zero
 * of any unit (`'0'`, `'0s'`), which that parser refuses. Undefined for anything else.
 */
export function toMilliseconds(value: unknown): number | undefined {
  if (typeof value === 'number') return value
  if (typeof value !== 'string') return undefined
  const zero = /^0+(?:\.0+)?(\s*[a-z]*)$/i.exec(value)
  try {
    // The unit of a zero is checked as the parser checks one of 1.
    if (zero) return string.milliseconds.parse(`1${zero[1]}`) && 0
    return string.milliseconds.parse(value)
  } catch {
    return undefined
  }
}

/**
 * A duration flag of a command (`--older-than-ms=2h`) read into milliseconds, or why it is
 * refused: a value that is no duration, or one outside `[min, max]` whole milliseconds (timers:
 * at most 2^31 - 1, which `setTimeout` would otherwise run as 1 ms). Absent, it is undefined.
 */
export function durationFlag(
  flag: string,
  value: unknown,
  min: number,
  max: number
): { ms?: number; refused?: string } {
  if (value === undefined) return {}
  const ms = toMilliseconds(value)
  if (ms !== undefined && Number.isInteger(ms) && ms >= min && ms <= max) return { ms }
  return {
    refused: `--${flag} must be a whole number from ${min} to ${max}, not "${String(value)}" (${DURATION_FORM}). Nothing done`,
  }
}
