/**
 * What of an error the plugin may log or put into a message of its own. A database error
 * carries the statement it failed on: knex writes the SQL with its values into the message
 * (`insert into ... values ('<raw webhook body>', 't=..,v1=<signature>') - SQLITE_BUSY`),
 * mysql2 adds `sql` and `sqlMessage` (`Duplicate entry '<idempotency key>'`), pg adds `detail`
 * (`Key (x)=(<value>) already exists`); a logger's error serializer prints every one of those
 * fields. So the plugin logs `{ err: safeError(error) }`, never the error itself: a database
 * error by its class and code alone, any other error by its class, code, message and stack.
 */

/** The loggable part of an error (pino prints it as it prints an error: `type`, `message`, `stack`). */
export interface SafeError {
  type: string
  message: string
  code?: string
  stack?: string
}

/** A statement knex put at the front of a message, before ` - ` and the driver's message. */
const KNEX_STATEMENT =
  /^\s*(?:insert|update|delete|select|with|begin|commit|rollback|savepoint|release|pragma|create|alter|drop|set|lock|show|truncate)\b[\s\S]* - /i

/** Whether the error comes from the database driver or from knex around it. */
export function isDatabaseError(error: unknown): boolean {
  if (!error || typeof error !== 'object') return false
  const fields = error as Record<string, unknown>
  if ('sql' in fields || 'sqlMessage' in fields || 'sqlState' in fields) return true
  // pg's DatabaseError: a severity and the server's routine.
  if ('severity' in fields && 'routine' in fields) return true
  if (typeof fields.code === 'string' && /^SQLITE_/.test(fields.code)) return true
  return typeof fields.message === 'string' && KNEX_STATEMENT.test(fields.message)
}

/** The error as the plugin may log it; see the module's comment. */
export function safeError(error: unknown): SafeError {
  if (!error || typeof error !== 'object') {
    return { type: typeof error, message: 'a value was thrown that is not an error' }
  }
  const fields = error as { name?: unknown; code?: unknown; message?: unknown; stack?: unknown }
  const type = typeof fields.name === 'string' && fields.name ? fields.name : 'Error'
  const code =
    typeof fields.code === 'string' || typeof fields.code === 'number'
      ? String(fields.code)
      : undefined
  if (isDatabaseError(error)) {
    return { type, message: `database error${code ? ` ${code}` : ''}`, ...(code ? { code } : {}) }
  }
  return {
    type,
    message: typeof fields.message === 'string' ? fields.message : String(error),
    ...(code ? { code } : {}),
    ...(typeof fields.stack === 'string' ? { stack: fields.stack } : {}),
  }
}

/**
 * What an error of the plugin may carry as its `cause`: the error itself, or for a database
 * error one that says only its class and code (a logger prints a cause's message and stack
 * with the error's).
 */
export function safeCause(error: unknown): unknown {
  if (!isDatabaseError(error)) return error
  const safe = safeError(error)
  return Object.assign(new Error(safe.message), { name: safe.type, code: safe.code })
}
