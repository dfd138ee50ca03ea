/** Prefix of the plugin's tables when `ledger.tablePrefix` is not set. */
export const DEFAULT_TABLE_PREFIX = 'svc_'

/** Path of the webhook route when `webhook.path` is not set. */
export const DEFAULT_WEBHOOK_PATH = '/webhooks/payouts'

/** API keys: sk_<env>_ followed by 43 url-safe base64 characters (spec, Authentication 2). */
export const API_KEY_PATTERN = /^sk_(live|test)_[A-Za-z0-9_-]{43}$/
