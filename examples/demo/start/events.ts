import emitter from '@adonisjs/core/services/emitter'

const RecordPayoutActivity = () => import('#listeners/record_payout_activity')

/** The app's listeners of the plugin's events (every event: the plugin's README). */
emitter.on('payouts:completed', [RecordPayoutActivity, 'handle'])
emitter.on('payouts:failed', [RecordPayoutActivity, 'handle'])
