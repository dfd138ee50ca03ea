import type { Logger } from '@adonisjs/core/logger'
import type { Database } from '@adonisjs/lucid/database'
import type { PayoutsConfig } from '../define_config.ts'
import debug from '../debug.ts'
import type { BroadcastRelay } from './broadcast_relay.ts'
import {
  relayEnabled,
  type ChannelAuthorizers,
  type ChannelBroadcaster,
  type PayoutsNotifier,
} from './notifier.ts'
import { safeError } from '../safe_error.ts'

/** What the channels need: the config, the notifier that broadcasts, the app's host facts. */
export interface TransmitChannelsOptions {
  config: PayoutsConfig
  notifier: PayoutsNotifier
  logger: Logger
  /** The app's Lucid database; without it (or without the ledger) there is nothing to relay. */
  database?: () => Promise<Database>
  /** Whether the app's Transmit has a transport (Redis): `transmit.relay: 'auto'` reads it. */
  transmitTransport?: () => boolean
  /** Whether this process serves Transmit's subscribers (a web process). */
  servesSubscribers?: () => boolean
}

/**
 * The payout channels on the app's Transmit: authorized by the app's callbacks, fed either
 * by the process that applies each change or, with the relay on (`transmit.relay`), by the
 * `BroadcastRelay` of each web process, which follows the ledger and broadcasts to its own
 * subscribers.
 */
export class TransmitChannels {
  #options: TransmitChannelsOptions
  /** Set by `register` when the relay carries the changes to Transmit. */
  #relayed = false
  /** Set by `serveSubscribers`: this process serves Transmit's subscribers. */
  #servesSubscribers = false
  #relay?: Promise<BroadcastRelay | null>

  constructor(options: TransmitChannelsOptions) {
    this.#options = options
  }

  /**
   * Authorizes the channels and decides who broadcasts (see `PayoutsService.registerChannels`);
   * in a web process with the relay on, the relay starts at once.
   */
  register(transmit: ChannelBroadcaster, authorizers: ChannelAuthorizers = {}) {
    const { config, notifier, transmitTransport, servesSubscribers } = this.#options
    this.#relayed = relayEnabled(config, transmitTransport?.() ?? false)
    debug('transmit channels registered, relay %s', this.#relayed ? 'on' : 'off')
    notifier.registerChannels(transmit, authorizers, { relayed: this.#relayed })
    if (this.#relayed && servesSubscribers?.()) this.#servesSubscribers = true
    void this.#startRelay()
  }

  /** Marks this process as one serving subscribers: the relay starts once channels exist. */
  async serveSubscribers() {
    this.#servesSubscribers = true
    await this.#startRelay()
  }

  async #startRelay() {
    const { config, database, logger, notifier } = this.#options
    if (!this.#servesSubscribers || !this.#relayed || !config.ledger.enabled || !database) return
    this.#relay ??= (async () => {
      const [{ BroadcastRelay }, { configureModels }, { changesChannel }] = await Promise.all([
        import('./broadcast_relay.ts'),
        import('../models/main.ts'),
        import('../database/change_notices.ts'),
      ])
      const { connection, tablePrefix, transactionTimeoutMs } = config.ledger
      configureModels(tablePrefix, connection)
      const relay = new BroadcastRelay({
        // Each account's relay follows its own account's changes (its notifier tells them).
        account: config.account,
        db: await database(),
        connection,
        notifier,
        logger,
        intervalMs: config.transmit.relayIntervalMs,
        // PostgreSQL: the committing process's NOTIFY wakes it (see `CommitNotices`).
        channel: changesChannel(tablePrefix),
        // A transaction cannot stay open longer: past it, a missing id never commits.
        gapWaitMs: transactionTimeoutMs + 5000,
      })
      // Its cursor before anything else: every change committed from now on goes out.
      await relay.readOnce().catch(() => {})
      relay.start()
      return relay
    })().catch((error) => {
      logger.error({ err: safeError(error) }, 'payouts relay not started')
      return null
    })
    await this.#relay
  }

  /** Stops the relay, if it runs. */
  async close() {
    const relay = await this.#relay
    this.#relay = undefined
    await relay?.stop()
  }
}
