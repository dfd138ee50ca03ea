import { AssertionError } from 'node:assert'
import { inspect } from 'node:util'
import type { PayoutsEmulator } from '../emulator/emulator.ts'
import type { QuoteRecord, recipientView } from '../emulator/state.ts'

/** A payout as the service (the fake) holds it: what the app sent it. */
export type ExecutedPayout = ReturnType<PayoutsEmulator['admin']['payouts']>[number]

/** A recipient as the service (the fake) holds it. */
export type CreatedRecipient = ReturnType<typeof recipientView>

/**
 * A batch the app sent the service (the fake): the execute-batch requests of one batch key,
 * each processed once (a replay under its key is not another request).
 */
export interface SentBatch {
  /**
   * The batch's key: the `idempotencyKey` given to `payouts.executeBatch` (the key its chunks
   * were sent under, without their `-c<n>`), or a `client.executeBatch` request's own key.
   */
  idempotencyKey: string | undefined
  /** Execute-batch requests the service processed for it (one per chunk). */
  requests: number
  /** Rows those requests carried. */
  rows: number
  /** Payouts made. */
  created: number
  /** Rows the service refused, and their codes in order. */
  refused: number
  refusals: string[]
  /** The payouts made, in the order of their requests and rows. */
  payouts: ExecutedPayout[]
}

/** Fields to match (each must be equal), or a predicate. */
export type Match<T> = Partial<T> | ((item: T) => boolean)

const describe = (value: unknown) => inspect(value, { depth: 4, breakLength: 100 })

/** `PayoutsFake.assertExecuted` on the payouts the service holds. */
export function failUnlessExecuted(payouts: ExecutedPayout[], match?: Match<ExecutedPayout>) {
  if (payouts.some(matcher(match))) return
  fail({
    message: match
      ? `Expected a payout matching ${describe(match)} to be executed; the ${payouts.length} executed: ${describe(payouts.map(summary))}`
      : 'Expected a payout to be executed; none was',
    expected: [match ?? 'a payout'],
    actual: payouts.map(summary),
    operator: 'assertExecuted',
  })
}

/** `PayoutsFake.assertNotExecuted` on the payouts the service holds. */
export function failIfExecuted(payouts: ExecutedPayout[], match?: Match<ExecutedPayout>) {
  const found = payouts.filter(matcher(match))
  if (found.length === 0) return
  fail({
    message: `Expected no payout${match ? ` matching ${describe(match)}` : ''} to be executed; ${found.length} was: ${describe(found.map(summary))}`,
    expected: [],
    actual: found.map(summary),
    operator: 'assertNotExecuted',
  })
}

/** `PayoutsFake.assertExecutedCount` on the payouts the service holds. */
export function failUnlessExecutedCount(
  payouts: ExecutedPayout[],
  count: number,
  match?: Match<ExecutedPayout>
) {
  const found = payouts.filter(matcher(match))
  if (found.length === count) return
  fail({
    message: `Expected ${count} executed payout(s)${match ? ` matching ${describe(match)}` : ''}; found ${found.length}: ${describe(found.map(summary))}`,
    expected: count,
    actual: found.length,
    operator: 'assertExecutedCount',
  })
}

/** `PayoutsFake.assertEscrowConfirmed` on the quotes the service holds. */
export function failUnlessEscrowConfirmed(all: Iterable<QuoteRecord>, quoteId?: string) {
  const quotes = [...all].filter(
    (quote) => quote.flow === 'stablecoin_to_fiat' && (!quoteId || quote.quoteId === quoteId)
  )
  if (quotes.some((quote) => quote.status === 'deposit_confirmed')) return
  const seen = quotes.map((quote) => ({ quoteId: quote.quoteId, status: quote.status }))
  fail({
    message: quoteId
      ? `Expected the escrow deposit of quote ${quoteId} to be confirmed; ${seen.length ? `it is ${seen[0].status}` : 'the service has no such stablecoin quote'}`
      : `Expected an escrow deposit to be confirmed; the stablecoin quotes: ${describe(seen)}`,
    expected: [{ quoteId: quoteId ?? 'any', status: 'deposit_confirmed' }],
    actual: seen,
    operator: 'assertEscrowConfirmed',
  })
}

/** `PayoutsFake.assertRecipientCreated` on the recipients the app created. */
export function failUnlessRecipientCreated(
  recipients: CreatedRecipient[],
  match?: Match<CreatedRecipient>
) {
  if (recipients.some(matcher(match))) return
  fail({
    message: match
      ? `Expected a recipient matching ${describe(match)} to be created; the ${recipients.length} created: ${describe(recipients.map((r) => ({ id: r.id, name: r.name, currency: r.currency })))}`
      : 'Expected a recipient to be created; none was',
    expected: [match ?? 'a recipient'],
    actual: recipients,
    operator: 'assertRecipientCreated',
  })
}

/** `PayoutsFake.assertBatchExecuted` on the batches the service processed. */
export function failUnlessBatchExecuted(batches: SentBatch[], match?: Match<SentBatch>) {
  if (batches.some(matcher(match))) return
  const seen = batches.map(batchSummary)
  fail({
    message: match
      ? `Expected a batch matching ${describe(match)} to be executed; the ${batches.length} executed: ${describe(seen)}`
      : 'Expected a batch to be executed; none was',
    expected: [match ?? 'a batch'],
    actual: seen,
    operator: 'assertBatchExecuted',
  })
}

function batchSummary(batch: SentBatch) {
  const { payouts, ...counts } = batch
  return { ...counts, payouts: payouts.length }
}

function matcher<T extends object>(match?: Match<T>): (item: T) => boolean {
  if (!match) return () => true
  if (typeof match === 'function') return match
  return (item) =>
    Object.entries(match).every(([key, value]) => {
      const actual = (item as Record<string, unknown>)[key]
      return typeof value === 'object' && value !== null
        ? inspect(actual) === inspect(value)
        : actual === value
    })
}

function summary(payout: ExecutedPayout) {
  const shown = {
    payoutId: payout.payoutId,
    status: payout.status,
    sourceAmount: payout.sourceAmount,
    sourceCurrency: payout.sourceCurrency,
    payoutAmount: payout.payoutAmount,
    payoutCurrency: payout.payoutCurrency,
    recipientId: payout.recipientId,
    reference: payout.reference,
  }
  return Object.fromEntries(Object.entries(shown).filter(([, value]) => value !== undefined))
}

function fail(options: { message: string; expected: unknown; actual: unknown; operator: string }) {
  throw new AssertionError(options)
}
