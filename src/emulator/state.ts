import { createHash, createHmac, randomBytes, randomUUID } from 'node:crypto'
import type { PayoutStatus, PayoutStep, ExecuteFlow } from '../schemas/common.ts'
import { SCOPES, type Scope } from '../contract/endpoints.ts'
import type { EmulatorClock } from './clock.ts'

export type { Scope } from '../contract/endpoints.ts'

/** Every scope a key can hold; new keys get them all unless told otherwise. */
export const ALL_SCOPES = SCOPES

/** The account the emulator's default key belongs to. */
export const DEFAULT_ACCOUNT = 'acct_default'

export interface ApiKeyRecord {
  key: string
  accountId: string
  scopes: Set<Scope>
  revoked: boolean
  /** Set on rotation: the old key keeps working until then (7 days). */
  expiresAt: number | null
}

export interface PaymentMethodRecord {
  id: string
  type: string
  currency: string
  rail?: string
}

export interface RecipientRecord {
  id: string
  accountId: string
  name: string
  email?: string
  country?: string
  currency?: string
  type: string
  paymentMethods: PaymentMethodRecord[]
  metadata?: Record<string, string>
  createdAt: string
  updatedAt: string
}

export interface QuoteRecord {
  quoteId: string
  accountId: string
  flow: ExecuteFlow
  status: string
  payoutId: string
  escrowAddress?: string
  depositAmountAtomic?: bigint
  chainId?: number
  tokenAddress?: string
  txHash?: string
}

export interface PayoutRecord {
  payoutId: string
  readId: string
  accountId: string
  quoteId: string
  flow: ExecuteFlow
  status: PayoutStatus
  step: PayoutStep
  sourceAmount: number
  sourceCurrency: string
  payoutAmount: number
  payoutCurrency: string
  recipientId: string
  paymentMethod: string
  paymentPurpose?: string
  reference?: string
  createdAt: string
  completedAt?: string
  idempotencyKey?: string
  /** Made by an execute-batch request: that request's Idempotency-Key, and the row it was. */
  batchKey?: string
  batchIndex?: number
  /** Why a failed payout failed, as its running leg's providerMetadata status. */
  failureStatus?: string
}

export interface OnChainTx {
  txHash: string
  to: string
  amountAtomic: bigint
  chainId: number
  confirmedAt: number
}

/**
 * An execute-batch request the emulator processed (a replay under its key is not another
 * one): its key, and per row the payout made or the code it was refused with.
 */
export interface BatchRecord {
  accountId: string
  idempotencyKey?: string
  rows: Array<{ index: number; payoutId: string } | { index: number; code: string }>
  at: string
}

/** Per-account idempotency record (24 h on the emulated clock). */
export interface IdempotencyRecord {
  bodyHash: string
  state: 'in_flight' | 'done'
  status?: number
  body?: unknown
  expiresAt: number
}

/** Generates a key of the documented format. */
export function generateApiKey(env: 'test' | 'live' = 'test'): string {
  return `sk_${env}_${randomBytes(32).toString('base64url').slice(0, 43)}`
}

/** 32 bytes that depend only on the seed and the label. */
function seededBytes(seed: number, label: string): Buffer {
  return createHmac('sha256', `svc-payouts-emulator:${seed}`).update(label).digest()
}

/** A copy of `value` without the named keys. */
export function omit<T extends object, K extends keyof T>(value: T, keys: K[]): Omit<T, K> {
  const copy = { ...value }
  for (const key of keys) delete copy[key]
  return copy
}

/**
 * The digest an Idempotency-Key's body is compared by. It hashes the parsed JSON value, so
 * another key order or whitespace is the same body; array order still counts.
 */
export function hashBody(body: unknown): string {
  return createHash('sha256')
    .update(canonicalJson(body ?? null))
    .digest('hex')
}

/** JSON text with every object's keys sorted: equal JSON values give equal text. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  if (value !== null && typeof value === 'object') {
    const object = value as Record<string, unknown>
    const members = Object.keys(object)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${canonicalJson(object[key])}`)
    return `{${members.join(',')}}`
  }
  return JSON.stringify(value)
}

/**
 * The emulator's whole state, in memory. Collections that grow with traffic are pruned
 * on the emulated clock (idempotency 24 h, deliveries 30 days) and capped.
 */
export class EmulatorState {
  keys = new Map<string, ApiKeyRecord>()
  recipients = new Map<string, RecipientRecord>()
  accountPaymentMethods = new Map<string, PaymentMethodRecord[]>()
  quotes = new Map<string, QuoteRecord>()
  payouts = new Map<string, PayoutRecord>()
  readIds = new Map<string, string>()
  transactions = new Map<string, OnChainTx>()
  idempotency = new Map<string, IdempotencyRecord>()
  /** Execute-batch requests processed, oldest first. */
  batches: BatchRecord[] = []
  /** Payouts created per Idempotency-Key (chaos tests assert one per key). */
  executeCalls = 0
  #seededRecipients = 0

  /**
   * With a `seed`, the default key, the accounts' payment methods and the recipients seeded
   * through the admin get the same ids at every start (a host app's `.env` stays valid);
   * without one they are random. Payouts and recipients created over the API are always random.
   */
  constructor(
    readonly clock: EmulatorClock,
    readonly seed?: number
  ) {}

  /** A UUID derived from the seed and `label`, or a random one without a seed. */
  stableId(label: string): string {
    if (this.seed === undefined) return randomUUID()
    const hex = seededBytes(this.seed, label).toString('hex')
    const variant = ((Number.parseInt(hex[16], 16) & 0x3) | 0x8).toString(16)
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`
  }

  /** The default account's sandbox key: derived from the seed, or random without one. */
  defaultKey(): string {
    if (this.seed === undefined) return generateApiKey('test')
    return `sk_test_${seededBytes(this.seed, 'api-key').toString('base64url').slice(0, 43)}`
  }

  /** Stores a key for the account (creating the account's payment methods on first use). */
  addKey(key: string, accountId: string, scopes: readonly Scope[] = ALL_SCOPES) {
    this.keys.set(key, { key, accountId, scopes: new Set(scopes), revoked: false, expiresAt: null })
    if (!this.accountPaymentMethods.has(accountId)) {
      this.accountPaymentMethods.set(accountId, [
        {
          id: this.stableId(`${accountId}:payment-method:USD`),
          type: 'bank_account',
          currency: 'USD',
          rail: 'ach',
        },
        {
          id: this.stableId(`${accountId}:payment-method:EUR`),
          type: 'bank_account',
          currency: 'EUR',
          rail: 'sepa',
        },
      ])
    }
    return key
  }

  /** Issues a new random key of the given environment for the account. */
  issueKey(
    accountId: string,
    scopes: readonly Scope[] = ALL_SCOPES,
    env: 'test' | 'live' = 'test'
  ) {
    return this.addKey(generateApiKey(env), accountId, scopes)
  }

  /** The key's record while it is accepted: known, not revoked, not past a rotation's expiry. */
  validKey(key: string): ApiKeyRecord | undefined {
    const record = this.keys.get(key)
    if (!record || record.revoked) return undefined
    if (record.expiresAt !== null && record.expiresAt <= this.clock.now()) return undefined
    return record
  }

  /**
   * Creates a recipient. `seeded` (the admin's seeding) gives it and its payment methods ids
   * derived from the seed and the order of seeding.
   */
  createRecipient(accountId: string, input: Record<string, any>, seeded = false): RecipientRecord {
    const now = this.clock.iso()
    const methods = (input.paymentMethods as PaymentMethodRecord[] | undefined)?.length
      ? input.paymentMethods
      : [{ type: 'bank_account', currency: input.currency ?? 'MXN' }]
    const label = seeded ? `${accountId}:recipient:${++this.#seededRecipients}` : ''
    const recipient: RecipientRecord = {
      id: seeded ? this.stableId(label) : randomUUID(),
      accountId,
      name: input.name,
      email: input.email,
      country: input.country,
      currency: input.currency,
      type: input.type ?? 'individual',
      metadata: input.metadata,
      paymentMethods: methods.map((m: any, index: number) => ({
        id: seeded ? this.stableId(`${label}:payment-method:${index}`) : randomUUID(),
        type: m.type ?? 'bank_account',
        currency: m.currency,
        rail: m.rail,
      })),
      createdAt: now,
      updatedAt: now,
    }
    this.recipients.set(recipient.id, recipient)
    return recipient
  }

  /**
   * Notes what a processed execute or execute-batch request made under its key: the key on
   * each payout (a batch's with its row), and the batch's record.
   */
  noteExecuted(
    accountId: string,
    endpoint: 'execute' | 'executeBatch',
    idempotencyKey: string | undefined,
    body: any
  ) {
    if (endpoint === 'execute') {
      const payout = body?.data?.payoutId ? this.payouts.get(body.data.payoutId) : undefined
      if (payout && idempotencyKey) payout.idempotencyKey = idempotencyKey
      return
    }
    const results: any[] = body?.data?.results ?? []
    const rows: BatchRecord['rows'] = results.map((row) => {
      if (!row.success) return { index: row.index, code: String(row.error?.code ?? 'REFUSED') }
      const payout = this.payouts.get(row.data.payoutId)
      if (payout) {
        payout.batchKey = idempotencyKey
        payout.batchIndex = row.index
      }
      return { index: row.index, payoutId: row.data.payoutId }
    })
    this.batches.push({ accountId, idempotencyKey, rows, at: this.clock.iso() })
  }

  findPayout(accountId: string, id: string): PayoutRecord | undefined {
    const payout = this.payouts.get(id) ?? this.payouts.get(this.readIds.get(id) ?? '')
    return payout && payout.accountId === accountId ? payout : undefined
  }

  /** Drops expired idempotency records. */
  prune() {
    const now = this.clock.now()
    for (const [key, record] of this.idempotency) {
      if (record.state === 'done' && record.expiresAt <= now) this.idempotency.delete(key)
    }
  }
}

/** A public view of a recipient, as the API returns it. */
export function recipientView(recipient: RecipientRecord) {
  return omit(recipient, ['accountId'])
}

/**
 * A public view of a payout, as GET /payouts/{id} returns it. A failed payout's reason is the
 * `status` of the leg that was running (the offramp's, or the onramp's in the onramp flow).
 */
export function payoutView(payout: PayoutRecord) {
  const metadata: Record<string, unknown> = { version: 1 }
  if (payout.flow !== 'stablecoin_to_fiat') {
    const failedHere = payout.flow === 'onramp' && payout.failureStatus
    metadata.onramp = {
      protocol: 'emu-onramp',
      status: failedHere ? payout.failureStatus : payout.status,
    }
  }
  if (payout.flow !== 'onramp') {
    metadata.offramp = {
      protocol: 'emu-offramp',
      amount: payout.payoutAmount,
      currency: payout.payoutCurrency,
      ...(payout.failureStatus ? { status: payout.failureStatus } : {}),
    }
  }
  return {
    id: payout.readId,
    payoutId: payout.payoutId,
    transactionType: 'payout',
    status: payout.status,
    step: payout.step,
    sourceAmount: payout.sourceAmount,
    sourceCurrency: payout.sourceCurrency,
    payoutAmount: payout.payoutAmount,
    payoutCurrency: payout.payoutCurrency,
    recipientId: payout.recipientId,
    paymentMethod: payout.paymentMethod,
    paymentPurpose: payout.paymentPurpose,
    reference: payout.reference,
    providerMetadata: metadata,
    createdAt: payout.createdAt,
    ...(payout.completedAt ? { completedAt: payout.completedAt } : {}),
  }
}
