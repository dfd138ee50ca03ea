import app from '@adonisjs/core/services/app'
import type { PayoutsService } from '../src/service/payouts_service.ts'

let payouts: PayoutsService

/** The configured payouts service, for code that does not use dependency injection. */
await app.booted(async () => {
  payouts = await app.container.make('payouts.manager')
})

export { payouts as default }
