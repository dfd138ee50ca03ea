import { test } from '@japa/runner'
import type { EventsList } from '@adonisjs/core/types'
import type {
  PayoutChangedEvent,
  PayoutStuckEvent,
  EscrowEvent,
  WithEventKey,
} from '../../src/types/events.ts'
import type { PayoutsService } from '../../src/service/payouts_service.ts'
import type { PayoutsManager } from '../../src/service/payouts_manager.ts'
import type { ContainerBindings } from '@adonisjs/core/types'
import '../../src/types/extended.ts'

test.group('Types | what host apps rely on', () => {
  test('the payout events are declared in EventsList, each with its key', ({ expectTypeOf }) => {
    type Changed = WithEventKey<PayoutChangedEvent>
    expectTypeOf<EventsList['payouts:created']>().toEqualTypeOf<Changed>()
    expectTypeOf<EventsList['payouts:status_updated']>().toEqualTypeOf<Changed>()
    expectTypeOf<EventsList['payouts:completed']>().toEqualTypeOf<Changed>()
    expectTypeOf<EventsList['payouts:failed']>().toEqualTypeOf<Changed>()
    expectTypeOf<EventsList['payouts:cancelled']>().toEqualTypeOf<Changed>()
    expectTypeOf<EventsList['payouts:escrow_confirmed']>().toEqualTypeOf<
      WithEventKey<EscrowEvent>
    >()
    expectTypeOf<EventsList['payouts:escrow_confirmation_failed']>().toEqualTypeOf<
      WithEventKey<EscrowEvent>
    >()
    expectTypeOf<EventsList['payouts:stuck']>().toEqualTypeOf<WithEventKey<PayoutStuckEvent>>()
    // The dedupe key and the change's id, for correlation, on every change event.
    expectTypeOf<EventsList['payouts:completed']>()
      .toHaveProperty('eventKey')
      .toEqualTypeOf<string>()
    expectTypeOf<EventsList['payouts:completed']>()
      .toHaveProperty('eventId')
      .toEqualTypeOf<string>()
    expectTypeOf<EventsList['payouts:stuck']>().toHaveProperty('eventKey').toEqualTypeOf<string>()
  })

  test("the container binding payouts.manager is the manager: the default account's service, and use() gives any account's", ({
    expectTypeOf,
  }) => {
    expectTypeOf<ContainerBindings['payouts.manager']>().toEqualTypeOf<PayoutsManager>()
    expectTypeOf<ContainerBindings['payouts.manager']>().toExtend<PayoutsService>()
    expectTypeOf<PayoutsManager['use']>().returns.toEqualTypeOf<PayoutsService>()
  })

  test('every app event names its account', ({ expectTypeOf }) => {
    expectTypeOf<EventsList['payouts:completed']>()
      .toHaveProperty('account')
      .toEqualTypeOf<string>()
    expectTypeOf<EventsList['payouts:escrow_confirmed']>()
      .toHaveProperty('account')
      .toEqualTypeOf<string>()
    expectTypeOf<EventsList['payouts:stuck']>().toHaveProperty('account').toEqualTypeOf<string>()
  })

  test('event payloads carry no private fields', ({ expectTypeOf }) => {
    expectTypeOf<PayoutChangedEvent>().not.toHaveProperty('instructions')
    expectTypeOf<PayoutChangedEvent>().toHaveProperty('ownerId')
  })
})
