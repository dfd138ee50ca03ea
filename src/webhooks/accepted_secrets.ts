import type { PayoutsConfig } from '../define_config.ts'
import type { SecretStore } from './secret_store.ts'

/** The part of the config that names the secrets a delivery may be signed with. */
type SecretsConfig = Pick<
  PayoutsConfig['webhook'],
  'secret' | 'previousSecret' | 'previousSecretValidUntil'
>

/**
 * The secrets the webhook route accepts now: the configured current one, the configured
 * previous one until its `previousSecretValidUntil`, the connection's own (the fake's), and
 * the current secret of each subscription stored by payouts:webhooks:create / rotate-secret
 * (never a rotated-out one).
 */
export class AcceptedSecrets {
  constructor(
    private config: SecretsConfig,
    /** Secrets besides the configured and stored ones (`payouts.fake()`'s). */
    private extra: readonly string[],
    /** The stored subscriptions' secrets; null without a ledger or without APP_KEY. */
    private store: Pick<SecretStore, 'activeSecrets'> | null
  ) {}

  /**
   * The list, current ones first. `maxAgeMs`: the stored secrets are read again unless read
   * within this time (the route asks so when no cached secret matches a signature).
   */
  async list(now = Date.now(), options: { maxAgeMs?: number } = {}): Promise<string[]> {
    const { secret, previousSecret, previousSecretValidUntil } = this.config
    const secrets = secret ? [secret] : []
    secrets.push(...this.extra)
    if (previousSecret && previousSecretValidUntil && Date.parse(previousSecretValidUntil) > now) {
      secrets.push(previousSecret)
    }
    if (this.store) secrets.push(...(await this.store.activeSecrets(options)))
    return secrets
  }
}
