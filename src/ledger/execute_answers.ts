import { executeDataSchemaByFlow, type ExecuteResult } from '../schemas/resources.ts'
import type { ObservationSource } from '../types/events.ts'
import { mapExecuteStatus } from './state_machine.ts'
import type { PayoutObservation } from './vocabulary.ts'

/*
 * What an answer of the execute endpoints becomes in the ledger, for a single execute and for
 * each row of a batch alike: the payout's first observation, and the answer as it is stored
 * with its intent (JSON) and read back.
 */

/** JSON.stringify's replacer for answers: a bigint (an atomic amount) becomes its string. */
export const JSON_SAFE = (_key: string, value: unknown) =>
  typeof value === 'bigint' ? value.toString() : value

/**
 * The observation of a payout the service just made: `pending`, step `initiated`, with what
 * the request said (amount, currencies, recipient, reference) and what the answer gave (ids,
 * fees, rates, instructions). Banking instructions and payment URLs go to `instructions`,
 * which neither serialization nor broadcasts include.
 */
export function executeObservation(
  body: Record<string, any>,
  result: ExecuteResult,
  ownerId: string | null,
  source: ObservationSource
): PayoutObservation {
  const instructions: Record<string, unknown> = {}
  if ('bankingInstructions' in result && result.bankingInstructions)
    instructions.bankingInstructions = result.bankingInstructions
  if ('paymentUrl' in result && result.paymentUrl) instructions.paymentUrl = result.paymentUrl
  return {
    payoutId: result.payoutId,
    status: mapExecuteStatus(result.status),
    step: 'initiated',
    source,
    eventType: 'execute',
    fields: {
      ownerId,
      flow: result.flow,
      quoteId: result.quoteId,
      sourceAmount: body.amount,
      sourceCurrency: body.fromCurrency,
      payoutCurrency: body.toCurrency,
      payoutAmount: result.toAmount,
      toAmount: result.toAmount,
      fees: result.fees,
      partnerFxRate: result.partnerFxRate,
      effectiveRate: result.effectiveRate,
      recipientId: body.recipientId,
      recipientPaymentMethodId: body.recipientPaymentMethodId,
      paymentPurpose: body.paymentPurpose,
      reference: body.reference,
      instructions: Object.keys(instructions).length > 0 ? instructions : null,
    },
  }
}

/** The answer as an intent stores it: plain JSON, the atomic amount as a string. */
export function storedAnswer(result: ExecuteResult): Record<string, unknown> {
  return JSON.parse(JSON.stringify(result, JSON_SAFE))
}

/** A stored answer parsed back to the API's types (the atomic amount a bigint again). */
export function parseStoredAnswer(stored: Record<string, unknown>): ExecuteResult {
  const { flow, ...data } = stored as { flow: ExecuteResult['flow'] }
  return { flow, ...executeDataSchemaByFlow[flow].parse(data) } as ExecuteResult
}
