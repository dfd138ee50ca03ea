import { createHash, randomBytes, randomUUID } from 'node:crypto'
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
}

export interface OnChainTx {
  txHash: string
  to: string
  amountAtomic: bigint
  chainId: number
  confirmedAt: number
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
  /** Payouts created per Idempotency-Key (chaos tests assert one per key). */
  executeCalls = 0

  constructor(readonly clock: EmulatorClock) {}

  issueKey(
    accountId: string,
    scopes: readonly Scope[] = ALL_SCOPES,
    env: 'test' | 'live' = 'test'
  ) {
    const key = generateApiKey(env)
    this.keys.set(key, { key, accountId, scopes: new Set(scopes), revoked: false, expiresAt: null })
    if (!this.accountPaymentMethods.has(accountId)) {
      this.accountPaymentMethods.set(accountId, [
        { id: randomUUID(), type: 'bank_account', currency: 'USD', rail: 'ach' },
        { id: randomUUID(), type: 'bank_account', currency: 'EUR', rail: 'sepa' },
      ])
    }
    return key
  }

  createRecipient(accountId: string, input: Record<string, any>): RecipientRecord {
    const now = this.clock.iso()
    const methods = (input.paymentMethods as PaymentMethodRecord[] | undefined)?.length
      ? input.paymentMethods
      : [{ type: 'bank_account', currency: input.currency ?? 'MXN' }]
    const recipient: RecipientRecord = {
      id: randomUUID(),
      accountId,
      name: input.name,
      email: input.email,
      country: input.country,
      currency: input.currency,
      type: input.type ?? 'individual',
      metadata: input.metadata,
      paymentMethods: methods.map((m: any) => ({
        id: randomUUID(),
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

/** A public view of a payout, as GET /payouts/{id} returns it. */
export function payoutView(payout: PayoutRecord) {
  const metadata: Record<string, unknown> = { version: 1 }
  if (payout.flow !== 'stablecoin_to_fiat')
    metadata.onramp = { protocol: 'emu-onramp', status: payout.status }
  if (payout.flow !== 'onramp') {
    metadata.offramp = {
      protocol: 'emu-offramp',
      amount: payout.payoutAmount,
      currency: payout.payoutCurrency,
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
