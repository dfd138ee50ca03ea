import { randomUUID } from 'node:crypto'
import factory from '@adonisjs/lucid/factories'
import { DateTime } from 'luxon'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import { PROCESSING_STEPS, type PayoutStatus, type PayoutStep } from '../schemas/common.ts'
import { isTerminal } from '../ledger/state_machine.ts'
import { metadataDueOf } from '../ledger/payout_rows.ts'
// Through main.ts: the models are pointed at the app's tables as they load.
import { Payout, PayoutEvent, Recipient, WebhookDelivery } from '../models/main.ts'

/** A position the ledger can hold: a status and the step it stands at. */
export interface FactoryPosition {
  status: PayoutStatus
  step: PayoutStep | null
}

/**
 * The positions a payout went through to reach `position`, first to last, as the ledger
 * applies them: pending at `initiated`, processing step by step, then its terminal status.
 * `PayoutFactory.with('events', payoutPath(position).length)` logs the whole of it.
 */
export function payoutPath(position: FactoryPosition): FactoryPosition[] {
  const path: FactoryPosition[] = [{ status: 'pending', step: 'initiated' }]
  const last = position.status === 'completed' ? 'settling' : position.step
  for (const step of PROCESSING_STEPS) {
    if (PROCESSING_STEPS.indexOf(step) > PROCESSING_STEPS.indexOf(last as PayoutStep)) break
    path.push({ status: 'processing', step })
  }
  if (position.status === 'pending') return path.slice(0, 1)
  if (isTerminal(position.status)) {
    const step = position.status === 'completed' ? 'delivered' : position.step
    path.push({ status: position.status, step })
  }
  return path
}

/** A decimal amount as the ledger stores it (a string, never a float). */
function amount(faker: { finance: { amount(o: object): string } }) {
  return faker.finance.amount({ min: 10, max: 5000, dec: 2 })
}

/** Currencies, payment method and instructions of each execute flow. */
const FLOWS = {
  fiat_to_fiat: {
    transactionType: 'fiat_to_fiat',
    sourceCurrency: 'USD',
    payoutCurrency: 'MXN',
    paymentMethod: 'bank_transfer',
  },
  stablecoin_to_fiat: {
    transactionType: 'stablecoin_to_fiat',
    sourceCurrency: 'USDC',
    payoutCurrency: 'MXN',
    paymentMethod: 'bank_transfer',
  },
  onramp: {
    transactionType: 'onramp',
    sourceCurrency: 'USD',
    payoutCurrency: 'USDC',
    paymentMethod: 'wallet',
  },
} as const

/** Moves a factory payout to `position`, with the timestamps the ledger would have set. */
function moveTo(payout: Payout, position: FactoryPosition) {
  payout.status = position.status
  payout.step = position.step
  const now = DateTime.now()
  payout.statusChangedAt = now
  payout.lastObservedAt = now
  payout.completedAt = position.status === 'completed' ? now : null
}

/**
 * Marks a factory payout as the ledger would once its attributes are final (merged values and
 * states both applied): ended with the routing detail of its end not read since, so the
 * reconciler reads it once.
 */
function markMetadataDue(payout: Payout) {
  payout.providerMetadataDueAt = metadataDueOf(payout)
}

/**
 * A payout as the ledger stores it after its execute: pending at `initiated`, fiat to fiat,
 * a UUID, decimal-string amounts. States: `pending`, `processing` (at `collected`; merge
 * another step, e.g. `.merge({ step: 'converting' })`, and it is kept), `completed`,
 * `failed` (at `collected`, or the merged step), `cancelled` (while pending); flows
 * `fiatToFiat`, `stablecoinToFiat`, `onramp`. Relation `events`: its log (see `payoutPath`),
 * in the payout's account (`main`; `.merge({ account: 'eu' })` for another).
 */
export const PayoutFactory = factory
  .define(Payout, ({ faker }) => {
    const source = amount(faker)
    const rate = faker.finance.amount({ min: 15, max: 20, dec: 4 })
    const converted = (Number(source) * Number(rate)).toFixed(2)
    const now = DateTime.now()
    return {
      account: DEFAULT_ACCOUNT,
      payoutUuid: randomUUID(),
      readId: null,
      ownerId: `owner-${faker.string.alphanumeric(8)}`,
      flow: 'fiat_to_fiat',
      status: 'pending' as PayoutStatus,
      step: 'initiated' as PayoutStep | null,
      ...FLOWS.fiat_to_fiat,
      quoteId: `qt_${faker.string.alphanumeric(16)}`,
      sourceAmount: source,
      payoutAmount: converted,
      toAmount: converted,
      fees: { total: '1.50', currency: 'USD' },
      partnerFxRate: rate,
      effectiveRate: rate,
      recipientId: randomUUID(),
      recipientPaymentMethodId: null,
      paymentPurpose: null,
      reference: faker.string.alphanumeric(12),
      providerMetadata: null,
      instructions: null,
      lastObservedAt: now,
      statusChangedAt: now,
      completedAt: null,
    }
  })
  .state('pending', (payout) => moveTo(payout, { status: 'pending', step: 'initiated' }))
  .state('processing', (payout) => {
    const kept = PROCESSING_STEPS.includes(payout.step as PayoutStep)
    moveTo(payout, { status: 'processing', step: kept ? payout.step : 'collected' })
  })
  .state('completed', (payout) => moveTo(payout, { status: 'completed', step: 'delivered' }))
  .state('failed', (payout) => {
    const kept = PROCESSING_STEPS.includes(payout.step as PayoutStep)
    moveTo(payout, { status: 'failed', step: kept ? payout.step : 'collected' })
  })
  .state('cancelled', (payout) => moveTo(payout, { status: 'cancelled', step: 'initiated' }))
  .state('fiatToFiat', (payout) => {
    payout.merge({ flow: 'fiat_to_fiat', ...FLOWS.fiat_to_fiat })
  })
  .state('stablecoinToFiat', (payout) => {
    payout.merge({ flow: 'stablecoin_to_fiat', ...FLOWS.stablecoin_to_fiat })
  })
  .state('onramp', (payout) => {
    payout.merge({
      flow: 'onramp',
      ...FLOWS.onramp,
      instructions: { paymentUrl: `https://pay.example.test/${payout.payoutUuid}` },
    })
  })
  .relation('events', () => PayoutEventFactory)
  .before('makeStubbed', (_, payout) => markMetadataDue(payout))
  .before('create', (_, payout) => markMetadataDue(payout))
  .build()

/** How many events the `events` relation has made for each payout so far. */
const eventsMade = new WeakMap<Payout, number>()

/**
 * A row of a payout's log: an applied webhook change, notified. Made through
 * `PayoutFactory.with('events', n)`, event i is the i-th position of the payout's
 * `payoutPath` (the first from its execute); past the end, redeliveries of the last one
 * (not applied, `duplicate`). States: `ignored` (not applied, `backwards`), `unnotified`
 * (applied, its app events not fired yet: the outbox holds it).
 */
export const PayoutEventFactory = factory
  .define(PayoutEvent, ({ faker }) => ({
    account: DEFAULT_ACCOUNT,
    payoutUuid: randomUUID(),
    source: 'webhook',
    eventType: 'payout.status.updated',
    status: 'pending',
    step: 'initiated',
    applied: true,
    reason: 'applied',
    deliveryId: `dlv_${faker.string.alphanumeric(20)}`,
    observedAt: DateTime.now(),
    mergedFrom: null,
    notifiedAt: DateTime.now(),
  }))
  .state('ignored', (event) => {
    event.applied = false
    event.reason = 'backwards'
    event.notifiedAt = null
  })
  .state('unnotified', (event) => {
    event.notifiedAt = null
  })
  .after('make', (builder, event) => {
    // The payout this event is made for, through the `events` relation.
    const payout = (builder as { parent?: unknown }).parent
    if (!(payout instanceof Payout)) return
    // The payout's log is in the payout's account.
    event.account = payout.account
    const path = payoutPath({ status: payout.status, step: payout.step })
    const index = eventsMade.get(payout) ?? 0
    eventsMade.set(payout, index + 1)
    const position = path[Math.min(index, path.length - 1)]
    event.status = position.status
    event.step = position.step
    event.observedAt = DateTime.now().minus({ seconds: path.length - index })
    if (index === 0) {
      event.source = 'execute'
      event.eventType = 'execute'
      event.deliveryId = null
    }
    if (index >= path.length) {
      event.applied = false
      event.reason = 'duplicate'
    }
  })
  .build()

/** A payee mirrored from the service: a UUID remote id, an MXN bank account. State `deleted`. */
export const RecipientFactory = factory
  .define(Recipient, ({ faker }) => ({
    account: DEFAULT_ACCOUNT,
    remoteId: randomUUID(),
    ownerId: null,
    name: faker.person.fullName(),
    email: faker.internet.email(),
    country: 'MX',
    currency: 'MXN',
    type: 'individual',
    paymentMethods: [
      { id: randomUUID(), type: 'bank_account', clabe: faker.string.numeric(18) },
    ] as Array<Record<string, unknown>>,
    metadata: null,
    deletedAt: null,
    syncedAt: DateTime.now(),
  }))
  .state('deleted', (recipient) => {
    recipient.deletedAt = DateTime.now()
  })
  .build()

/**
 * A stored webhook delivery (an inbox row), waiting to be processed: a signed
 * `payout.status.updated` body for a fresh payout. States: `pending`, `processed`,
 * `failed` (due again later), `dead` (given up on: `payouts:replay` requeues it).
 */
export const WebhookDeliveryFactory = factory
  .define(WebhookDelivery, ({ faker }) => {
    const body = {
      type: 'payout.status.updated',
      createdAt: new Date().toISOString(),
      data: { payoutId: randomUUID(), status: 'processing', step: 'compliance_cleared' },
    }
    return {
      account: DEFAULT_ACCOUNT,
      deliveryId: `dlv_${faker.string.alphanumeric(20)}`,
      eventType: body.type,
      rawBody: Buffer.from(JSON.stringify(body)).toString('base64'),
      signatureHeader: `t=${Math.floor(Date.now() / 1000)},v1=${faker.string.hexadecimal({ length: 64, prefix: '' })}`,
      source: 'webhook' as const,
      state: 'pending' as WebhookDelivery['state'],
      attempts: 0,
      nextAttemptAt: null,
      lastError: null,
      receivedAt: DateTime.now(),
      processedAt: null,
    }
  })
  .state('pending', (row) => {
    row.state = 'pending'
  })
  .state('processed', (row) => {
    row.state = 'processed'
    row.attempts = 1
    row.processedAt = DateTime.now()
  })
  .state('failed', (row) => {
    row.state = 'failed'
    row.attempts = 1
    row.lastError = 'the ledger was unavailable'
    row.nextAttemptAt = DateTime.now().plus({ minutes: 1 })
  })
  .state('dead', (row) => {
    row.state = 'dead'
    row.attempts = 8
    row.lastError = 'unparseable body'
  })
  .build()
