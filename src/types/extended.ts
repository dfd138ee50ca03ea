import type { PayoutsService } from '../service/payouts_service.ts'
import type { PayoutsEventsList } from './events.ts'

declare module '@adonisjs/core/types' {
  interface ContainerBindings {
    'payouts.manager': PayoutsService
  }
  interface EventsList extends PayoutsEventsList {}
}
