import app from '@adonisjs/core/services/app'
import type { PayoutsManager } from '../src/service/payouts_manager.ts'

let payouts: PayoutsManager

/**
 * The app's payouts (the default account's service; `payouts.use('eu')` another's), for code
 * that does not use dependency injection.
 */
await app.booted(async () => {
  payouts = await app.container.make('payouts.manager')
})

export { payouts as default }
