import { DEFAULT_ACCOUNT } from '../constants.ts'
import type { PayoutChange } from '../ledger/vocabulary.ts'
import type { PayoutsEventsList, WithEventKey } from '../types/events.ts'

/** The name of one of the plugin's app events. */
export type PayoutsEventName = keyof PayoutsEventsList

/** An app event's payload before its account and key are set. */
export type PayoutsEventPayload<Name extends PayoutsEventName> = Omit<
  PayoutsEventsList[Name],
  'eventKey' | 'account'
>

/** The events that tell a payout's change, each with the same payload. */
export type ChangeEventName =
  | 'payouts:created'
  | 'payouts:status_updated'
  | 'payouts:completed'
  | 'payouts:failed'
  | 'payouts:cancelled'

/** The app events one committed change fires, in the order they fire. */
export function changeEventNames(change: PayoutChange): ChangeEventName[] {
  const { status } = change.current
  const names: ChangeEventName[] = []
  if (change.created) names.push('payouts:created')
  if (!change.created || status !== 'pending') names.push('payouts:status_updated')
  if (status !== change.previous?.status) {
    if (status === 'completed') names.push('payouts:completed')
    if (status === 'failed') names.push('payouts:failed')
    if (status === 'cancelled') names.push('payouts:cancelled')
  }
  return names
}

/**
 * What names one event among those of its name, built only from what a re-emission after a
 * crash carries again. A change's events share its eventId and differ by name; an escrow
 * confirmation is one per quote, a failed one per quote and transaction; a payout is reported
 * stuck once; a stored delivery is told once. A record, so an event added to the list without a rule fails to compile.
 */
const SUBJECTS: { [Name in PayoutsEventName]: (payload: PayoutsEventPayload<Name>) => string } = {
  'payouts:created': (event) => event.eventId,
  'payouts:status_updated': (event) => event.eventId,
  'payouts:completed': (event) => event.eventId,
  'payouts:failed': (event) => event.eventId,
  'payouts:cancelled': (event) => event.eventId,
  'payouts:escrow_confirmed': (event) => event.quoteId,
  'payouts:escrow_confirmation_failed': (event) => `${event.quoteId}:${event.txHash ?? ''}`,
  'payouts:stuck': (event) => event.payoutId,
  // Unique within its account, and fired once: a redelivery of a stored id fires nothing.
  'payouts:webhook_received': (event) => event.deliveryId,
}

/**
 * The key of one app event: unique per event fired, the same when it fires again. A quote or
 * payout id is the service's, unique within its account: an account other than `main` puts
 * its name in front (`eu/<quoteId>:...`); `main`'s keys are those of a one-account app, so an
 * upgraded app's listeners see the same keys again.
 */
export function eventKeyOf<Name extends PayoutsEventName>(
  name: Name,
  payload: PayoutsEventPayload<Name>,
  account: string = DEFAULT_ACCOUNT
): string {
  const subject: (payload: PayoutsEventPayload<Name>) => string = SUBJECTS[name]
  const scope = account === DEFAULT_ACCOUNT ? '' : `${account}/`
  return `${scope}${subject(payload)}:${name}`
}

/** The payload a listener receives: the event's fields, its account and its key. */
export function withEventKey<Name extends PayoutsEventName>(
  name: Name,
  payload: PayoutsEventPayload<Name>,
  account: string = DEFAULT_ACCOUNT
): WithEventKey<PayoutsEventPayload<Name>> {
  return { ...payload, account, eventKey: eventKeyOf(name, payload, account) }
}
