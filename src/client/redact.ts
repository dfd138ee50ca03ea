/** What replaces the credentials of a URL wherever the plugin shows one. */
export const REDACTED_CREDENTIALS = '[redacted]'

/** `scheme://` followed by user info (everything up to the last `@` of the authority). */
const CREDENTIALS = /\b([a-z][a-z0-9+.-]*:\/\/)[^\s/?#@]*(?:@[^\s/?#@]*)*@/gi

/**
 * Hides the credentials of every URL in `text` (a URL, or a message naming some):
 * `https://user:pw@host/x` becomes `https://[redacted]@host/x`. Used by everything that
 * shows a URL (the health report, the commands, the client's and the config's own views),
 * so a password in `baseUrl`, `events.websocketUrl` or `jobs.redis` never reaches a log.
 */
export function redactCredentials<T extends string | undefined>(text: T): T {
  if (!text) return text
  return text
    .replace(CREDENTIALS, `$1${REDACTED_CREDENTIALS}@`)
    .replace(SECRET_PARAMS, `$1${REDACTED_CREDENTIALS}`) as T
}

/**
 * A query parameter that carries a credential (`?password=`, which ioredis reads, `&token=`,
 * `access_token`, `auth`, `secret`, `key`, `api_key`, `sig`...): its value up to the next `&`,
 * `#` or space.
 */
const SECRET_PARAMS =
  /([?&](?:[a-z0-9_.-]*(?:password|passwd|pwd|token|secret|auth|key|sig|signature|credential)[a-z0-9_.-]*)=)[^&#\s]*/gi
