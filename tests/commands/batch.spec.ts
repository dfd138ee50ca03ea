import { spawn } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { test } from '@japa/runner'
import { seededRandom } from '../../src/emulator/random.ts'
import PayoutsBatch from '../../commands/payouts_batch.ts'
import { readBatchFile } from '../../src/commands/batch_file.ts'
import type { PayoutsEmulator } from '../../src/emulator/main.ts'
import { api, startEmulator } from '../emulator/helpers.ts'
import { connectionConfig, setupDatabase, TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'
import { startRecordingProxy } from '../helpers/recording_proxy.ts'
import { scratchApp } from '../helpers/scratch_app.ts'
import { jsonOf } from './helpers.ts'
import { TS_HOOKS } from '../helpers/ts_hooks.ts'

const REPO = fileURLToPath(new URL('../../', import.meta.url))
const BATCH = '/rfq/execute-batch'
const HEADER = 'recipientId,amount,fromCurrency,toCurrency,userPaymentMethodId,reference'

/**
 * A CSV of `count` valid rows for the emulator's seeded recipient, 10 to 14 USD each; the rows
 * in `unknown` name a well-formed recipient id the emulator does not know (refused by it).
 */
function csvOf(emu: PayoutsEmulator, count: number, tag = 'friday', unknown = new Set<number>()) {
  const recipient = emu.admin.seedRecipient()
  const method = emu.admin.accountPaymentMethodId
  const lines = Array.from(
    { length: count },
    (_, i) =>
      `${unknown.has(i) ? unknownRecipient(i) : recipient.id},${10 + (i % 5)},USD,MXN,${method},${tag}/${i}`
  )
  return `${HEADER}\n${lines.join('\n')}\n`
}

/** The fiat-to-stablecoin quote endpoint, the one quote endpoint the spec documents. */
const QUOTES = '/quotes/fiat-to-stablecoin/all'
const NOT_QUOTABLE = "not quoted: the service's spec shows no quote endpoint for this pair"
/** A key of the right form the emulator does not know: its quote calls get 401. */
const WRONG_KEY = `sk_test_${'Q'.repeat(43)}`

/**
 * A CSV of every flow for the emulator's seeded recipient: `count` rows per (from, to) pair,
 * 10.25 to 14.25 each (a stablecoin source pays from a wallet, a fiat one from the account's
 * payment method), and each pair's total as the command writes it.
 */
function mixedCsvOf(emu: PayoutsEmulator, pairs: Array<[string, string, number]>) {
  const recipient = emu.admin.seedRecipient().id
  const method = emu.admin.accountPaymentMethodId
  const lines: string[] = []
  const totals: Record<string, string> = {}
  for (const [from, to, count] of pairs) {
    let cents = 0
    for (let i = 0; i < count; i++) {
      cents += (10 + (i % 5)) * 100 + 25
      const source = ['USDC', 'USDT'].includes(from) ? `,${'0x' + '9'.repeat(40)}` : `${method},`
      lines.push(`${recipient},${10 + (i % 5)}.25,${from},${to},${source},${from}-${to}/${i}`)
    }
    totals[`${from}>${to}`] = String(cents / 100)
  }
  const header =
    'recipientId,amount,fromCurrency,toCurrency,userPaymentMethodId,walletAddress,reference'
  return { text: `${header}\n${lines.join('\n')}\n`, totals }
}

/** The emulator's own answer to the fiat-to-stablecoin quote of `amount`: its best route. */
async function emulatorQuote(emu: PayoutsEmulator, from: string, to: string, amount: string) {
  const query = new URLSearchParams({ fromCurrency: from, toCurrency: to, amount })
  const { status, json } = await api(emu, 'GET', `${QUOTES}?${query}`)
  if (status !== 200) throw new Error(`the emulator answered ${status} to the reference quote`)
  const routes = json as Array<Record<string, number>>
  const best = routes.reduce((a, b) => (b.toAmount > a.toAmount ? b : a))
  return {
    rate: best.exchangeRate,
    effectiveRate: best.effRate,
    fee: best.fee,
    estimatedToAmount: best.toAmount,
    routes: routes.length,
  }
}

/** A well-formed recipient id the emulator does not know. */
const unknownRecipient = (index: number) =>
  `00000000-0000-4000-8000-${String(index).padStart(12, '0')}`

/**
 * A seeded pseudo-random source (mulberry32): the seed is `BATCH_SEED` when set, else a fresh
 * one, printed so a failing run can be replayed.
 */
function seeded(what: string) {
  const given = process.env.BATCH_SEED
  const seed = given ? Number(given) : Math.floor(Math.random() * 2 ** 31)
  console.log(`${what}: seed ${seed} (BATCH_SEED=${seed} replays it)`)
  return seededRandom(seed)
}

/** The payouts:created events heard, and whether each payout's was heard once. */
function createdOnce(events: Array<{ name: string; eventKey?: string; payoutId?: string }>) {
  const created = events.filter((event) => event.name === 'payouts:created')
  return {
    count: created.length,
    payouts: new Set(created.map((event) => event.payoutId)).size,
    keys: new Set(created.map((event) => event.eventKey)).size,
  }
}

/** Writes `text` to a file in a fresh folder; answers its path. */
async function fileOf(cleanup: (fn: () => Promise<void>) => void, text: string) {
  const folder = await mkdtemp(join(tmpdir(), 'svc-payouts-batch-'))
  cleanup(() => rm(folder, { recursive: true, force: true }))
  const path = join(folder, 'payouts.csv')
  await writeFile(path, text)
  return path
}

/**
 * The emulator behind a recording proxy, and a real host app whose plugin talks to the
 * proxy: `sent()` is every execute-batch request that went over the wire.
 */
async function setup(
  cleanup: (fn: () => Promise<void>) => void,
  payouts: Parameters<typeof startHttpApp>[1] = {}
) {
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const proxy = await startRecordingProxy(cleanup, emu.baseUrl)
  const app = await startHttpApp(cleanup, {
    apiKey: emu.apiKey,
    baseUrl: proxy.baseUrl,
    clientRateLimiter: false,
    ...payouts,
  })
  const ace = await app.app.container.make('ace')
  ace.ui.switchMode('raw')
  const run = async (argv: string[]) => {
    const command = await ace.create(PayoutsBatch, argv)
    await command.exec()
    return command
  }
  const db = await app.app.container.make('lucid.db')
  const ledgerPayouts = async () =>
    Number((await db.from(`${app.prefix}payouts`).count('* as n'))[0].n)
  const sent = () => proxy.requests.filter((r) => r.method === 'POST' && r.path === BATCH)
  const quoted = () => proxy.requests.filter((r) => r.method === 'GET' && r.path === QUOTES)
  /** Every request that could make a payout (execute, execute-batch). */
  const executed = () =>
    proxy.requests.filter((r) => r.method === 'POST' && r.path.startsWith('/rfq/execute'))
  const created = () =>
    createdOnce(app.events.map(({ name, data }) => ({ name, ...(data as object) })))
  return { emu, app, proxy, run, sent, quoted, executed, ledgerPayouts, created }
}

/**
 * The emulator (behind a recording proxy that holds or loses execute-batch answers), a scratch
 * app on its own database whose `payouts:batch` runs as a child process (`start`), a file of
 * `rows` rows, and what the ledger holds.
 */
async function childSetup(
  cleanup: (fn: () => Promise<void>) => void,
  name: string,
  rows: number,
  proxied = false
) {
  const { db, prefix } = await setupDatabase(cleanup, name)
  const emu = await startEmulator(cleanup, { rateLimits: false })
  const proxy = await startRecordingProxy(cleanup, emu.baseUrl, BATCH)
  const text = csvOf(emu, rows)
  const file = await fileOf(cleanup, text)
  const root = await scratchApp(cleanup, name, appFiles())
  const eventsFile = join(root, 'events.ndjson')
  const options = {
    prefix,
    connection: connectionConfig(name),
    baseUrl: proxied ? proxy.baseUrl : emu.baseUrl,
    apiKey: emu.apiKey,
    eventsFile,
  }
  const count = async (table: string) =>
    Number((await db.from(`${prefix}${table}`).count('* as n'))[0].n)
  const events = async () =>
    (await readFile(eventsFile, 'utf8').catch(() => ''))
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line))
  return {
    db,
    prefix,
    emu,
    proxy,
    file,
    text,
    count,
    events,
    start: (args: string[] = []) => startCommand(cleanup, root, options, [file, ...args]),
  }
}

test.group(`payouts:batch (${TEST_DB})`, (group) => {
  group.each.timeout(90_000)

  test('a 250-row file: 250 payouts in 3 requests; the same file again sends nothing', async ({
    assert,
    cleanup,
  }) => {
    const { emu, run, sent, ledgerPayouts } = await setup(cleanup)
    const text = csvOf(emu, 250)
    const file = await fileOf(cleanup, text)
    const first = await run([file])
    first.assertSucceeded()
    first.assertLogMatches(/every row created or refused/)
    assert.lengthOf(emu.admin.payouts(), 250)
    assert.equal(await ledgerPayouts(), 250)
    assert.lengthOf(sent(), 3)
    const { key } = readBatchFile(text)
    assert.deepEqual(
      sent().map((r) => r.idempotencyKey),
      [`${key}-c0`, `${key}-c1`, `${key}-c2`],
      "the key is the rows' hash"
    )

    const again = await run([file])
    again.assertSucceeded()
    assert.lengthOf(sent(), 3, 'nothing sent again: answered from the ledger')
    again.assertLogMatches(/was complete before this run: nothing sent/)
    assert.lengthOf(emu.admin.payouts(), 250)
    assert.lengthOf(emu.admin.batches(), 3)
    assert.equal(await ledgerPayouts(), 250)
  })

  test('a file with bad lines is refused whole, every bad line named, nothing sent', async ({
    assert,
    cleanup,
  }) => {
    const { emu, run, sent } = await setup(cleanup)
    const recipient = emu.admin.seedRecipient().id
    const method = emu.admin.accountPaymentMethodId
    const file = await fileOf(
      cleanup,
      [
        HEADER,
        `${recipient},10,USD,MXN,${method},ok/1`,
        `${recipient},10,US$,MXN,${method},bad-currency`,
        `${recipient},,USD,MXN,${method},missing-amount`,
        `${recipient},10,USD,MXN,${method},stray"quote`,
        `${recipient},10,USD,MXN,${method},ok/2`,
        `not-a-uuid,10,USD,MXN,${method},bad-recipient`,
        `${recipient},ten,USD,MXN,${method},bad-amount`,
      ].join('\n')
    )
    const command = await run([file])
    command.assertFailed()
    command.assertLogMatches(/line 3: fromCurrency: "US\$" is not a currency code/)
    command.assertLogMatches(/line 4: amount is missing/)
    command.assertLogMatches(/line 5: Invalid Opening Quote/)
    command.assertLogMatches(/line 7: recipientId:/)
    command.assertLogMatches(/line 8: amount: "ten" is not an amount/)
    command.assertLogMatches(/5 problem\(s\), nothing sent/)
    assert.lengthOf(sent(), 0)
    assert.lengthOf(emu.admin.payouts(), 0)

    const columns = await fileOf(cleanup, `${HEADER},iban\n${recipient},10,USD,MXN,${method},x,y\n`)
    const unknown = await run([columns, '--json'])
    unknown.assertFailed()
    const { problems } = jsonOf(unknown).error
    assert.lengthOf(problems, 1)
    assert.equal(problems[0].line, 1)
    assert.match(problems[0].message, /unknown column "iban"/)
    const badKey = await run([file, '--key=a b'])
    badKey.assertFailed()
    badKey.assertLogMatches(/--key must be 8 to 240 characters/)
    assert.lengthOf(sent(), 0)
  })

  test('--dry-run prints totals per currency and sends nothing', async ({ assert, cleanup }) => {
    const { emu, run, sent, ledgerPayouts } = await setup(cleanup)
    const file = await fileOf(cleanup, csvOf(emu, 250))
    const command = await run([file, '--dry-run'])
    command.assertSucceeded()
    command.assertLogMatches(/dry run: nothing sent/)
    // 50 rows each of 10, 11, 12, 13, 14: 3,000 USD.
    command.assertLogMatches(/3000/)
    assert.lengthOf(sent(), 0)
    assert.lengthOf(emu.admin.payouts(), 0)
    assert.equal(await ledgerPayouts(), 0)
    const json = jsonOf(await run([file, '--dry-run', '--json']))
    assert.deepEqual(json.totals, [{ currency: 'USD', rows: 250, amount: '3000' }])
    assert.isTrue(json.dryRun)
    assert.lengthOf(sent(), 0)
  })

  test('--dry-run quotes each fiat-to-stablecoin pair once for its total; other pairs are not quoted; nothing sent', async ({
    assert,
    cleanup,
  }) => {
    const { emu, run, quoted, executed, ledgerPayouts } = await setup(cleanup)
    // 1,000 rows, 950 of them onramp: two quote calls, not 950.
    const { text, totals } = mixedCsvOf(emu, [
      ['USD', 'USDC', 900],
      ['USD', 'MXN', 40],
      ['EUR', 'USDT', 50],
      ['USDC', 'MXN', 10],
    ])
    const file = await fileOf(cleanup, text)
    const command = await run([file, '--dry-run'])
    command.assertSucceeded()
    assert.lengthOf(quoted(), 2, 'one quote call per onramp pair, none per row')
    assert.lengthOf(executed(), 0)
    assert.lengthOf(emu.admin.payouts(), 0)
    assert.equal(await ledgerPayouts(), 0)

    const logs = command.logger
      .getLogs()
      .map((log) => log.message)
      .join('\n')
    // The table's row of each onramp pair (raw mode: cells joined by |): the emulator's best
    // route for the pair's total.
    for (const [from, to, rows] of [
      ['USD', 'USDC', 900],
      ['EUR', 'USDT', 50],
    ] as const) {
      const amount = totals[`${from}>${to}`]
      const quote = await emulatorQuote(emu, from, to, amount)
      const row = logs.split('\n').find((line) => line.startsWith(`${from}|${to}|`))
      assert.deepEqual(row?.split('|'), [
        from,
        to,
        String(rows),
        amount,
        String(quote.rate),
        String(quote.effectiveRate),
        String(quote.fee),
        String(quote.estimatedToAmount),
        String(quote.routes),
        'estimate',
      ])
    }
    assert.include(logs, 'USD|MXN|40|490|-|-|-|-|-|not quoted')
    command.assertLogMatches(/Estimates: one quote for each pair's total/)
    command.assertLogMatches(/each row is priced again when it is executed/)
    assert.include(logs, `USD -> MXN: ${NOT_QUOTABLE}`)
    assert.include(logs, `USDC -> MXN: ${NOT_QUOTABLE}`)
    command.assertLogMatches(/1000 rows checked, key csv-[0-9a-f]{32}: dry run: nothing sent/)
  })

  test('--dry-run --json: per pair from, to, rows, amount, quoted, reason, rate, effectiveRate, fee, estimatedToAmount, routes', async ({
    assert,
    cleanup,
  }) => {
    const { emu, run, quoted, executed } = await setup(cleanup)
    const { text, totals } = mixedCsvOf(emu, [
      ['EUR', 'USDT', 7],
      ['USD', 'MXN', 3],
      ['USDC', 'MXN', 2],
    ])
    const file = await fileOf(cleanup, text)
    const command = await run([file, '--dry-run', '--json'])
    command.assertSucceeded()
    const result = jsonOf(command)
    assert.containsSubset(result, { dryRun: true, complete: false, counts: { rows: 12 } })
    const reason = NOT_QUOTABLE.replace('not quoted: ', '')
    const unquoted = { rate: null, effectiveRate: null, fee: null, estimatedToAmount: null }
    assert.deepEqual(result.quotes, [
      {
        from: 'EUR',
        to: 'USDT',
        flow: 'onramp',
        rows: 7,
        amount: totals['EUR>USDT'],
        quoted: true,
        estimate: true,
        reason: null,
        ...(await emulatorQuote(emu, 'EUR', 'USDT', totals['EUR>USDT'])),
      },
      {
        from: 'USD',
        to: 'MXN',
        flow: 'fiat_to_fiat',
        rows: 3,
        amount: totals['USD>MXN'],
        quoted: false,
        estimate: false,
        reason,
        ...unquoted,
        routes: null,
      },
      {
        from: 'USDC',
        to: 'MXN',
        flow: 'stablecoin_to_fiat',
        rows: 2,
        amount: totals['USDC>MXN'],
        quoted: false,
        estimate: false,
        reason,
        ...unquoted,
        routes: null,
      },
    ])
    assert.isAbove(result.quotes[0].rate, 1, 'EUR to USDT: more than one USDT per EUR')
    assert.isBelow(result.quotes[0].effectiveRate, result.quotes[0].rate, 'fees lower the rate')
    assert.lengthOf(quoted(), 1)
    assert.lengthOf(executed(), 0)
    assert.lengthOf(emu.admin.payouts(), 0)
  })

  test('--dry-run whose quote fails (401, then 429 after retries): the pair named with its code, exit 1, nothing sent; a bad file is refused before any quote', async ({
    assert,
    cleanup,
  }) => {
    const { emu, run, quoted, executed, ledgerPayouts } = await setup(cleanup, {
      apiKey: WRONG_KEY,
    })
    const { text } = mixedCsvOf(emu, [
      ['USD', 'USDC', 5],
      ['USD', 'MXN', 5],
    ])
    const file = await fileOf(cleanup, text)
    const command = await run([file, '--dry-run'])
    command.assertFailed()
    command.assertLogMatches(/USD -> USDC: quote failed: UNAUTHORIZED: /)
    command.assertLogMatches(/failed UNAUTHORIZED/)
    command.assertLogMatches(/USD -> MXN: not quoted/)
    command.assertLogMatches(/dry run: nothing sent; a pair could not be quoted/)
    const logs = JSON.stringify(command.logger.getLogs())
    assert.notInclude(logs, WRONG_KEY.slice(8), 'the API key is never printed')
    assert.lengthOf(quoted(), 1, 'a 401 is not retried')

    const json = await run([file, '--dry-run', '--json'])
    json.assertFailed()
    const [usdc, mxn] = jsonOf(json).quotes
    assert.containsSubset(usdc, {
      from: 'USD',
      to: 'USDC',
      quoted: false,
      rate: null,
      estimatedToAmount: null,
      error: { code: 'UNAUTHORIZED' },
    })
    assert.match(usdc.reason, /^quote failed: UNAUTHORIZED: /)
    assert.containsSubset(mxn, { from: 'USD', to: 'MXN', quoted: false })
    assert.notProperty(mxn, 'error')
    assert.notInclude(JSON.stringify(jsonOf(json)), WRONG_KEY.slice(8))

    // A bad file: refused before any quote.
    const before = quoted().length
    const bad = await fileOf(cleanup, text.replace(',USDC,', ',US$,'))
    const refused = await run([bad, '--dry-run'])
    refused.assertFailed()
    refused.assertLogMatches(/problem\(s\), nothing sent/)
    assert.lengthOf(quoted(), before, 'no quote for a refused file')

    // The service rate-limits every quote (429, Retry-After 1 s): after the retry, the pair fails.
    const limited = await setup(cleanup, { retry: { maxRetries: 1 } })
    limited.emu.admin.setFaults({ rateLimitStormRate: 1, pathPrefixes: [QUOTES] })
    const second = mixedCsvOf(limited.emu, [
      ['USD', 'USDC', 3],
      ['EUR', 'USDT', 3],
    ])
    const stormed = await limited.run([await fileOf(cleanup, second.text), '--dry-run', '--json'])
    stormed.assertFailed()
    const quotes = jsonOf(stormed).quotes
    assert.deepEqual(
      quotes.map((quote: any) => [quote.from, quote.to, quote.quoted, quote.error?.code]),
      [
        ['USD', 'USDC', false, 'RATE_LIMITED'],
        ['EUR', 'USDT', false, 'RATE_LIMITED'],
      ]
    )
    assert.lengthOf(limited.quoted(), 4, 'each pair: one call and its one retry')
    assert.equal(limited.emu.admin.faultStats().rateLimited, 4)

    assert.lengthOf(executed(), 0)
    assert.lengthOf(limited.executed(), 0)
    assert.lengthOf(emu.admin.payouts(), 0)
    assert.lengthOf(limited.emu.admin.payouts(), 0)
    assert.equal(await ledgerPayouts(), 0)
    assert.equal(await limited.ledgerPayouts(), 0)
  })

  test('--json: every row with its line and outcome; a refused row keeps its code', async ({
    assert,
    cleanup,
  }) => {
    const { emu, run } = await setup(cleanup)
    const method = emu.admin.accountPaymentMethodId
    // An unknown recipient: valid in the file, refused by the service.
    const text = `${csvOf(emu, 3, 'json')}${randomUUID()},10,USD,MXN,${method},json/unknown\n`
    const file = await fileOf(cleanup, text)
    const command = await run([file, '--json', '--owner=tenant-7'])
    command.assertSucceeded()
    const result = jsonOf(command)
    assert.containsSubset(result, {
      file,
      key: readBatchFile(text).key,
      dryRun: false,
      interrupted: false,
      complete: true,
      alreadyComplete: false,
      counts: { created: 3, refused: 1, unknown: 0, not_sent: 0, failed: 0, needs_attention: 0 },
      totals: [{ currency: 'USD', rows: 4, amount: '43' }],
    })
    assert.match(result.key, /^csv-[0-9a-f]{32}$/)
    assert.deepInclude(result.rows[0], { line: 2, reference: 'json/0', outcome: 'created' })
    assert.isString(result.rows[0].payoutId)
    assert.deepInclude(result.rows[3], {
      line: 5,
      reference: 'json/unknown',
      outcome: 'refused',
      code: 'INVALID_PARAMETER',
    })
    assert.deepEqual(
      [...new Set(emu.admin.payouts().map((p) => p.idempotencyKey ?? p.batchKey))],
      [`${result.key}-c0`]
    )
  })

  test('1,000 rows, the answer of one chunk lost (the service made it), then again: exactly 1,000 payouts', async ({
    assert,
    cleanup,
  }) => {
    const random = seeded('payouts:batch lost answer')
    // No client retries: the lost answer is the command's to recover, not the client's.
    const { emu, proxy, run, sent, ledgerPayouts, created } = await setup(cleanup, {
      retry: { maxRetries: 0 },
    })
    const file = await fileOf(cleanup, csvOf(emu, 1000))
    const lost = Math.floor(random() * 10)
    console.log(`  the answer of chunk ${lost} lost`)
    proxy.loseNext(1, lost)
    const first = await run([file, '--json'])
    first.assertFailed()
    // The batch stops at the lost chunk (unknown): the later ones are not sent.
    assert.containsSubset(jsonOf(first), {
      complete: false,
      counts: { created: lost * 100, unknown: 100, not_sent: 900 - lost * 100 },
    })
    assert.lengthOf(emu.admin.batches(), lost + 1, 'the lost chunk was made')
    assert.equal(await ledgerPayouts(), lost * 100)
    const before = sent().length
    assert.equal(before, lost + 1)

    const again = await run([file])
    again.assertSucceeded()
    again.assertLogMatches(/every row created or refused/)
    assert.lengthOf(emu.admin.payouts(), 1000)
    assert.lengthOf(emu.admin.batches(), 10, 'the lost chunk answered again from its key')
    assert.equal(await ledgerPayouts(), 1000)
    assert.deepEqual(created(), { count: 1000, payouts: 1000, keys: 1000 })
    const resent = sent().slice(before)
    assert.equal(resent[0].idempotencyKey, sent()[lost].idempotencyKey, 'the same key again')
    assert.lengthOf(resent, 10 - lost, 'the lost chunk and those not sent, once each')
  })

  test('1,000 rows, 5 % refused by the service: each named with its code, exit 0, the rest paid once; again sends nothing', async ({
    assert,
    cleanup,
  }) => {
    const random = seeded('payouts:batch refused rows')
    const { emu, run, sent, ledgerPayouts, created } = await setup(cleanup)
    const refused = new Set<number>()
    while (refused.size < 50) refused.add(Math.floor(random() * 1000))
    const file = await fileOf(cleanup, csvOf(emu, 1000, 'refused', refused))
    const command = await run([file])
    command.assertSucceeded()
    command.assertLogMatches(/every row created or refused/)
    for (const index of refused) {
      // Line 1 is the header: row i is on line i + 2.
      command.assertLogMatches(new RegExp(`line ${index + 2}: refused INVALID_PARAMETER`))
    }
    const named = command.logger.getLogs().filter((log) => /^line \d+: refused /.test(log.message))
    assert.lengthOf(named, 50, 'only the refused rows are named')
    assert.lengthOf(emu.admin.payouts(), 950)
    assert.equal(await ledgerPayouts(), 950)
    assert.deepEqual(created(), { count: 950, payouts: 950, keys: 950 })
    assert.lengthOf(sent(), 10)

    const again = await run([file, '--json'])
    again.assertSucceeded()
    const result = jsonOf(again)
    assert.containsSubset(result, {
      alreadyComplete: true,
      complete: true,
      counts: { created: 950, refused: 50 },
    })
    assert.lengthOf(sent(), 10, 'nothing sent again, the refused rows neither')
    assert.lengthOf(emu.admin.payouts(), 950)
    assert.equal(await ledgerPayouts(), 950)
    assert.deepEqual(created(), { count: 950, payouts: 950, keys: 950 })
  })

  test('on a terminal, a progress line after each chunk; none with --json', async ({
    assert,
    cleanup,
  }) => {
    const { emu, run } = await setup(cleanup)
    const file = await fileOf(cleanup, csvOf(emu, 250, 'tty'))
    const written: string[] = []
    const { isTTY } = process.stdout
    const write = process.stdout.write
    process.stdout.isTTY = true
    process.stdout.write = ((text: string) => written.push(String(text)) > 0) as never
    try {
      ;(await run([file])).assertSucceeded()
      const lines = written.join('')
      assert.match(
        lines,
        /\rchunk 1\/3 {2}100\/250 rows {2}100 created {2}0 refused {2}\d+ rows\/s/
      )
      assert.match(lines, /\rchunk 3\/3 {2}250\/250 rows {2}250 created {2}0 refused/)
      written.length = 0
      ;(await run([file, '--json'])).assertSucceeded()
      assert.notInclude(written.join(''), 'rows/s')
    } finally {
      process.stdout.isTTY = isTTY
      process.stdout.write = write
    }
  })

  test('the key follows the rows, not the file layout', async ({ assert }) => {
    const id = randomUUID()
    const method = randomUUID()
    const a = readBatchFile(`${HEADER}\n${id},10,USD,MXN,${method},r/1\n`)
    const b = readBatchFile(
      `reference,user_payment_method_id,to_currency,from_currency,amount,recipient_id\r\n` +
        `"r/1", ${method} ,MXN,USD,10.0,${id}\r\n\r\n`
    )
    assert.deepEqual([a.problems, b.problems], [[], []])
    assert.equal(a.key, b.key)
    assert.notEqual(a.key, readBatchFile(`${HEADER}\n${id},11,USD,MXN,${method},r/1\n`).key)
  })
})

test.group(`payouts:batch | killed and run again (${TEST_DB})`, (group) => {
  group.each.timeout(120_000)

  test('SIGKILL while a chunk is held, then the same command: exactly 250 payouts', async ({
    assert,
    cleanup,
  }) => {
    const { emu, count, start } = await childSetup(cleanup, 'batchcmd', 250)

    // The service holds the first chunk long enough for the test to kill the command.
    emu.admin.setFaults({ processingDelayMs: 1500 })
    const first = start()
    const started = Date.now()
    while ((await count('execution_intents')) < 3 || emu.state.idempotency.size === 0) {
      if (Date.now() - started > 30_000) throw new Error(`never sent: ${first.output()}`)
      if (first.child.exitCode !== null) throw new Error(`exited early: ${first.output()}`)
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    first.child.kill('SIGKILL')
    await first.exited
    assert.equal(first.child.signalCode, 'SIGKILL')
    assert.notInclude(first.output(), 'every row created or refused')
    await new Promise((resolve) => setTimeout(resolve, 1700))
    emu.admin.setFaults({})

    const second = start()
    assert.equal(await second.exited, 0, second.output())
    assert.include(second.output(), 'every row created or refused')
    assert.lengthOf(emu.admin.payouts(), 250)
    assert.lengthOf(emu.admin.batches(), 3, 'the held chunk was made once, then answered again')
    assert.equal(await count('payouts'), 250)
  })

  test('1,000 rows, SIGKILL after a random number of chunks answered, then again: 1,000 payouts, each payouts:created once', async ({
    assert,
    cleanup,
  }) => {
    const random = seeded('payouts:batch SIGKILL')
    const { emu, proxy, count, events, start } = await childSetup(cleanup, 'batchkill', 1000, true)
    // 0 to 9 of the 10 chunks answered; the next one held before the service sees it, or
    // made by the service and its answer held: then the command is killed.
    const answered = Math.floor(random() * 10)
    const made = random() < 0.5
    console.log(
      `  ${answered} chunk(s) answered, the next ${made ? 'made, its answer held' : 'held unsent'}`
    )
    const held = proxy.holdNext(answered, made)
    const first = start()
    await Promise.race([
      held,
      first.exited.then(() => {
        throw new Error(`exited before the hold: ${first.output()}`)
      }),
    ])
    first.child.kill('SIGKILL')
    await first.exited
    assert.equal(first.child.signalCode, 'SIGKILL')
    assert.lengthOf(emu.admin.payouts(), answered * 100 + (made ? 100 : 0))
    assert.equal(await count('payouts'), answered * 100, 'the held chunk was never stored')

    const second = start()
    assert.equal(await second.exited, 0, second.output())
    assert.include(second.output(), 'every row created or refused')
    assert.lengthOf(emu.admin.payouts(), 1000)
    assert.lengthOf(emu.admin.batches(), 10, 'each chunk made once')
    assert.equal(await count('payouts'), 1000)
    assert.deepEqual(createdOnce(await events()), { count: 1000, payouts: 1000, keys: 1000 })
    assert.notInclude(second.output(), 'rows/s', 'no progress line when stdout is not a terminal')
  })
})

test.group(`payouts:batch | Ctrl-C (${TEST_DB})`, (group) => {
  group.each.timeout(120_000)

  test('SIGINT stops before the next chunk, says how to resume; the same command sends the rest', async ({
    assert,
    cleanup,
  }) => {
    const { emu, count, start } = await childSetup(cleanup, 'batchint', 250)
    emu.admin.setFaults({ processingDelayMs: 1000 })
    const first = start()
    const started = Date.now()
    while (emu.state.idempotency.size === 0) {
      if (Date.now() - started > 30_000) throw new Error(`never sent: ${first.output()}`)
      if (first.child.exitCode !== null) throw new Error(`exited early: ${first.output()}`)
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    first.child.kill('SIGINT')
    assert.equal(await first.exited, 1, first.output())
    assert.include(first.output(), 'Interrupted')
    assert.include(first.output(), 'run the same command again')
    assert.match(first.output(), /not_sent ABORTED.*150 row\(s\), lines 102-251/)
    assert.lengthOf(emu.admin.payouts(), 100, 'the chunk in flight finished, no other was sent')
    emu.admin.setFaults({})

    const second = start()
    assert.equal(await second.exited, 0, second.output())
    assert.lengthOf(emu.admin.payouts(), 250)
    assert.lengthOf(emu.admin.batches(), 3)
    assert.equal(await count('payouts'), 250)
  })
})

const href = (path: string) => pathToFileURL(join(REPO, path)).href

/** An app shaped like configure's output, with `payouts:batch` and the test's database. */
function appFiles(): Record<string, string> {
  return {
    'adonisrc.ts': `import { defineConfig } from '@adonisjs/core/app'

export default defineConfig({
  commands: [() => import('./payouts_commands.ts')],
  preloads: [() => import('./start/events.ts')],
  providers: [
    () => import('@adonisjs/core/providers/app_provider'),
    () => import('@adonisjs/lucid/database_provider'),
    () => import('${href('providers/payouts_provider.ts')}'),
  ],
})
`,
    'payouts_commands.ts': `import { ListLoader } from '@adonisjs/core/ace'
import PayoutsBatch from '${href('commands/payouts_batch.ts')}'

const loader = new ListLoader([PayoutsBatch])
export const getMetaData = () => loader.getMetaData()
export const getCommand = (metaData: any) => loader.getCommand(metaData)
`,
    'start/env.ts': `import { Env } from '@adonisjs/core/env'

export default await Env.create(new URL('../', import.meta.url), {
  NODE_ENV: Env.schema.enum(['development', 'production', 'test'] as const),
  APP_KEY: Env.schema.string(),
})
`,
    'start/events.ts': `import { appendFileSync } from 'node:fs'
import emitter from '@adonisjs/core/services/emitter'

const { eventsFile } = JSON.parse(process.env.BATCH_TEST!)
if (eventsFile) {
  emitter.on('payouts:created', (event: any) => {
    const line = { name: 'payouts:created', eventKey: event.eventKey, payoutId: event.payoutId }
    appendFileSync(eventsFile, JSON.stringify(line) + '\\n')
  })
}
`,
    'config/database.ts': `import { defineConfig } from '@adonisjs/lucid'

const { connection } = JSON.parse(process.env.BATCH_TEST!)
export default defineConfig({ connection: 'main', connections: { main: connection } })
`,
    'config/payouts.ts': `import { defineConfig } from '${href('index.ts')}'

const { prefix, baseUrl, apiKey } = JSON.parse(process.env.BATCH_TEST!)
export default defineConfig({
  apiKey,
  baseUrl,
  clientRateLimiter: false,
  jobs: { enabled: false },
  ledger: { tablePrefix: prefix },
})
`,
  }
}

/** `node ace payouts:batch ...args` in the scratch app; `exited` resolves its exit code. */
function startCommand(
  cleanup: (fn: () => Promise<void>) => void,
  root: string,
  options: object,
  args: string[]
) {
  const child = spawn(process.execPath, [TS_HOOKS, 'bin/console.ts', 'payouts:batch', ...args], {
    cwd: root,
    env: {
      ...process.env,
      NODE_ENV: 'development',
      APP_KEY: randomBytes(32).toString('base64url'),
      BATCH_TEST: JSON.stringify(options),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  for (const stream of [child.stdout!, child.stderr!]) {
    stream.setEncoding('utf8')
    stream.on('data', (chunk) => (output += chunk))
  }
  const exited = once(child, 'exit').then(([code]) => code as number | null)
  cleanup(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await exited
  })
  return { child, output: () => output, exited }
}
