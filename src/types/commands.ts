/**
 * What the operator commands print with `--json`, and the values their `--state` takes, as a
 * script reads them (docs/production.md shows this file). The commands build their output as
 * these types, key by key: a key they print is a key declared here.
 */
/** A value of `payouts:deliveries --state` (default: every state but `processed`). */
export type DeliveryState = 'pending' | 'processing' | 'failed' | 'dead' | 'processed'

/** One delivery stored in this app: `payouts:deliveries --json` prints an array, newest first. */
export interface DeliveryRow {
  /** A webhook's `Svc-Delivery-Id`, or a stream message's hash: what `payouts:replay --id` takes. */
  deliveryId: string
  eventType: string
  source: 'webhook' | 'websocket'
  state: DeliveryState
  attempts: number
  /** The last processing error's message (never an SQL statement), or null. */
  lastError: string | null
  /** ISO 8601, UTC. */
  receivedAt: string
}

/** A value of `payouts:intents --state` (default: `unknown`, `needs_attention`, `refused`). */
export type IntentState =
  'pending' | 'unknown' | 'needs_attention' | 'refused' | 'failed' | 'succeeded'

/**
 * One execution intent: `payouts:intents --json` prints an array, newest first; `--resolve` and
 * `--retry` print the one they settled or re-sent. Never its idempotency key or the answer.
 */
export interface IntentRow {
  /** The listing's id; `--resolve` and `--retry` take it (or `payoutUuid`, or the app's key). */
  id: number
  state: IntentState
  /** `fiat_to_fiat`, `stablecoin_to_fiat`, `onramp`, or `batch` for a chunk of a batch. */
  flow: string
  /** The request's amount, currencies and recipient; null for a chunk of a batch. */
  amount: number | null
  fromCurrency: string | null
  toCurrency: string | null
  recipientId: string | null
  ownerId: string | null
  attempts: number
  /** The payout it made, once known. */
  payoutUuid: string | null
  /** The last error's message, or the operator's resolution; null when neither. */
  note: string | null
  /** ISO 8601, UTC. */
  createdAt: string
  lastAttemptAt: string | null
  /** Whether `--retry` may still re-send it with its key (inside the service's replay window). */
  retryable: boolean
  /** For a chunk of a batch (flow `batch`): its place from 0, the batch's chunks, its rows. */
  batch: { chunk: number; chunks: number; rows: number } | null
  /**
   * For a `needs_attention` intent: the ledger's payouts that could be its lost answer (same
   * recipient, amount and currencies, held by no other intent); null in any other state.
   */
  candidates: IntentCandidate[] | null
}

/** A payout of the ledger that may be what a `needs_attention` intent made. */
export interface IntentCandidate {
  payoutUuid: string
  status: string
  amount: string | null
  fromCurrency: string | null
  toCurrency: string | null
  /** ISO 8601, UTC. */
  createdAt: string
}

/** A batch: what `payouts:intents --batch <key> --json` prints, from the ledger alone. */
export interface IntentsBatch {
  key: string
  /** Every row is created or refused: nothing is left to send, recover or decide. */
  complete: boolean
  /** Rows per outcome (`executeBatch`'s: docs/mass-payouts.md). */
  counts: Record<
    'created' | 'refused' | 'failed' | 'unknown' | 'not_sent' | 'needs_attention',
    number
  >
  chunks: IntentsBatchChunk[]
}

/** One chunk of a batch (never its key). */
export interface IntentsBatchChunk {
  /** The chunk's place in its batch, from 0. */
  chunk: number
  /** Its intent's id, for `--retry` or `--resolve`. */
  intentId: number
  state: IntentState
  attempts: number
  /** Its rows, and what became of them: made, refused by the service, neither yet. */
  rows: number
  created: number
  refused: number
  open: number
  /** The last error's message, or the operator's resolution; null when neither. */
  note: string | null
}
