import { test } from '@japa/runner'
import type { EventsList } from '@adonisjs/core/types'
import type { PayoutChangedEvent, PayoutStuckEvent, EscrowEvent } from '../../src/types/events.ts'
import type { PayoutsService } from '../../src/service/payouts_service.ts'
import type { ContainerBindings } from '@adonisjs/core/types'
import '../../src/types/extended.ts'

test.group('Types | what host apps rely on', () => {
  test('the payout events are declared in EventsList', ({ expectTypeOf }) => {
    expectTypeOf<EventsList['payouts:created']>().toEqualTypeOf<PayoutChangedEvent>()
    expectTypeOf<EventsList['payouts:status_updated']>().toEqualTypeOf<PayoutChangedEvent>()
    expectTypeOf<EventsList['payouts:completed']>().toEqualTypeOf<PayoutChangedEvent>()
    expectTypeOf<EventsList['payouts:failed']>().toEqualTypeOf<PayoutChangedEvent>()
    expectTypeOf<EventsList['payouts:cancelled']>().toEqualTypeOf<PayoutChangedEvent>()
    expectTypeOf<EventsList['payouts:escrow_confirmed']>().toEqualTypeOf<EscrowEvent>()
    expectTypeOf<EventsList['payouts:stuck']>().toEqualTypeOf<PayoutStuckEvent>()
  })

  test('the container binding payouts.manager is the service', ({ expectTypeOf }) => {
    expectTypeOf<ContainerBindings['payouts.manager']>().toEqualTypeOf<PayoutsService>()
  })

  test('event payloads carry no private fields', ({ expectTypeOf }) => {
    expectTypeOf<PayoutChangedEvent>().not.toHaveProperty('instructions')
    expectTypeOf<PayoutChangedEvent>().toHaveProperty('ownerId')
  })
})
