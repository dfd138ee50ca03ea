import { createHash } from 'node:crypto'
import { parse } from 'csv-parse/sync'
import { PayoutsValidationError } from '../client/errors.ts'
import type { ExecuteInput } from '../client/types.ts'
import { validateExecuteInput } from '../client/validation.ts'
import { MAX_BATCH_ROWS } from '../ledger/payout_batches.ts'

/** A column of a batch file and the execute field it fills. */
const COLUMNS = {
  recipientId: 'text',
  amount: 'amount',
  fromCurrency: 'currency',
  toCurrency: 'currency',
  userPaymentMethodId: 'text',
  walletAddress: 'text',
  recipientPaymentMethodId: 'text',
  targetAmount: 'amount',
  routeProtocol: 'text',
  paymentPurpose: 'text',
  reference: 'text',
  flow: 'text',
} as const

type Column = keyof typeof COLUMNS

/** Columns every file has. */
const REQUIRED: Column[] = ['recipientId', 'amount', 'fromCurrency', 'toCurrency']

/** A currency code as the file must write it: 3 to 5 capital letters (`USD`, `USDC`). */
const CURRENCY = /^[A-Z]{3,5}$/
/** An amount as the file must write it: digits, with an optional decimal part. */
const AMOUNT = /^\d+(\.\d+)?$/

/** One problem of a file, on its line (1 is the header). */
export interface FileProblem {
  line: number
  message: string
}

/** A row of the file, ready for `executeBatch`, with the line it came from. */
export interface FileRow {
  line: number
  input: ExecuteInput
}

/** A batch file read: its rows, or every problem found in it (then no row is to be sent). */
export interface BatchFile {
  rows: FileRow[]
  problems: FileProblem[]
  /** `csv-` and the first 32 hex digits of the SHA-256 of the rows as read. */
  key: string
}

/** `recipient_id`, `Recipient ID`, `recipientId` all name `recipientId`. */
function columnOf(header: string): Column | undefined {
  const wanted = header.replace(/[\s_-]/g, '').toLowerCase()
  return (Object.keys(COLUMNS) as Column[]).find((name) => name.toLowerCase() === wanted)
}

/**
 * Reads a batch file (CSV with a header row) into `executeBatch` rows, checking every row as
 * `execute` checks one, and reports every problem with its line: an unknown, missing or
 * repeated column, a malformed line (a stray quote, a wrong number of fields), a bad currency
 * code, a missing or malformed amount, a field the execute schema refuses.
 */
export function readBatchFile(text: string): BatchFile {
  const problems: FileProblem[] = []
  const records = parse(text, {
    bom: true,
    info: true,
    trim: true,
    skip_empty_lines: true,
    relax_column_count: true,
    skip_records_with_error: true,
    on_skip: (error) => {
      if (error) {
        problems.push({
          line: Number(error.lines),
          message: error.message.replace(/ at line \d+/, ''),
        })
      }
      return undefined
    },
  }) as unknown as Array<{ record: string[]; info: { lines: number } }>

  const [header, ...body] = records
  if (!header)
    return { rows: [], problems: [...problems, { line: 1, message: 'the file is empty' }], key: '' }
  const columns = header.record.map((name) => columnOf(name))
  header.record.forEach((name, at) => {
    if (columns[at] === undefined) {
      const known = Object.keys(COLUMNS).join(', ')
      problems.push({ line: header.info.lines, message: `unknown column "${name}" (use ${known})` })
    } else if (columns.indexOf(columns[at]) !== at) {
      problems.push({ line: header.info.lines, message: `column "${name}" is given twice` })
    }
  })
  for (const name of REQUIRED) {
    if (!columns.includes(name)) {
      problems.push({ line: header.info.lines, message: `the column "${name}" is missing` })
    }
  }
  if (!columns.includes('userPaymentMethodId') && !columns.includes('walletAddress')) {
    problems.push({
      line: header.info.lines,
      message: 'a column "userPaymentMethodId" (or "walletAddress" for stablecoin rows) is needed',
    })
  }
  if (body.length === 0) problems.push({ line: header.info.lines, message: 'the file has no rows' })
  if (body.length > MAX_BATCH_ROWS) {
    problems.push({
      line: header.info.lines,
      message: `more than ${MAX_BATCH_ROWS} rows: split it`,
    })
  }

  const rows: FileRow[] = []
  for (const { record, info } of body) {
    const line = info.lines
    if (record.length !== header.record.length) {
      problems.push({
        line,
        message: `${record.length} fields where the header has ${header.record.length}`,
      })
      continue
    }
    const row = readRow(record, columns, line, problems)
    if (row) rows.push({ line, input: row })
  }
  rows.sort((a, b) => a.line - b.line)
  problems.sort((a, b) => a.line - b.line)
  // Each row's fields sorted: the key never depends on the order a schema lists them in.
  const canonical = rows.map((row) =>
    Object.entries(row.input).sort(([a], [b]) => (a < b ? -1 : 1))
  )
  const digest = createHash('sha256').update(JSON.stringify(canonical)).digest('hex')
  return { rows, problems, key: `csv-${digest.slice(0, 32)}` }
}

/** One record as an execute input, or null with its problems added to `problems`. */
function readRow(
  record: string[],
  columns: Array<Column | undefined>,
  line: number,
  problems: FileProblem[]
): ExecuteInput | null {
  const before = problems.length
  const input: Record<string, unknown> = {}
  columns.forEach((column, at) => {
    const value = record[at]
    if (column === undefined || value === '') return
    const kind = COLUMNS[column]
    if (kind === 'currency' && !CURRENCY.test(value)) {
      problems.push({
        line,
        message: `${column}: "${value}" is not a currency code (USD, MXN, USDC)`,
      })
    } else if (kind === 'amount' && !AMOUNT.test(value)) {
      problems.push({ line, message: `${column}: "${value}" is not an amount (like 250 or 99.50)` })
    } else {
      input[column] = kind === 'amount' ? Number(value) : value
    }
  })
  for (const column of REQUIRED) {
    if (
      input[column] === undefined &&
      !problems.slice(before).some((p) => p.message.startsWith(`${column}:`))
    ) {
      problems.push({ line, message: `${column} is missing` })
    }
  }
  if (problems.length > before) return null
  try {
    const { flow, payload } = validateExecuteInput(input as ExecuteInput)
    return (input.flow === undefined ? payload : { flow, ...payload }) as ExecuteInput
  } catch (error) {
    if (!(error instanceof PayoutsValidationError)) throw error
    problems.push({ line, message: error.message })
    return null
  }
}

/** Rows and amounts per source currency, in the order of the file (`--json`'s `totals`). */
export function totalsOf(
  inputs: ExecuteInput[]
): Array<{ currency: string; rows: number; amount: string }> {
  const amounts = new Map<string, unknown[]>()
  for (const input of inputs) {
    const currency = String(input.fromCurrency)
    const of = amounts.get(currency) ?? []
    of.push(input.amount)
    amounts.set(currency, of)
  }
  return [...amounts].map(([currency, of]) => ({
    currency,
    rows: of.length,
    amount: amountTotal(of),
  }))
}

/**
 * The sum of amounts as a decimal string (`3000`, `31250.5`), added in integer millionths so
 * no float drift shows (`0.1 + 0.2` is `0.3`).
 */
export function amountTotal(amounts: unknown[]): string {
  let micros = 0n
  for (const amount of amounts) micros += BigInt(Math.round(Number(amount) * 1_000_000))
  const whole = micros / 1_000_000n
  const fraction = (micros % 1_000_000n).toString().padStart(6, '0').replace(/0+$/, '')
  return fraction ? `${whole}.${fraction}` : `${whole}`
}
