/** Prefix of the plugin's tables when `ledger.tablePrefix` is not set. */
export const DEFAULT_TABLE_PREFIX = 'svc_'

/** Path of the webhook route when `webhook.path` is not set. */
export const DEFAULT_WEBHOOK_PATH = '/webhooks/payouts'

/** API keys: sk_<env>_ followed by 43 url-safe base64 characters (spec, Authentication 2). */
export const API_KEY_PATTERN = /^sk_(live|test)_[A-Za-z0-9_-]{43}$/

/** The account of a one-account config, and of every row from before accounts existed. */
export const DEFAULT_ACCOUNT = 'main'

/** Account names: they key rows, locks and routes, so short and plain. */
export const ACCOUNT_NAME_PATTERN = /^[a-z][a-z0-9_-]{0,31}$/
