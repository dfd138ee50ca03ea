import type { EventsList } from '@adonisjs/core/types'

type Finished = EventsList['payouts:completed'] | EventsList['payouts:failed']

/** One line of the owner's activity feed. */
export interface Activity {
  payoutId: string
  ownerId: string | null
  status: string
  at: string
}

/**
 * The demo's listener of finished payouts. A real app would e-mail the owner or credit an
 * order here; the demo keeps the last 50 in memory, for GET /api/activity. A change is heard
 * once (the plugin fires each app event once per change, duplicates and replays included).
 */
export default class RecordPayoutActivity {
  static recent: Activity[] = []

  handle(event: Finished) {
    RecordPayoutActivity.recent.unshift({
      payoutId: event.payoutId,
      ownerId: event.ownerId ?? null,
      status: event.status,
      at: new Date().toISOString(),
    })
    RecordPayoutActivity.recent.length = Math.min(RecordPayoutActivity.recent.length, 50)
  }
}
