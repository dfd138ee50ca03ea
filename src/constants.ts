/** Prefix of the plugin's tables when `ledger.tablePrefix` is not set. */
export const DEFAULT_TABLE_PREFIX = 'svc_'

/** Path of the webhook route when `webhook.path` is not set. */
export const DEFAULT_WEBHOOK_PATH = '/webhooks/payouts'
