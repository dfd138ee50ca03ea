import { existsSync, mkdirSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { test } from '@japa/runner'
import { DatabaseSync } from 'node:sqlite'
import { chromium, type Browser, type Locator, type Page } from 'playwright-core'
import { DEMO_ROOT, freePort, startDemo, type RunningDemo } from '../../scripts/demo_runner.ts'
import { listen } from '../worker/helpers.ts'

/**
 * The demo page in headless Chromium: it shows the health report, and a payout executed
 * from the form reaches completed without a reload (the worker applies the changes, the web
 * process relays them over Transmit; the page reads the list on a message, never on a timer), in
 * the fiat flow and in the
 * stablecoin flow through the escrow deposit button. What it shows of each payout (fees,
 * rates, instructions, escrow, a failure) is checked against the ledger's row and the
 * emulator's record, amounts in each currency's decimals from the coverage matrix; a
 * payout's trace across the web process and the worker (its Trace button); the stream's
 * state against a dropped connection; the layout at phone width.
 */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
// CI installs Chromium and must run this test; elsewhere it runs when Chromium is there.
const MISSING = !existsSync(CHROMIUM) && process.env.CI !== 'true'
const SCREENSHOT = new URL('../../test-results/payouts-page.png', import.meta.url)
const PHONE_SCREENSHOT = new URL('../../test-results/payouts-page-390.png', import.meta.url)

/** The ledger's row of a payout (and its escrow deposit), read from the demo's SQLite file. */
function ledgerRow(demo: RunningDemo, payoutUuid: string) {
  const db = new DatabaseSync(`${DEMO_ROOT}tmp/demo-${new URL(demo.url).port}.sqlite`, {
    readOnly: true,
    // The app and its worker write to it: wait for their locks.
    timeout: 20_000,
  })
  try {
    const row = db.prepare('SELECT * FROM svc_payouts WHERE payout_uuid = ?').get(payoutUuid) as any
    const escrow = db
      .prepare('SELECT * FROM svc_escrow_deposits WHERE payout_uuid = ?')
      .get(payoutUuid) as any
    return {
      ...row,
      fees: JSON.parse(row.fees),
      instructions: row.instructions ? JSON.parse(row.instructions) : null,
      escrow,
    }
  } finally {
    db.close()
  }
}

/**
 * `value` in `decimals` digits, grouped as en-US writes it (the page rounds exact decimal
 * strings; here Intl does it from the number, another way to the same text).
 */
function formatted(value: string | number, decimals: number, code: string) {
  const text = new Intl.NumberFormat('en-US', {
    minimumFractionDigits: decimals,
    maximumFractionDigits: decimals,
  }).format(Number(value))
  return `${text} ${code}`
}

/** Sends a payout from the form and returns its card, once the page lists it. */
async function send(
  page: Page,
  form: { flow: string; to?: string; amount?: string; reference?: string }
) {
  const before = new Set(
    await page
      .locator('[data-testid=payout]')
      .evaluateAll((nodes) => nodes.map((node) => node.getAttribute('data-payout-id')))
  )
  await page.selectOption('#flow', form.flow)
  if (form.to) await page.selectOption('#to', form.to)
  await page.fill('#amount', form.amount ?? '250')
  await page.fill('#reference', form.reference ?? '')
  await page.click('#send')
  await page.waitForFunction(
    (known) =>
      [...(globalThis as any).document.querySelectorAll('[data-testid=payout]')].some(
        (node) => !known.includes(node.getAttribute('data-payout-id'))
      ),
    [...before],
    { timeout: 30_000 }
  )
  const error = await page.locator('#error').textContent()
  if (error) throw new Error(`the form answered: ${error}`)
  const ids = await page
    .locator('[data-testid=payout]')
    .evaluateAll((nodes) => nodes.map((node) => node.getAttribute('data-payout-id')!))
  const id = ids.find((candidate) => !before.has(candidate))!
  return { id, card: page.locator(`[data-testid=payout][data-payout-id="${id}"]`) }
}

/** The text of a fact (a `dd`) of a card, by its field. */
async function fact(scope: Locator, field: string) {
  return ((await scope.locator(`dd[data-field="${field}"]`).textContent()) ?? '').trim()
}

test.group('Browser | demo page', (group) => {
  let demo: RunningDemo
  let browser: Browser

  group.setup(async () => {
    if (MISSING) return
    demo = await startDemo({
      removeOnStop: true,
      port: await freePort(),
      stepIntervalMs: 400,
      output: 'ignore',
      log: () => {},
    })
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    })
  })

  group.teardown(async () => {
    await browser?.close()
    await demo?.stop()
  })

  test('the page shows the health report and what each flow returned; payouts reach completed without a reload; the stream state follows a drop; it fits a phone', async ({
    assert,
    cleanup,
  }) => {
    assert.isTrue(existsSync(CHROMIUM), `Chromium is required at ${CHROMIUM} (.ci/run installs it)`)
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } })
    let navigations = 0
    page.on('framenavigated', (frame) => {
      if (frame === page.mainFrame()) navigations++
    })
    await page.goto(demo.url)
    await page.locator('#live.on').waitFor({ timeout: 15_000 })

    // The health report, each line with its verdict, as payouts:status prints it.
    await page.locator('[data-testid=health-line][data-check=inboxBacklog]').waitFor()
    const lines = await page.locator('[data-testid=health-line]').all()
    const checks = await Promise.all(lines.map((line) => line.getAttribute('data-check')))
    assert.includeMembers(checks, ['reachability', 'inboxBacklog', 'deadLetters', 'stuckPayouts'])
    const reachable = page.locator('[data-testid=health-line][data-check=reachability]')
    assert.equal(await reachable.getAttribute('data-status'), 'ok')
    assert.equal(await reachable.locator('.verdict').textContent(), 'ok')
    assert.match((await page.locator('#health-summary').textContent()) ?? '', /^ok: /)

    // Decimals of each currency, as the service's coverage matrix gives them.
    const coverage = (await (await fetch(`${demo.emulator.baseUrl}/config/coverage`)).json()) as {
      fiat: Array<{ code: string; decimals: number }>
      wallet: { tokens: string[] }
    }
    const decimals = (code: string) =>
      coverage.fiat.find((f) => f.code === code)?.decimals ??
      (coverage.wallet.tokens.includes(code) ? 6 : Number.NaN)
    const money = (value: string | number, code: string) => formatted(value, decimals(code), code)
    assert.equal(decimals('JPY'), 0, 'the emulator has a currency without decimals')

    // Fiat to fiat, paid out in a currency without decimals: amounts, fees, rates and
    // banking instructions as the ledger stored them from the execute response.
    const fiat = await send(page, { flow: 'fiat_to_fiat', to: 'JPY', amount: '125' })
    const fiatRow = ledgerRow(demo, fiat.id)
    assert.equal(
      await fiat.card.locator('[data-testid=amounts]').textContent(),
      `${money(fiatRow.source_amount, 'USD')} → ${money(fiatRow.payout_amount, 'JPY')}`
    )
    assert.notInclude(money(fiatRow.payout_amount, 'JPY'), '.')
    const pricing = fiat.card.locator('[data-testid=pricing]')
    assert.equal(
      await fact(pricing, 'serviceFee'),
      `${money(fiatRow.fees.serviceFee, 'USD')} (${fiatRow.fees.serviceFeeBps} bps)`
    )
    assert.equal(await fact(pricing, 'partnerFee'), money(fiatRow.fees.partnerFee, 'USD'))
    assert.equal(await fact(pricing, 'gasFee'), money(fiatRow.fees.gasFee, 'USD'))
    assert.equal(await fact(pricing, 'partnerFxRate'), `1 USD = ${fiatRow.partner_fx_rate} JPY`)
    assert.equal(await fact(pricing, 'effectiveRate'), `1 USD = ${fiatRow.effective_rate} JPY`)
    const banking = Object.entries(
      fiatRow.instructions.bankingInstructions as Record<string, string>
    )
    assert.isAbove(banking.length, 2)
    for (const [key, value] of banking) {
      assert.equal(await fact(fiat.card.locator('[data-testid=banking]'), key), value)
    }

    // Onramp: the hosted payment page, a link only to that address; USDC in 6 decimals.
    const onramp = await send(page, { flow: 'onramp', to: 'USDC', amount: '40' })
    const onrampRow = ledgerRow(demo, onramp.id)
    const link = onramp.card.locator('[data-testid=payment-url] a')
    assert.equal(await link.textContent(), onrampRow.instructions.paymentUrl)
    assert.equal(await link.getAttribute('href'), onrampRow.instructions.paymentUrl)
    assert.equal(
      await onramp.card.locator('[data-testid=amounts]').textContent(),
      `${money(onrampRow.source_amount, 'USD')} → ${money(onrampRow.payout_amount, 'USDC')}`
    )

    // A failure: the last step the ledger holds and what the service's read says of it. Its
    // reference carries markup, which the page shows as text and never runs.
    const failing = await send(page, {
      flow: 'fiat_to_fiat',
      to: 'MXN',
      reference: 'scenario:fail <img src=x onerror="window.__injected=1">',
    })
    assert.equal(
      await failing.card.locator('[data-testid=reference]').textContent(),
      `“${ledgerRow(demo, failing.id).reference}”`
    )
    assert.equal(await failing.card.locator('img').count(), 0)
    assert.isUndefined(await page.evaluate(() => (globalThis as any).__injected))

    // Stablecoin to fiat: escrow address, token contract and chain as the emulator's quote
    // has them, the atomic amount converted to whole USDC.
    const stable = await send(page, { flow: 'stablecoin_to_fiat', to: 'MXN', amount: '250' })
    const stableRow = ledgerRow(demo, stable.id)
    const quote = demo.emulator.admin.quote(stableRow.quote_id)!
    const escrow = stable.card.locator('[data-testid=escrow]')
    await escrow.waitFor({ timeout: 30_000 })
    assert.equal(await fact(escrow, 'escrowAddress'), quote.escrowAddress)
    assert.equal(await fact(escrow, 'tokenAddress'), quote.tokenAddress)
    assert.equal(stableRow.escrow.token_address, quote.tokenAddress)
    assert.match(await fact(escrow, 'tokenAddress'), /^0x[0-9a-fA-F]{40}$/)
    assert.equal(await fact(escrow, 'chain'), `chain ${quote.chainId}`)
    const atomic = quote.depositAmountAtomic!
    const whole = `${atomic / 1_000_000n}.${(atomic % 1_000_000n).toString().padStart(6, '0')}`
    assert.equal(await fact(escrow, 'amount'), `${money(whole, 'USDC')} (${atomic} atomic units)`)
    assert.equal(
      await fact(stable.card.locator('[data-testid=pricing]'), 'gasFee'),
      money(stableRow.fees.gasFee, 'USDC')
    )
    await stable.card.locator('button[data-deposit]').click()

    // The fiat payout completes while we watch, every step of its timeline reached.
    await page
      .locator(`[data-testid=payout][data-payout-id="${fiat.id}"][data-status=completed]`)
      .waitFor({ timeout: 30_000 })
    assert.equal(await fiat.card.locator('[data-testid=timeline] li.done').count(), 7)
    assert.equal(await fiat.card.locator('[data-testid=timeline] time').count(), 7)

    // Its trace (OpenTelemetry, both processes): the execute in the web process with its call
    // of the service, and each webhook received there with the worker's batch linked under it.
    await fiat.card.locator('button[data-trace]').click()
    const tree = fiat.card.locator('[data-testid=trace]')
    const batches = tree.locator(
      'li[data-linked=true][data-name="payouts inbox batch"][data-process=worker]'
    )
    await batches
      .locator('li[data-name="payouts notify"]', { hasText: 'status=completed' })
      .waitFor({ timeout: 15_000 })
    const execute = tree.locator('li[data-name="payouts execute"][data-process=web]')
    assert.equal(await execute.count(), 1)
    assert.equal(
      await execute.locator('li[data-name="payouts client POST /rfq/execute"]').count(),
      1
    )
    assert.isAbove(await batches.count(), 2)
    // The page shows every span the route serves (the spans of the payout, in the files).
    const served = (await (await fetch(`${demo.url}/api/payouts/${fiat.id}/trace`)).json()) as {
      spanCount: number
    }
    assert.equal(await tree.locator('li[data-testid=span]').count(), served.spanCount)

    await page
      .locator(`[data-testid=payout][data-payout-id="${failing.id}"][data-status=failed]`)
      .waitFor({ timeout: 30_000 })
    const failure = failing.card.locator('[data-testid=failure]')
    await failure.waitFor()
    const failedRow = ledgerRow(demo, failing.id)
    assert.equal(
      await failure.locator('[data-field=lastStep]').textContent(),
      failedRow.step.replaceAll('_', ' ')
    )
    const read = demo.emulator.admin.payouts().find((p) => p.payoutId === failing.id)!
    const metadata = read.providerMetadata as Record<string, { status?: string }>
    assert.equal(await fact(failure, 'offramp'), metadata.offramp.status)
    assert.equal(await fact(failure, 'onramp'), metadata.onramp.status)

    // The live stream drops (the web process restarts, as in a deploy) and comes back on the
    // new process: the header says so, and the page keeps receiving without a reload.
    const live = page.locator('#live')
    assert.equal(await live.getAttribute('data-state'), 'connected')
    const restarted = demo.restartApp()
    await page.locator('#live[data-state=reconnecting]').waitFor({ timeout: 15_000 })
    assert.match((await live.textContent()) ?? '', /^reconnecting \(attempt \d+\)/)
    assert.isFalse(await live.evaluate((node) => node.classList.contains('on')))
    await restarted
    await page.locator('#live[data-state=connected]').waitFor({ timeout: 30_000 })
    assert.equal(await live.textContent(), 'live')

    // The stablecoin payout, funded through the button, completes too.
    await page
      .locator(`[data-testid=payout][data-payout-id="${stable.id}"][data-status=completed]`)
      .waitFor({ timeout: 45_000 })

    // No polling: the page reads the list only when Transmit says something changed. A
    // subscriber of the test's own on the page's channel hears what the page hears: over 5 s,
    // every read of the list follows one of those messages (a worker may still apply a late
    // change, such as a detail read, which the page rightly reads). A timer's reads follow none.
    const heard = await listen(cleanup, demo.url, 'payouts/owners/demo-tenant')
    await sleep(1000)
    const listReads: number[] = []
    page.on('request', (request) => {
      const url = new URL(request.url())
      if (request.method() === 'GET' && url.pathname === '/api/payouts') listReads.push(Date.now())
    })
    const watched = Date.now()
    await sleep(5000)
    const heardAt = heard.received.map((message) => message.at)
    const unprompted = listReads.filter(
      (at) => !heardAt.some((said) => said >= at - 3000 && said <= at + 1000)
    )
    assert.deepEqual(
      unprompted.map((at) => at - watched),
      [],
      `the page does not poll /api/payouts (reads at ms ${listReads.map((at) => at - watched)}, ` +
        `messages at ms ${heardAt.map((at) => at - watched)})`
    )
    assert.isAtMost(listReads.length, heardAt.filter((at) => at >= watched - 3000).length)

    mkdirSync(new URL('./', SCREENSHOT), { recursive: true })
    await page.screenshot({ path: SCREENSHOT.pathname, fullPage: true })
    assert.equal(navigations, 1, 'the page was never reloaded')
    assert.isTrue(existsSync(SCREENSHOT))
    await page.close()

    // At phone width: no horizontal scroll, and nothing that matters cut off.
    const phone = await browser.newPage({ viewport: { width: 390, height: 844 } })
    await phone.goto(demo.url)
    await phone.locator('#live[data-state=connected]').waitFor({ timeout: 15_000 })
    await phone
      .locator(`[data-testid=payout][data-payout-id="${stable.id}"] [data-testid=escrow]`)
      .waitFor()
    await phone.locator(`[data-payout-id="${fiat.id}"] button[data-trace]`).click()
    await phone.locator(`[data-payout-id="${fiat.id}"] [data-testid=trace] li`).first().waitFor()
    const widths = await phone.evaluate(() => ({
      document: (globalThis as any).document.documentElement.scrollWidth,
      body: (globalThis as any).document.body.scrollWidth,
    }))
    assert.isAtMost(widths.document, 390)
    assert.isAtMost(widths.body, 390)
    const keyElements = [
      '#live',
      '#send',
      '#to',
      `[data-payout-id="${fiat.id}"] [data-testid=amounts]`,
      `[data-payout-id="${fiat.id}"] [data-testid=banking]`,
      `[data-payout-id="${onramp.id}"] [data-testid=payment-url] a`,
      `[data-payout-id="${stable.id}"] [data-testid=escrow] dd[data-field=tokenAddress]`,
      `[data-payout-id="${stable.id}"] [data-testid=escrow] dd[data-field=escrowAddress]`,
      `[data-payout-id="${failing.id}"] [data-testid=failure]`,
      `[data-payout-id="${fiat.id}"] [data-testid=trace]`,
    ]
    // Measured in one turn of the page: a change told by Transmit re-renders the list, and the
    // trace is replaced when its spans arrive, so an element found in one call may be gone by
    // the next.
    const measured = await phone.evaluate((selectors) => {
      const document = (globalThis as any).document
      return selectors.map((selector: string) => {
        const node = document.querySelector(selector)
        if (!node) return { selector, found: false }
        const rect = node.getBoundingClientRect()
        return {
          selector,
          found: true,
          visible: rect.width > 0 && rect.height > 0 && node.checkVisibility(),
          left: rect.left + (globalThis as any).scrollX,
          right: rect.right + (globalThis as any).scrollX,
          clipped: node.scrollWidth > node.clientWidth + 1,
        }
      })
    }, keyElements)
    for (const element of measured) {
      const { selector } = element
      assert.isTrue(element.found, `${selector} is on the page`)
      assert.isTrue(element.visible, `${selector} is visible`)
      assert.isAtLeast(element.left!, 0, `${selector} starts on screen`)
      assert.isAtMost(element.right!, 390, `${selector} ends on screen`)
      assert.isFalse(element.clipped, `${selector} shows all of its content`)
    }
    await phone.screenshot({ path: PHONE_SCREENSHOT.pathname, fullPage: true })
    await phone.close()
  })
    .timeout(240_000)
    .skip(MISSING, `Chromium not found at ${CHROMIUM} (apt-get install chromium)`)
})
