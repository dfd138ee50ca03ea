import type { PayoutsManager } from '../service/payouts_manager.ts'
import type { PayoutsEventsList } from './events.ts'

declare module '@adonisjs/core/types' {
  interface ContainerBindings {
    'payouts.manager': PayoutsManager
  }
  interface EventsList extends PayoutsEventsList {}
}
