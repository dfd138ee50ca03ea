/** The first value of a header that may repeat. */
function firstValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value
}

/** A header holding a non-negative integer, or null. */
export function integerHeader(value: string | string[] | undefined): number | null {
  const header = firstValue(value)
  return header !== undefined && /^\s*\d+\s*$/.test(header) ? Number(header) : null
}

/** The three forms of an HTTP date (RFC 9110): each names the day, each has a time. */
const HTTP_DATE = /^[A-Za-z]{3,9},? .*\d{1,2}:\d{2}:\d{2}/

/**
 * Retry-After in seconds: delay-seconds (an integer, or a decimal as some services send)
 * or an HTTP date, read against `now` (the answer's Date when it has one). Null when it is
 * missing, negative, unparsable or a date not ahead of `now`: the caller then backs off.
 */
export function parseRetryAfter(
  value: string | string[] | undefined,
  now = Date.now()
): number | null {
  const header = firstValue(value)?.trim()
  if (!header) return null
  if (/^\d+(?:\.\d+)?$/.test(header)) return Number(header)
  if (!HTTP_DATE.test(header)) return null
  // asctime carries no zone; every HTTP date is GMT.
  const date = Date.parse(/ (?:GMT|UTC)$/i.test(header) ? header : `${header} GMT`)
  if (Number.isNaN(date) || date <= now) return null
  return (date - now) / 1000
}
