import router from '@adonisjs/core/services/router'
import transmit from '@adonisjs/transmit/services/main'
import payouts from '@svc/adonis-payouts/services/main'

/**
 * The signed webhook route of @svc/adonis-payouts. It reads the raw request bytes: the
 * plugin's provider makes the bodyparser skip it, so start/kernel.ts stays as it is.
 */
await payouts.registerRoutes(router)

/**
 * Transmit channels re-broadcasting payout changes. Each is closed to everybody until its
 * callback says yes: decide here who may watch an owner's (a user's, a tenant's) payouts.
 */
payouts.registerChannels(transmit, {
  // The demo has no login: every visitor watches the demo tenant. A real app checks
  // its user here, e.g. ctx.auth.user?.tenantId === ownerId.
  owner: (_ctx, ownerId) => ownerId === 'demo-tenant',
  payout: () => true,
})