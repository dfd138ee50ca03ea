import { createHash } from 'node:crypto'
import debug from '../debug.ts'
import { parseJsonBytes } from '../schemas/events.ts'
import { channels, traced } from '../tracing/channels.ts'
import type { InboxProcessor } from '../webhooks/inbox_processor.ts'
import type { InboxStore } from '../webhooks/inbox_store.ts'
import { tellStored, type DeliveryListener } from '../webhooks/webhook_received.ts'
import type { StreamMessageHandler } from './payouts_stream.ts'

/**
 * The WebSocket's way into the ledger: a message goes into the same inbox as webhooks,
 * keyed by a hash of its bytes (a message seen twice is stored once), then `processor` is
 * kicked (the inbox processor, or the worker's loop waking up). A message stored (not one
 * seen before) is told to `deliveries` (`payouts:webhook_received`, source `websocket`),
 * not awaited.
 */
export function streamToInbox(
  inbox: Pick<InboxStore, 'insert'>,
  processor: Pick<InboxProcessor, 'kick'>,
  deliveries: DeliveryListener
): StreamMessageHandler {
  return async (raw) => {
    let type = 'unknown'
    try {
      type = String((parseJsonBytes(raw) as { type?: unknown } | null)?.type ?? 'unknown').slice(
        0,
        100
      )
    } catch {}
    const deliveryId = `ws_${createHash('sha256').update(raw).digest('hex')}`
    await traced(
      channels.streamMessage,
      () => ({ type, deliveryId }),
      async (trace) => {
        const outcome = await inbox.insert({
          deliveryId,
          eventType: type,
          rawBody: raw,
          signatureHeader: null,
          source: 'websocket',
        })
        if (trace) trace.outcome = outcome
        debug('stream message %s (%s) %s', deliveryId.slice(0, 15), type, outcome)
        if (outcome === 'stored') void tellStored(deliveries, raw, deliveryId, 'websocket')
      }
    )
    processor.kick()
  }
}
