import type { Logger } from '@adonisjs/core/logger'
import type { EmitterService, EventsList } from '@adonisjs/core/types'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import { isDeadlineError, withDeadline } from '../time_bounds.ts'
import { channels as tracing, traced } from '../tracing/channels.ts'
import type { PayoutsConfig } from '../define_config.ts'
import type { ChangeListener } from '../ledger/payout_outbox.ts'
import { toChangedEvent, type PayoutChange } from '../ledger/vocabulary.ts'
import type {
  EscrowEvent,
  PayoutChangedEvent,
  WebhookReceivedEvent,
  WebhookType,
  WithEventKey,
} from '../types/events.ts'
import type { DeliveryListener } from '../webhooks/webhook_received.ts'
import {
  changeEventNames,
  withEventKey,
  type PayoutsEventName,
  type PayoutsEventPayload,
} from './app_events.ts'
import { safeError } from '../safe_error.ts'

/** The part of Transmit the service uses (structural, so Transmit stays optional). */
export interface ChannelBroadcaster<Ctx = any> {
  authorize<Params extends Record<string, string>>(
    channel: string,
    callback: (ctx: Ctx, params: Params) => boolean | Promise<boolean>
  ): void
  broadcast(channel: string, payload?: any): void
  /**
   * To this process's subscribers only, but those of `senderUid` (Transmit's, with `[]`: all
   * of them): never through the transport. The relay's broadcasts go out this way.
   */
  broadcastExcept?(channel: string, payload: any, senderUid: string | string[]): void
}

/** Host-app callbacks deciding who may listen; a missing one denies everybody. */
export interface ChannelAuthorizers<Ctx = any> {
  payout?: (ctx: Ctx, payoutId: string) => boolean | Promise<boolean>
  owner?: (ctx: Ctx, ownerId: string) => boolean | Promise<boolean>
}

/**
 * Whether changes reach Transmit through the relay (`BroadcastRelay` in each web process)
 * rather than from the process that applies them: `transmit.relay`, where `auto` is the
 * relay in worker mode unless Transmit has a transport (Redis carries the worker's broadcasts
 * to every instance then).
 */
export function relayEnabled(
  config: Pick<PayoutsConfig, 'transmit' | 'webhook'>,
  hasTransport: boolean
): boolean {
  const { relay } = config.transmit
  if (relay !== 'auto') return relay
  return config.webhook.processing === 'worker' && !hasTransport
}

/** What the notifier needs: the config's event and channel settings, a logger, the emitter. */
export interface PayoutsNotifierOptions {
  config: Pick<PayoutsConfig, 'events' | 'transmit'> & Partial<Pick<PayoutsConfig, 'account'>>
  logger: Logger
  emitter?: EmitterService
}

/**
 * What the host app hears of committed work: typed app events on its emitter and the
 * public fields of each change on Transmit. Everything here runs after COMMIT; each event
 * and each channel's broadcast is attempted on its own, and a failure is logged, never
 * thrown back at the work that committed.
 */
export class PayoutsNotifier implements ChangeListener, DeliveryListener {
  #options: PayoutsNotifierOptions
  #transmit?: ChannelBroadcaster
  /** The relay broadcasts every change (`transmit.relay`): this process does not do it directly. */
  #relayed = false

  constructor(options: PayoutsNotifierOptions) {
    this.#options = options
  }

  /** The account whose changes this notifier tells: on every event and broadcast. */
  get #account(): string {
    return this.#options.config.account ?? DEFAULT_ACCOUNT
  }

  /**
   * One app event, with its key. Its listeners' failure is logged and goes no further: the
   * work it reports is committed (neither undone nor repeated), and the events and broadcasts
   * after it are still attempted. AdonisJS's emitter starts every listener of the event, so a
   * throwing one stops neither the others nor this event's later ones. Resolves false when
   * a listener failed or timed out.
   */
  async emit<Name extends PayoutsEventName>(
    name: Name,
    payload: PayoutsEventPayload<Name>
  ): Promise<boolean> {
    const { emitter, logger, config } = this.#options
    const data = withEventKey(name, payload, this.#account)
    try {
      const emitting = emitter?.emit(name, data as EventsList[Name])
      if (emitting) {
        await withDeadline(emitting, config.events.listenerTimeoutMs, `listeners of ${name}`)
      }
      return true
    } catch (error) {
      logger.error(
        {
          err: safeError(error),
          event: name,
          eventKey: data.eventKey,
          timedOut: isDeadlineError(error),
        },
        'payouts listener failed'
      )
      return false
    }
  }

  /**
   * A delivery stored (the route's once answered, the stream's): `payouts:webhook_received`,
   * its listeners bounded and isolated as every event's. Never rejects.
   */
  async onDelivery(event: WebhookReceivedEvent): Promise<void> {
    await this.emit('payouts:webhook_received', event)
  }

  /**
   * Listens to `payouts:webhook_received` for one delivery type of this account, its `data`
   * typed by `PayoutsWebhookTypes`. Answers the function that stops listening.
   */
  onWebhook<Type extends WebhookType>(
    type: Type,
    handler: (event: WithEventKey<WebhookReceivedEvent<Type>>) => void | Promise<void>
  ): () => void {
    const { emitter } = this.#options
    if (!emitter) throw new Error('payouts.onWebhook needs the app emitter')
    return emitter.on('payouts:webhook_received', (event) => {
      if (event.type !== type || event.account !== this.#account) return
      return handler(event as WithEventKey<WebhookReceivedEvent<Type>>)
    })
  }

  /**
   * A committed change (the ledger's outbox tells it): the escrow deposit it showed first
   * (the payout moved because the service had it), then the change's app events in order,
   * then its broadcasts.
   */
  onChange(change: PayoutChange, deposit: EscrowEvent | null): Promise<void> {
    const event = toChangedEvent(change)
    const names = changeEventNames(change)
    return traced(
      tracing.notify,
      () => ({
        payoutId: event.payoutId,
        eventId: event.eventId,
        events: names,
        eventKeys: names.map((name) => withEventKey(name, event, this.#account).eventKey),
        status: event.status,
        step: event.step,
        previousStatus: change.previous?.status ?? null,
      }),
      async (trace) => {
        let failures = 0
        if (deposit && !(await this.emit('payouts:escrow_confirmed', deposit))) failures++
        for (const name of names) if (!(await this.emit(name, event))) failures++
        if (!this.#relayed) this.broadcast(event)
        if (trace) trace.listenerFailures = failures
      }
    )
  }

  /**
   * A payout that just got its owner: the owner's listeners missed its changes so far, so
   * its current position goes out on the owner's channel once (no app event: those fired).
   */
  onOwnerAttached(change: PayoutChange) {
    if (!this.#relayed) this.broadcast(toChangedEvent(change), { ownerOnly: true })
  }

  /**
   * Authorizes the payout channels on Transmit and starts re-broadcasting every applied
   * change there. Without a callback for a channel, nobody may listen to it. `relayed`: the
   * changes reach the channels through the relay (`BroadcastRelay`), not from here.
   */
  registerChannels(
    transmit: ChannelBroadcaster,
    authorizers: ChannelAuthorizers = {},
    options: { relayed?: boolean } = {}
  ) {
    const { payoutChannel, ownerChannel } = this.#options.config.transmit
    transmit.authorize<{ payoutId: string }>(payoutChannel, (ctx, params) =>
      authorizers.payout ? authorizers.payout(ctx, params.payoutId) : false
    )
    transmit.authorize<{ ownerId: string }>(ownerChannel, (ctx, params) =>
      authorizers.owner ? authorizers.owner(ctx, params.ownerId) : false
    )
    this.#transmit = transmit
    this.#relayed = options.relayed ?? false
  }

  /**
   * Public fields only, on the payout's channel and its owner's (`ownerOnly`: the owner's);
   * each channel attempted. The one place a change becomes a broadcast, direct or relayed.
   * `local`: to this process's subscribers only, not through Transmit's transport (the relay
   * of every web process sends each change to its own subscribers: Redis would repeat it).
   */
  broadcast(event: PayoutChangedEvent, options: { ownerOnly?: boolean; local?: boolean } = {}) {
    if (!this.#transmit) return
    const { payoutChannel, ownerChannel } = this.#options.config.transmit
    const payload = { account: this.#account, ...JSON.parse(JSON.stringify(event)) }
    const channels = [
      ...(options.ownerOnly ? [] : [payoutChannel.replace(':payoutId', event.payoutId)]),
      ...(event.ownerId ? [ownerChannel.replace(':ownerId', event.ownerId)] : []),
    ]
    for (const channel of channels) {
      try {
        if (options.local && this.#transmit.broadcastExcept) {
          this.#transmit.broadcastExcept(channel, payload, [])
        } else {
          this.#transmit.broadcast(channel, payload)
        }
      } catch (error) {
        this.#options.logger.error(
          { err: safeError(error), channel, eventId: event.eventId },
          'payouts broadcast failed'
        )
      }
    }
  }
}
