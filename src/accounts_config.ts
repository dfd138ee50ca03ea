import { ACCOUNT_NAME_PATTERN, DEFAULT_ACCOUNT, DEFAULT_WEBHOOK_PATH } from './constants.ts'
import { validateConfig, type PayoutsConfig, type PayoutsConfigInput } from './define_config.ts'
import { E_PAYOUTS_INVALID_CONFIG } from './errors.ts'

/** What only one account may set: the others share the app's ledger and Transmit channels. */
const SHARED_ONLY = ['ledger', 'transmit'] as const

/** One account's settings inside `accounts`: over the shared ones, key by key. */
export type PayoutsAccountInput = Omit<
  Partial<PayoutsConfigInput>,
  'account' | (typeof SHARED_ONLY)[number]
>

/**
 * Several accounts (docs/accounts.md): `accounts` by name, the `default` one (what
 * `payouts.execute()` uses), and, beside them, the settings every account shares.
 */
export type PayoutsAccountsInput = Omit<Partial<PayoutsConfigInput>, 'account'> & {
  default?: string
  accounts: Record<string, PayoutsAccountInput>
}

/** `config/payouts.ts`: one account's settings (a one-account app), or several accounts. */
export type PayoutsManagerConfigInput = PayoutsConfigInput | PayoutsAccountsInput

/** Every account's validated config, by name, and the default account's name. */
export interface PayoutsManagerConfig {
  default: string
  accounts: Record<string, PayoutsConfig>
}

const invalid = (reason: string) => new E_PAYOUTS_INVALID_CONFIG([reason])

/**
 * Validates `config/payouts.ts` as a whole. A one-account config is the account `main` (it
 * names no account: its rows from before are `main`'s). With `accounts`, each account's
 * settings go over the shared ones (section by section); `main`'s webhook path (a lone
 * account's) defaults to `webhook.path` and every other's to it plus `/<name>`; two accounts
 * on one path, one API key or one webhook secret are refused. A wrong value is named where it was written: under its
 * account (`accounts.eu.apiKey`) or shared (`timeoutMs`). Values are never shown.
 */
export function validateManagerConfig(input: PayoutsManagerConfigInput): PayoutsManagerConfig {
  const given = input as Record<string, unknown>
  if (!isPlainObject(given) || given.accounts === undefined) {
    if (isPlainObject(given) && given.account !== undefined) {
      throw invalid('account is set by the names of `accounts` (docs/accounts.md)')
    }
    const config = validateConfig(input as PayoutsConfigInput)
    return { default: config.account, accounts: { [config.account]: config } }
  }
  const { default: defaultName, accounts: named, ...shared } = input as PayoutsAccountsInput
  if ('account' in shared) throw invalid('account is set by the names of `accounts`')
  if (!isPlainObject(named) || Object.keys(named).length === 0) {
    throw invalid('accounts must name at least one account')
  }
  const names = Object.keys(named)
  const chosen = defaultName ?? (names.length === 1 ? names[0] : undefined)
  if (chosen === undefined) throw invalid('default must name one of accounts')
  if (!names.includes(chosen)) {
    throw invalid(`default "${String(chosen)}" is not one of accounts (${names.join(', ')})`)
  }
  const sharedPath = (shared.webhook as { path?: string } | undefined)?.path ?? DEFAULT_WEBHOOK_PATH
  const accounts: Record<string, PayoutsConfig> = {}
  for (const name of names) {
    // `main` (or a lone account) keeps the path; the others add their name. Never by
    // `default`: changing the default must not move an account's subscriptions' route.
    const keeps = name === DEFAULT_ACCOUNT || names.length === 1
    accounts[name] = validateAccount(name, named[name], shared, {
      path: keeps ? sharedPath : `${sharedPath.replace(/\/+$/, '')}/${name}`,
    })
  }
  refuseShared(accounts, (config) => config.webhook.path, 'webhook.path', 'path')
  refuseShared(accounts, (config) => config.apiKey, 'apiKey', 'API key')
  // A route accepts its own account's secrets only: one secret shared by two accounts would
  // let a delivery signed for one be applied as the other's.
  const secrets = (config: PayoutsConfig) =>
    [config.webhook.secret, config.webhook.previousSecret].filter((value) => value !== undefined)
  refuseShared(accounts, secrets, 'webhook.secret', 'webhook secret')
  return { default: chosen, accounts }
}

/** One account's config: its own settings over the shared ones, its path by default. */
function validateAccount(
  name: string,
  own: unknown,
  shared: Record<string, any>,
  defaults: { path: string }
): PayoutsConfig {
  if (!ACCOUNT_NAME_PATTERN.test(name)) {
    throw invalid(`accounts.${name} must be a-z, 0-9, _ or -, starting with a letter (at most 32)`)
  }
  if (!isPlainObject(own)) throw invalid(`accounts.${name} must be an object`)
  const sharedOnly = SHARED_ONLY.find((key) => key in own)
  if (sharedOnly) throw invalid(`accounts.${name}.${sharedOnly} is shared: set it beside accounts`)
  const merged = mergeSettings(shared, own) as PayoutsConfigInput
  merged.webhook = { ...merged.webhook, path: own.webhook?.path ?? defaults.path }
  merged.account = name
  return validateConfig(merged, (path) =>
    hasPath(own, path) || !hasPath(shared, path)
      ? `accounts.${name}.${path.join('.')}`
      : path.join('.')
  )
}

/**
 * Two accounts with one value of `read` (a route, a key, a secret) are refused, naming both
 * accounts, never the value; a value set beside `accounts` is every account's, so give each
 * its own.
 */
function refuseShared(
  accounts: Record<string, PayoutsConfig>,
  read: (config: PayoutsConfig) => string | undefined | string[],
  key: string,
  what: string
) {
  const seen = new Map<string, string>()
  for (const [name, config] of Object.entries(accounts)) {
    const found = read(config)
    for (const value of Array.isArray(found) ? found : found === undefined ? [] : [found]) {
      const taken = seen.get(value)
      if (taken && taken !== name) {
        throw invalid(
          `accounts.${name}.${key} is the ${what} of accounts.${taken}: give each account its own`
        )
      }
      seen.set(value, name)
    }
  }
}

/** An object literal: a section of the config, never a value such as a `Secret`. */
function isPlainObject(value: unknown): value is Record<string, any> {
  if (typeof value !== 'object' || value === null) return false
  const prototype = Object.getPrototypeOf(value)
  return prototype === Object.prototype || prototype === null
}

function hasPath(target: unknown, path: PropertyKey[]): boolean {
  let node: unknown = target
  for (const key of path) {
    if (!isPlainObject(node) || !(key in node)) return false
    node = node[key as string]
  }
  return true
}

/** The shared settings with an account's own over them: sections merged key by key. */
function mergeSettings(shared: Record<string, any>, own: Record<string, any>) {
  const merged: Record<string, any> = { ...shared }
  for (const [key, value] of Object.entries(own)) {
    merged[key] =
      isPlainObject(value) && isPlainObject(shared[key]) ? mergeSettings(shared[key], value) : value
  }
  return merged
}
