import { redactCredentials, REDACTED_CREDENTIALS } from '../client/redact.ts'
import type { ExecuteInput } from '../client/types.ts'
import { safeError } from '../safe_error.ts'
import { detectFlow, isStablecoin, type ExecuteFlow } from '../schemas/common.ts'
import type { StablecoinQuote } from '../schemas/resources.ts'
import { amountTotal } from './batch_file.ts'
import { describeError } from './payouts_command.ts'

/** The one quote call the spec documents: every fiat-to-stablecoin route for an amount. */
export type FiatToStablecoinQuotes = (query: {
  fromCurrency: string
  toCurrency: string
  amount: number
}) => Promise<StablecoinQuote[]>

/** Why a pair has no numbers: the spec shows no quote endpoint for its flow. */
export const NOT_QUOTABLE = "the service's spec shows no quote endpoint for this pair"

/**
 * A pair of currencies of a batch file as a dry run quotes it (`--json`'s `quotes`): the
 * best route of one quote for the pair's total, or why there is none.
 */
export interface PairQuote {
  from: string
  to: string
  flow: ExecuteFlow
  rows: number
  /** The sum of the pair's amounts, in `from` (a decimal string). */
  amount: string
  quoted: boolean
  /** Quoted: one quote for the pair's total; each row is priced again when it is executed. */
  estimate: boolean
  /** Why not quoted (null when quoted). */
  reason: string | null
  /** The best route's raw rate before fees (`exchangeRate`). */
  rate: number | null
  /** The best route's rate after fees (`effRate`). */
  effectiveRate: number | null
  /** The best route's total fee. */
  fee: number | null
  /** What the best route delivers for the pair's total, in `to` (`toAmount`). */
  estimatedToAmount: number | null
  /** How many routes the service quoted. */
  routes: number | null
  /** The quote call failed: its code and message, with no secret in it. */
  error?: { code: string; message: string }
}

/** What error messages must not show, and the address a network error names. */
export interface QuoteReporting {
  /** Replaced wherever they appear in a message (the API key). */
  secrets?: Array<string | undefined>
  /** The service's address (its credentials redacted), named when it could not be reached. */
  baseUrl?: string
}

/** A pair's rows: one group per (from, to, flow), in the order of the file. */
interface Pair {
  from: string
  to: string
  flow: ExecuteFlow
  amounts: unknown[]
}

/** The pairs of the rows: every row's (fromCurrency, toCurrency) and flow, as `execute` sends it. */
export function pairsOf(inputs: ExecuteInput[]): Pair[] {
  const pairs = new Map<string, Pair>()
  for (const input of inputs) {
    const from = String(input.fromCurrency)
    const to = String(input.toCurrency)
    const flow = input.flow ?? detectFlow(input)
    const id = `${from}>${to}>${flow}`
    const pair = pairs.get(id) ?? { from, to, flow, amounts: [] }
    pair.amounts.push(input.amount)
    pairs.set(id, pair)
  }
  return [...pairs.values()]
}

/**
 * Quotes a batch file's rows for a dry run, one call per pair, never per row (quotes are
 * rate-limited: 120 a minute, bursts of 40): an onramp pair (fiat to stablecoin) gets the
 * documented fiat-to-stablecoin quote for the pair's total and reports its best route (the
 * most `toAmount`); the spec shows no quote endpoint for the other flows, so those pairs are
 * `quoted: false` with `NOT_QUOTABLE` and no numbers. A call that fails is reported on its
 * pair (`error`, see `errorOf`) and the next pair is quoted. The calls go one after the other.
 */
export async function quotePairs(
  inputs: ExecuteInput[],
  quote: FiatToStablecoinQuotes,
  reporting: QuoteReporting = {}
): Promise<PairQuote[]> {
  const results: PairQuote[] = []
  for (const { from, to, flow, amounts } of pairsOf(inputs)) {
    const amount = amountTotal(amounts)
    const pair = { from, to, flow, rows: amounts.length, amount }
    // The one documented quote is fiat to stablecoin: an onramp row to a fiat target (a `flow`
    // column saying so) has no quote endpoint either.
    if (flow !== 'onramp' || !isStablecoin(to)) {
      results.push(unquoted(pair, NOT_QUOTABLE))
      continue
    }
    let routes: StablecoinQuote[]
    try {
      routes = await quote({ fromCurrency: from, toCurrency: to, amount: Number(amount) })
    } catch (error) {
      results.push(failed(pair, errorOf(error, reporting)))
      continue
    }
    if (routes.length === 0) {
      const message = 'the service answered no route for this pair'
      results.push(failed(pair, { code: 'NO_ROUTE', message }))
      continue
    }
    const best = routes.reduce((a, b) => (b.toAmount > a.toAmount ? b : a))
    results.push({
      ...pair,
      quoted: true,
      estimate: true,
      reason: null,
      rate: best.exchangeRate,
      effectiveRate: best.effRate,
      fee: best.fee,
      estimatedToAmount: best.toAmount,
      routes: routes.length,
    })
  }
  return results
}

/** The pairs whose quote call failed: a dry run with any is a failure (exit code 1). */
export function failedQuotes(quotes: PairQuote[]): PairQuote[] {
  return quotes.filter((quote) => quote.error !== undefined)
}

type PairOf = Pick<PairQuote, 'from' | 'to' | 'flow' | 'rows' | 'amount'>

function unquoted(pair: PairOf, reason: string): PairQuote {
  return {
    ...pair,
    quoted: false,
    estimate: false,
    reason,
    rate: null,
    effectiveRate: null,
    fee: null,
    estimatedToAmount: null,
    routes: null,
  }
}

function failed(pair: PairOf, error: { code: string; message: string }): PairQuote {
  return { ...unquoted(pair, `quote failed: ${error.code}: ${error.message}`), error }
}

/**
 * An error's code and message as a command prints them (`describeError`: the service's
 * address when it could not be reached, no SQL), every secret given replaced, one line of at
 * most 300 characters.
 */
export function errorOf(
  error: unknown,
  { secrets = [], baseUrl = '' }: QuoteReporting = {}
): { code: string; message: string } {
  const described = describeError(error, redactCredentials(baseUrl))
  let message = redactCredentials(described.message)
  for (const secret of secrets) {
    if (secret && secret.length >= 8) message = message.split(secret).join(REDACTED_CREDENTIALS)
  }
  message = message.replace(/\s+/g, ' ').trim()
  if (message.length > 300) message = `${message.slice(0, 299)}…`
  return { code: described.code ?? safeError(error).type, message }
}
