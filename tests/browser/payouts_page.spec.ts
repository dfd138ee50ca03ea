import { existsSync, mkdirSync } from 'node:fs'
import { test } from '@japa/runner'
import { chromium, type Browser } from 'playwright-core'
import { freePort, startDemo, type RunningDemo } from '../../scripts/demo_runner.ts'

/**
 * The demo page in headless Chromium: it shows the health report, and a payout executed
 * from the form reaches completed without a reload (the worker applies the changes; the
 * page refreshes on Transmit messages and every 2 s), in the fiat flow and in the
 * stablecoin flow through the escrow deposit button.
 */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
// CI installs Chromium and must run this test; elsewhere it runs when Chromium is there.
const MISSING = !existsSync(CHROMIUM) && process.env.CI !== 'true'
const SCREENSHOT = new URL('../../test-results/payouts-page.png', import.meta.url)

test.group('Browser | demo page', (group) => {
  let demo: RunningDemo
  let browser: Browser

  group.setup(async () => {
    if (MISSING) return
    demo = await startDemo({
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

  test('the page shows the health report; a payout executed on it reaches completed without a reload', async ({
    assert,
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

    // Fiat to fiat: the form, then webhooks move it to completed while we watch.
    await page.selectOption('#flow', 'fiat_to_fiat')
    await page.fill('#amount', '125')
    await page.click('#send')
    const fiat = page.locator('[data-testid=payout]', { hasText: 'fiat_to_fiat' })
    await fiat.first().waitFor({ timeout: 30_000 })
    assert.equal(await page.locator('#error').textContent(), '')
    await page
      .locator('[data-testid=payout][data-status=completed]', { hasText: 'fiat_to_fiat' })
      .waitFor({ timeout: 30_000 })
    const steps = await fiat.locator('[data-testid=timeline] li.done').count()
    assert.equal(steps, 7, 'every step of the timeline is reached')
    assert.equal(await fiat.locator('[data-testid=timeline] time').count(), 7)

    // Stablecoin to fiat: escrow instructions, the simulated deposit, then completed.
    await page.selectOption('#flow', 'stablecoin_to_fiat')
    await page.click('#send')
    const stable = page.locator('[data-testid=payout]', { hasText: 'stablecoin_to_fiat' })
    await stable.locator('.escrow').waitFor({ timeout: 30_000 })
    assert.match((await stable.locator('.escrow code').textContent()) ?? '', /^0x[0-9a-fA-F]{40}$/)
    await stable.locator('button[data-deposit]').click()
    await page
      .locator('[data-testid=payout][data-status=completed]', { hasText: 'stablecoin_to_fiat' })
      .waitFor({ timeout: 45_000 })

    mkdirSync(new URL('./', SCREENSHOT), { recursive: true })
    await page.screenshot({ path: SCREENSHOT.pathname, fullPage: true })
    assert.equal(navigations, 1, 'the page was never reloaded')
    assert.isTrue(existsSync(SCREENSHOT))
    await page.close()
  })
    .timeout(240_000)
    .skip(MISSING, `Chromium not found at ${CHROMIUM} (apt-get install chromium)`)
})
