import { readFile } from 'node:fs/promises'
import { args, flags } from '@adonisjs/core/ace'
import { PayoutsCommand } from '../src/commands/payouts_command.ts'
import type { BatchFile, FileProblem } from '../src/commands/batch_file.ts'
import type { PairQuote } from '../src/commands/batch_quotes.ts'
import type { BatchProgress } from '../src/ledger/payout_batches.ts'
import type { PayoutsService } from '../src/service/payouts_service.ts'

/** A row of the file and what became of it (`--json`'s `rows`). */
interface RowResult {
  line: number
  reference: string | null
  outcome: string
  code?: string
  message?: string | null
  payoutId?: string
}

/** What the command answers (`--json` prints it as it is). */
interface Result {
  file: string
  key: string
  dryRun: boolean
  /** Ctrl-C stopped the batch before its next chunk. */
  interrupted: boolean
  /** Every row `created` or `refused`: nothing left to send. */
  complete: boolean
  /** The ledger held this batch complete before this run: nothing was sent. */
  alreadyComplete: boolean
  counts: Record<string, number>
  /** Per source currency: the rows and the sum of their amounts (as a decimal string). */
  totals: Array<{ currency: string; rows: number; amount: string }>
  /** A dry run's quotes: per (from, to) pair, the best route of one quote for its total. */
  quotes?: PairQuote[]
  rows: RowResult[]
}

/** Pays every row of a CSV file through `payouts.executeBatch`, safe to run again. */
export default class PayoutsBatch extends PayoutsCommand<Result> {
  static commandName = 'payouts:batch'
  static description =
    'Pay every row of a CSV file in one batch; running the same file again sends only what was not sent'

  @args.string({ description: 'The CSV file (header row; see docs/mass-payouts.md)' })
  declare file: string

  @flags.boolean({
    description:
      'Check the file, print totals per currency and quote each fiat-to-stablecoin pair, sending nothing',
  })
  declare dryRun: boolean

  @flags.string({ description: "The batch key (the file's content hash otherwise)" })
  declare key?: string

  @flags.string({ description: 'The user or tenant whose channel hears about the payouts' })
  declare owner?: string

  protected failure = 'Batch failed'
  #read?: BatchFile

  protected async accepted() {
    if (this.key !== undefined && !/^[\w-]{8,240}$/.test(this.key)) {
      return this.refuse(
        `--key must be 8 to 240 characters of A-Z a-z 0-9 _ -, not "${this.key}". Nothing sent`
      )
    }
    let text: string
    try {
      text = await readFile(this.file, 'utf8')
    } catch (error) {
      return this.refuse(`Cannot read ${this.file}: ${(error as Error).message}. Nothing sent`)
    }
    const { readBatchFile } = await import('../src/commands/batch_file.ts')
    this.#read = readBatchFile(text)
    if (this.#read.problems.length === 0) return true
    this.#reportProblems(this.#read.problems)
    return false
  }

  protected async perform(payouts: PayoutsService): Promise<Result> {
    const { rows, key: derived } = this.#read!
    const key = this.key ?? derived
    const { totalsOf } = await import('../src/commands/batch_file.ts')
    const inputs = rows.map((row) => row.input)
    const base = { file: this.file, key, totals: totalsOf(inputs), interrupted: false }
    if (this.dryRun) {
      const { quotePairs } = await import('../src/commands/batch_quotes.ts')
      const { client, config } = payouts
      const quotes = await quotePairs(inputs, (query) => client.quotes.fiatToStablecoin(query), {
        secrets: [config.apiKey],
        baseUrl: config.baseUrl,
      })
      return {
        ...base,
        dryRun: true,
        complete: false,
        alreadyComplete: false,
        counts: { rows: rows.length },
        quotes,
        rows: rows.map((row) => ({ ...describe(row), outcome: 'checked' })),
      }
    }
    const controller = new AbortController()
    const interrupt = () => {
      controller.abort()
      this.logger.logError(
        'Interrupted: stopping before the next chunk (the one in flight finishes; Ctrl-C again quits at once)'
      )
    }
    process.once('SIGINT', interrupt)
    try {
      const before = await payouts.findBatch(key)
      // A progress line on a terminal only: a file or a pipe gets the summary alone.
      const tty = !this.json && process.stdout.isTTY === true
      const batch = await payouts.executeBatch(
        rows.map((row) => row.input),
        {
          idempotencyKey: key,
          ownerId: this.owner ?? null,
          signal: controller.signal,
          ...(tty && {
            onChunk: (progress) => process.stdout.write(`\r${progressLine(progress)}`),
          }),
        }
      )
      if (tty) process.stdout.write('\n')
      return {
        ...base,
        dryRun: false,
        interrupted: controller.signal.aborted,
        complete: batch.complete,
        alreadyComplete: before?.complete === true,
        counts: batch.counts,
        rows: batch.rows.map((outcome) => {
          const row = describe(rows[outcome.index])
          if (outcome.outcome === 'created') {
            return { ...row, outcome: 'created', payoutId: outcome.payout.payoutUuid }
          }
          const { code, message } = outcome
          return { ...row, outcome: outcome.outcome, code, message }
        }),
      }
    } finally {
      process.removeListener('SIGINT', interrupt)
    }
  }

  /** A batch not complete, or a dry run that could not quote a pair it was to quote. */
  protected failed(result: Result) {
    if (result.dryRun) return result.quotes?.some((quote) => quote.error !== undefined) === true
    return !result.complete
  }

  protected print(result: Result) {
    const table = this.table()
    table.head(['Currency', 'Rows', 'Amount'])
    for (const total of result.totals) table.row([total.currency, String(total.rows), total.amount])
    table.render()
    if (result.dryRun) {
      this.#printQuotes(result.quotes ?? [])
      const failed = this.failed(result)
      const message = `${result.rows.length} rows checked, key ${result.key}: dry run: nothing sent`
      if (failed) this.logger.error(`${message}; a pair could not be quoted`)
      else this.logger.info(message)
      return
    }
    const summary = this.table()
    summary.head(['Outcome', 'Rows'])
    for (const [outcome, count] of Object.entries(result.counts)) {
      if (count > 0) summary.row([outcome, String(count)])
    }
    summary.render()
    for (const row of result.rows) {
      if (row.outcome === 'refused') {
        this.logger.log(`line ${row.line}: refused ${row.code}: ${row.message ?? ''}`.trimEnd())
      }
    }
    for (const [what, lines] of unfinishedOf(result.rows)) {
      this.logger.log(`${what}: ${lines.length} row(s), lines ${spans(lines)}`)
    }
    if (result.alreadyComplete) {
      this.logger.warning(
        `Batch ${result.key} was complete before this run: nothing sent. ` +
          'To pay the same rows again as a new batch, give it its own --key'
      )
    }
    if (result.complete) {
      this.logger.success(`Batch ${result.key}: every row created or refused`)
      return
    }
    const again = ['node ace payouts:batch', this.file]
    if (this.key !== undefined) again.push(`--key=${this.key}`)
    if (this.owner !== undefined) again.push(`--owner=${this.owner}`)
    if (this.account !== undefined) again.push(`--account=${this.account}`)
    this.logger.warning(
      `${result.interrupted ? 'Interrupted. ' : ''}Rows are left to send: run the same command again ` +
        `(${again.join(' ')}); rows already sent are never sent twice`
    )
  }

  /**
   * Per pair: the best route's numbers (an estimate: one quote for the pair's total, each row
   * priced again when it is executed), or why there are none; then each failed quote's pair,
   * code and message.
   */
  #printQuotes(quotes: PairQuote[]) {
    if (quotes.length === 0) return
    const table = this.table()
    table.head([
      'From',
      'To',
      'Rows',
      'Amount',
      'Rate',
      'Eff. rate',
      'Fee',
      'Est. to amount',
      'Routes',
      'Quote',
    ])
    for (const quote of quotes) {
      const numbers = [
        quote.rate,
        quote.effectiveRate,
        quote.fee,
        quote.estimatedToAmount,
        quote.routes,
      ]
      table.row([
        quote.from,
        quote.to,
        String(quote.rows),
        quote.amount,
        ...numbers.map((value) => (value === null ? '-' : String(value))),
        quote.quoted ? 'estimate' : quote.error ? `failed ${quote.error.code}` : 'not quoted',
      ])
    }
    table.render()
    if (quotes.some((quote) => quote.quoted)) {
      this.logger.info(
        "Estimates: one quote for each pair's total, best route; each row is priced again when it is executed"
      )
    }
    for (const quote of quotes) {
      const pair = `${quote.from} -> ${quote.to}`
      if (quote.error) this.logger.error(`${pair}: ${quote.reason}`)
      else if (!quote.quoted) this.logger.log(`${pair}: not quoted: ${quote.reason}`)
    }
  }

  /** Every problem on its own line (or one JSON object), then why nothing was sent. */
  #reportProblems(problems: FileProblem[]) {
    const message = `${this.file}: ${problems.length} problem(s), nothing sent`
    if (this.json) {
      this.logger.log(JSON.stringify({ error: { message, failure: this.failure, problems } }))
      return
    }
    for (const problem of problems) this.logger.error(`line ${problem.line}: ${problem.message}`)
    this.logger.error(message)
  }
}

/** The rows neither created nor refused, by outcome and code (`not_sent ABORTED`): their lines. */
function unfinishedOf(rows: RowResult[]) {
  const groups = new Map<string, number[]>()
  for (const row of rows) {
    if (row.outcome === 'created' || row.outcome === 'refused') continue
    const what = `${row.outcome} ${row.code ?? ''}${row.message ? ` (${row.message})` : ''}`
    groups.set(what, [...(groups.get(what) ?? []), row.line])
  }
  return groups
}

/**
 * One progress line: `chunk 3/10  300/1000 rows  298 created  2 refused  512 rows/s`, and the
 * rows that are neither when there are any.
 */
function progressLine({ chunk, chunks, rows, done, counts, elapsedMs }: BatchProgress) {
  const rate = elapsedMs > 0 ? Math.round((done * 1000) / elapsedMs) : 0
  const other = done - counts.created - counts.refused
  return (
    `chunk ${chunk + 1}/${chunks}  ${done}/${rows} rows  ${counts.created} created  ` +
    `${counts.refused} refused${other > 0 ? `  ${other} other` : ''}  ${rate} rows/s`
  )
}

/** Sorted line numbers as spans: `2-101, 105`. */
function spans(lines: number[]) {
  const parts: string[] = []
  let start = lines[0]
  for (let at = 1; at <= lines.length; at++) {
    if (lines[at] === lines[at - 1] + 1) continue
    parts.push(start === lines[at - 1] ? `${start}` : `${start}-${lines[at - 1]}`)
    start = lines[at]
  }
  return parts.join(', ')
}

/** A row's line and reference, as every result row shows them. */
function describe(row: { line: number; input: Record<string, unknown> }) {
  return { line: row.line, reference: (row.input.reference as string | undefined) ?? null }
}
