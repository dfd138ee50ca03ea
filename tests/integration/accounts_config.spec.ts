import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import type { HttpContext } from '@adonisjs/core/http'
import type { NextFn } from '@adonisjs/core/types/http'
import { request } from 'undici'
import PayoutsStatus from '../../commands/payouts_status.ts'
import PayoutsWebhooksCreate from '../../commands/payouts_webhooks_create.ts'
import PayoutsReconcile from '../../commands/payouts_reconcile.ts'
import { validateManagerConfig, type PayoutsManagerConfigInput } from '../../src/accounts_config.ts'
import { PayoutsManager } from '../../src/service/payouts_manager.ts'
import { PayoutsService } from '../../src/service/payouts_service.ts'
import { signPayload } from '../../src/signature/main.ts'
import { startEmulator } from '../emulator/helpers.ts'
import { BASE_URL, TEST_API_KEY } from '../helpers/app.ts'
import { TEST_DB } from '../helpers/database.ts'
import { bootHostApp, serveHostApp } from '../helpers/host_app.ts'
import { startHttpApp } from '../helpers/http_app.ts'
import { jsonOf, setup } from '../commands/helpers.ts'

/** A second syntactically valid sandbox key: the `eu` account's. */
const EU_API_KEY = `sk_test_${'B'.repeat(43)}`

/** The shared settings of a two-account config: `main` (the default) and `eu`. */
function twoAccounts(overrides: Record<string, unknown> = {}): PayoutsManagerConfigInput {
  return {
    apiKey: TEST_API_KEY,
    baseUrl: 'http://127.0.0.1:9',
    default: 'main',
    accounts: { main: {}, eu: { apiKey: EU_API_KEY, baseUrl: 'http://127.0.0.1:10' } },
    ...overrides,
  } as PayoutsManagerConfigInput
}

/** The reason of an E_PAYOUTS_INVALID_CONFIG thrown by validateManagerConfig, or a failure. */
function refusal(input: unknown): string {
  try {
    validateManagerConfig(input as PayoutsManagerConfigInput)
  } catch (error) {
    const { code, message } = error as { code?: string; message: string }
    if (code !== 'E_PAYOUTS_INVALID_CONFIG') throw error
    return message
  }
  throw new Error('the config was accepted')
}

test.group('Accounts | validateManagerConfig', () => {
  test('a flat config is the one account main, the default', ({ assert }) => {
    const config = validateManagerConfig({ apiKey: TEST_API_KEY, baseUrl: 'http://x.test' })
    assert.equal(config.default, 'main')
    assert.deepEqual(Object.keys(config.accounts), ['main'])
    assert.equal(config.accounts.main.account, 'main')
    assert.equal(config.accounts.main.apiKey, TEST_API_KEY)
    assert.equal(config.accounts.main.webhook.path, '/webhooks/payouts')
  })

  test('accounts with a default: each validated under its name, the default as named', ({
    assert,
  }) => {
    const config = validateManagerConfig(twoAccounts({ default: 'eu' }))
    assert.equal(config.default, 'eu')
    assert.deepEqual(Object.keys(config.accounts).toSorted(), ['eu', 'main'])
    assert.equal(config.accounts.eu.account, 'eu')
    assert.equal(config.accounts.main.account, 'main')
    assert.equal(config.accounts.eu.apiKey, EU_API_KEY)
    assert.equal(config.accounts.eu.baseUrl, 'http://127.0.0.1:10')
    assert.equal(config.accounts.main.apiKey, TEST_API_KEY)
    assert.equal(config.accounts.main.baseUrl, 'http://127.0.0.1:9')
  })

  test('one account without a default is the default', ({ assert }) => {
    const config = validateManagerConfig({
      baseUrl: 'http://x.test',
      accounts: { eu: { apiKey: EU_API_KEY } },
    })
    assert.equal(config.default, 'eu')
    assert.deepEqual(Object.keys(config.accounts), ['eu'])
    assert.equal(config.accounts.eu.webhook.path, '/webhooks/payouts')
  })

  test('several accounts without a default, or an unknown default, are refused', ({ assert }) => {
    assert.match(refusal(twoAccounts({ default: undefined })), /default must name one of accounts/)
    assert.match(
      refusal(twoAccounts({ default: 'us' })),
      /default "us" is not one of accounts \(main, eu\)/
    )
    assert.match(refusal({ baseUrl: 'http://x.test', accounts: {} }), /at least one account/)
    assert.match(
      refusal(twoAccounts({ account: 'main' })),
      /account is set by the names of `accounts`/
    )
    // A one-account config names no account: its rows from before are `main`'s.
    assert.match(
      refusal({ apiKey: TEST_API_KEY, baseUrl: 'http://x.test', account: 'eu' }),
      /account is set by the names of `accounts`/
    )
  })

  test('a webhook secret shared by two accounts is refused, the secret never shown', ({
    assert,
  }) => {
    // Set beside the accounts, it would be both accounts': a delivery signed for main
    // would be applied as eu's on eu's route.
    const shared = refusal(twoAccounts({ webhook: { secret: 'whsec_shared_by_both' } }))
    assert.match(shared, /accounts\.eu\.webhook\.secret is the webhook secret of accounts\.main/)
    assert.notInclude(shared, 'whsec_shared_by_both')
    // One account's previous secret is another's current one: refused too.
    const crossed = twoAccounts()
    ;(crossed as any).accounts.main.webhook = { secret: 'whsec_main_now' }
    ;(crossed as any).accounts.eu.webhook = {
      secret: 'whsec_eu_now',
      previousSecret: 'whsec_main_now',
      previousSecretValidUntil: '2030-01-01T00:00:00Z',
    }
    assert.match(
      refusal(crossed),
      /accounts\.eu\.webhook\.secret is the webhook secret of accounts\.main/
    )
    // Each its own: accepted.
    const own = twoAccounts()
    ;(own as any).accounts.main.webhook = { secret: 'whsec_main_now' }
    ;(own as any).accounts.eu.webhook = { secret: 'whsec_eu_now' }
    assert.equal(validateManagerConfig(own).accounts.eu.webhook.secret, 'whsec_eu_now')
  })

  test('two accounts on one API key are refused, the key never shown', ({ assert }) => {
    const reason = refusal(twoAccounts({ accounts: { main: {}, eu: {} } }))
    assert.match(reason, /accounts\.eu\.apiKey is the API key of accounts\.main/)
    assert.notInclude(reason, TEST_API_KEY)
  })

  test('a wrong shared value is named where it was written, an own one under its account', ({
    assert,
  }) => {
    assert.match(refusal(twoAccounts({ timeoutMs: -1 })), /^Invalid payouts config: timeoutMs /)
    const own = twoAccounts()
    ;(own as any).accounts.eu.timeoutMs = -1
    assert.match(refusal(own), /^Invalid payouts config: accounts\.eu\.timeoutMs /)
  })

  test('a shared webhook path ending in a slash gives the other accounts one slash', ({
    assert,
  }) => {
    const config = validateManagerConfig(twoAccounts({ webhook: { path: '/hooks/' } }))
    assert.equal(config.accounts.eu.webhook.path, '/hooks/eu')
  })

  test('a flat config with `accounts: undefined` (from a spread) is one account', ({ assert }) => {
    const config = validateManagerConfig({
      apiKey: TEST_API_KEY,
      baseUrl: 'http://x.test',
      accounts: undefined,
    } as PayoutsManagerConfigInput)
    assert.deepEqual(Object.keys(config.accounts), ['main'])
  })

  test('ledger and transmit are shared: refused inside an account', ({ assert }) => {
    for (const key of ['ledger', 'transmit']) {
      const input = twoAccounts()
      ;(input as any).accounts.eu[key] = {}
      assert.match(
        refusal(input),
        new RegExp(`^Invalid payouts config: accounts\\.eu\\.${key} is shared`)
      )
    }
    // Beside the accounts they are every account's.
    const config = validateManagerConfig(
      twoAccounts({ ledger: { tablePrefix: 'acc_' }, transmit: { payoutChannel: 'p/:payoutId' } })
    )
    for (const name of ['main', 'eu']) {
      assert.equal(config.accounts[name].ledger.tablePrefix, 'acc_')
      assert.equal(config.accounts[name].transmit.payoutChannel, 'p/:payoutId')
    }
  })

  test("webhook paths: main's (a lone account's) is webhook.path, every other's that plus /<name>, whichever is the default", ({
    assert,
  }) => {
    const plain = validateManagerConfig(twoAccounts())
    assert.equal(plain.accounts.main.webhook.path, '/webhooks/payouts')
    assert.equal(plain.accounts.eu.webhook.path, '/webhooks/payouts/eu')

    // Changing the default moves no route: main's subscriptions keep reaching main.
    const euFirst = validateManagerConfig(twoAccounts({ default: 'eu' }))
    assert.equal(euFirst.accounts.main.webhook.path, '/webhooks/payouts')
    assert.equal(euFirst.accounts.eu.webhook.path, '/webhooks/payouts/eu')

    // Without a main, every account of several adds its name; a lone one keeps the path.
    const regions = validateManagerConfig({
      baseUrl: 'http://x.test',
      default: 'us',
      accounts: { us: { apiKey: TEST_API_KEY }, eu: { apiKey: EU_API_KEY } },
    })
    assert.equal(regions.accounts.us.webhook.path, '/webhooks/payouts/us')
    assert.equal(regions.accounts.eu.webhook.path, '/webhooks/payouts/eu')
    const lone = validateManagerConfig({ baseUrl: 'http://x.test', accounts: { us: {} } })
    assert.equal(lone.accounts.us.webhook.path, '/webhooks/payouts')

    const shared = validateManagerConfig(twoAccounts({ webhook: { path: '/hooks/svc' } }))
    assert.equal(shared.accounts.main.webhook.path, '/hooks/svc')
    assert.equal(shared.accounts.eu.webhook.path, '/hooks/svc/eu')

    const own = twoAccounts()
    ;(own as any).accounts.eu.webhook = { path: '/eu-hooks' }
    assert.equal(validateManagerConfig(own).accounts.eu.webhook.path, '/eu-hooks')
  })

  test('two accounts on one path are refused', ({ assert }) => {
    const onDefault = twoAccounts()
    ;(onDefault as any).accounts.eu.webhook = { path: '/webhooks/payouts' }
    assert.match(refusal(onDefault), /accounts\.eu\.webhook\.path is the path of accounts\.main/)

    const bothExplicit = twoAccounts()
    ;(bothExplicit as any).accounts.main.webhook = { path: '/hooks' }
    ;(bothExplicit as any).accounts.eu.webhook = { path: '/hooks' }
    assert.match(refusal(bothExplicit), /accounts\.eu\.webhook\.path is the path of accounts\.main/)

    // An explicit path on the path another account gets by default.
    const onDerived = twoAccounts()
    ;(onDerived as any).accounts.main.webhook = { path: '/webhooks/payouts/eu' }
    assert.match(refusal(onDerived), /webhook\.path is the path of accounts\./)
  })

  test('account names are a-z, 0-9, _ or -, starting with a letter, at most 32', ({ assert }) => {
    for (const bad of ['EU', '1eu', 'e u', 'eu.west', '_eu', 'é', '', 'a'.repeat(33)]) {
      const input = { baseUrl: 'http://x.test', default: 'main', accounts: { main: {}, [bad]: {} } }
      assert.match(refusal(input), /must be a-z, 0-9, _ or -, starting with a letter/, bad)
    }
    const good = validateManagerConfig({
      baseUrl: 'http://x.test',
      default: 'main',
      accounts: { 'main': {}, 'eu_west-2': {}, ['a'.repeat(32)]: {} },
    })
    assert.deepEqual(Object.keys(good.accounts).toSorted(), ['a'.repeat(32), 'eu_west-2', 'main'])
  })

  test("an account's invalid value is named with its account, never shown", ({ assert }) => {
    const secretKey = `sk_live_${'S'.repeat(20)}`
    const input = twoAccounts()
    ;(input as any).accounts.eu.apiKey = secretKey
    const message = refusal(input)
    assert.match(
      message,
      /^Invalid payouts config: accounts\.eu\.apiKey must be sk_live_ or sk_test_/
    )
    assert.notInclude(message, secretKey)
    assert.notInclude(message, 'SSSSSSSSSS')

    const badSecret = 'hunter2-webhook-secret'
    const withSecret = twoAccounts()
    ;(withSecret as any).accounts.eu.webhook = { secret: badSecret }
    const secretMessage = refusal(withSecret)
    assert.match(secretMessage, /^Invalid payouts config: accounts\.eu\.webhook\.secret /)
    assert.notInclude(secretMessage, badSecret)

    // A wrong shared value is refused too, its key named.
    assert.match(refusal(twoAccounts({ timeoutMs: -1 })), /\btimeoutMs\b/)
  })

  test("shared settings are merged under an account's own, section by section", ({ assert }) => {
    const input = twoAccounts({
      jobs: { reconcileEveryMs: 5000, escrowEveryMs: 7000 },
      webhook: { secret: 'whsec_shared', toleranceSeconds: 120 },
      timeoutMs: 1234,
    })
    ;(input as any).accounts.eu.webhook = { secret: 'whsec_eu_own' }
    ;(input as any).accounts.eu.jobs = { escrowEveryMs: 9000 }
    const { accounts } = validateManagerConfig(input)

    assert.equal(accounts.eu.webhook.secret, 'whsec_eu_own')
    assert.equal(accounts.eu.webhook.toleranceSeconds, 120, 'the rest of the section is shared')
    assert.equal(accounts.eu.jobs.reconcileEveryMs, 5000)
    assert.equal(accounts.eu.jobs.escrowEveryMs, 9000)
    assert.equal(accounts.eu.timeoutMs, 1234)
    assert.equal(accounts.eu.apiKey, EU_API_KEY)

    assert.equal(accounts.main.webhook.secret, 'whsec_shared')
    assert.equal(accounts.main.jobs.escrowEveryMs, 7000, "another account's own stays its own")
    assert.equal(accounts.main.apiKey, TEST_API_KEY)
    // Defaults still fill in what nobody set.
    assert.equal(accounts.eu.jobs.recoverEveryMs, 60_000)
  })
})

test.group('Accounts | the manager in a host app', () => {
  test('payouts.manager is a PayoutsManager, the default account, and what PayoutsService gives', async ({
    assert,
    cleanup,
  }) => {
    const app = await bootHostApp({ root: BASE_URL, payouts: twoAccounts() as any })
    cleanup(() => app.terminate())
    const manager = await app.container.make('payouts.manager')
    assert.instanceOf(manager, PayoutsManager)
    assert.strictEqual(await app.container.make(PayoutsService), manager)
    assert.strictEqual(await app.container.make(PayoutsManager), manager)
    assert.equal(manager.config.account, 'main')
    assert.deepEqual(manager.accounts, ['main', 'eu'])
    assert.strictEqual(manager.use(), manager)
    assert.strictEqual(manager.use('main'), manager)
  })

  test("use('eu') is the same service each time, with its own config and client", async ({
    assert,
    cleanup,
  }) => {
    const app = await bootHostApp({
      root: BASE_URL,
      payouts: twoAccounts({ default: 'eu' }) as any,
    })
    cleanup(() => app.terminate())
    const manager = await app.container.make('payouts.manager')
    assert.equal(manager.config.account, 'eu', 'the manager is the default account')
    assert.deepEqual(manager.accounts, ['eu', 'main'], 'the default first')
    assert.strictEqual(manager.use('eu'), manager)

    const main = manager.use('main')
    assert.instanceOf(main, PayoutsService)
    assert.notStrictEqual(main, manager)
    assert.strictEqual(manager.use('main'), main)
    assert.equal(main.config.account, 'main')
    assert.equal(main.client.baseUrl, 'http://127.0.0.1:9')
    assert.equal(manager.client.baseUrl, 'http://127.0.0.1:10')
    assert.notStrictEqual(main.client, manager.client)
    assert.deepEqual(
      manager.all().map((service) => service.config.account),
      ['eu', 'main']
    )
    assert.strictEqual(manager.all()[1], main)
  })

  test("use('nope') throws E_PAYOUTS_UNKNOWN_ACCOUNT naming the accounts", async ({
    assert,
    cleanup,
  }) => {
    const app = await bootHostApp({ root: BASE_URL, payouts: twoAccounts() as any })
    cleanup(() => app.terminate())
    const manager = await app.container.make('payouts.manager')
    for (const name of ['nope', 'toString', '__proto__', '']) {
      try {
        manager.use(name)
        assert.fail(`use('${name}') gave a service`)
      } catch (error) {
        assert.equal((error as { code?: string }).code, 'E_PAYOUTS_UNKNOWN_ACCOUNT', name)
        assert.match((error as Error).message, /config\/payouts\.ts has main, eu/)
      }
    }
  })

  test('registerRoutes adds every account’s route, each with its name', async ({
    assert,
    cleanup,
  }) => {
    const app = await bootHostApp({ root: BASE_URL, payouts: twoAccounts() as any })
    cleanup(() => app.terminate())
    const manager = await app.container.make('payouts.manager')
    const router = await app.container.make('router')
    const route = await manager.registerRoutes(router)
    assert.equal(route.getName(), 'payouts.webhook')
    router.commit()
    const routes = Object.values(router.toJSON())
      .flat()
      .map((each) => ({ pattern: each.pattern, name: each.name, methods: each.methods }))
    assert.deepInclude(routes, {
      pattern: '/webhooks/payouts',
      name: 'payouts.webhook',
      methods: ['POST'],
    })
    assert.deepInclude(routes, {
      pattern: '/webhooks/payouts/eu',
      name: 'payouts.webhook.eu',
      methods: ['POST'],
    })
    assert.lengthOf(
      routes.filter((each) => each.pattern.startsWith('/webhooks/payouts')),
      2
    )
  })

  test('the bodyparser skips every account’s webhook route and parses the others', async ({
    assert,
    cleanup,
  }) => {
    const seen: Record<string, { body: unknown; raw: string | null; streamRead: boolean }> = {}
    /** Router middleware after the bodyparser: what it left on each request. */
    class SeenByRoutes {
      async handle(ctx: HttpContext, next: NextFn) {
        seen[ctx.route!.pattern] = {
          body: ctx.request.body(),
          raw: ctx.request.raw(),
          streamRead: ctx.request.request.readableEnded,
        }
        return next()
      }
    }
    const host = await serveHostApp({
      root: BASE_URL,
      payouts: twoAccounts() as any,
      setup({ router }) {
        router.use([async () => ({ default: SeenByRoutes })])
        router.post('/echo', ({ request: req }) => req.body())
      },
    })
    cleanup(() => host.close())

    const body = '{"type":"payout.created", "data":{}}'
    for (const path of ['/echo', '/webhooks/payouts', '/webhooks/payouts/eu']) {
      const response = await request(`${host.url}${path}`, {
        method: 'POST',
        body,
        headers: { 'content-type': 'application/json' },
      })
      if (path === '/echo') assert.deepEqual(await response.body.json(), JSON.parse(body))
      else await response.body.dump()
    }
    assert.deepEqual(seen['/echo'], { body: JSON.parse(body), raw: body, streamRead: true })
    for (const path of ['/webhooks/payouts', '/webhooks/payouts/eu']) {
      assert.deepEqual(seen[path], { body: {}, raw: null, streamRead: false }, path)
    }
  })

  test(`each account's route takes deliveries signed with its own secret into its own rows (${TEST_DB})`, async ({
    assert,
    cleanup,
  }) => {
    const input = twoAccounts()
    ;(input as any).accounts.eu.webhook = { secret: 'whsec_eu_secret' }
    const app = await startHttpApp(cleanup, input as any)
    const deliver = async (path: string, secret: string) => {
      const raw = JSON.stringify({
        type: 'payout.created',
        createdAt: new Date().toISOString(),
        data: { payoutId: randomUUID(), status: 'pending' },
      })
      const response = await request(`${app.url}${path}`, {
        method: 'POST',
        body: raw,
        headers: {
          'content-type': 'application/json',
          'svc-signature': signPayload(secret, Math.floor(Date.now() / 1000), raw),
          'svc-delivery-id': `dlv_${randomUUID()}`,
          'svc-event-type': 'payout.created',
        },
      })
      await response.body.dump()
      return response.statusCode
    }
    assert.equal(await deliver('/webhooks/payouts', 'whsec_current_secret'), 200)
    assert.equal(await deliver('/webhooks/payouts/eu', 'whsec_eu_secret'), 200)
    assert.equal(await deliver('/webhooks/payouts/eu', 'whsec_current_secret'), 400)
    assert.equal(await deliver('/webhooks/payouts', 'whsec_eu_secret'), 400)

    const db = await app.app.container.make('lucid.db')
    const rows = await db.from(`${app.prefix}webhook_deliveries`).select('account')
    assert.deepEqual(rows.map((row) => row.account).toSorted(), ['eu', 'main'])
  })
})

test.group(`Accounts | commands (${TEST_DB})`, () => {
  /** An app whose `main` account is on one emulator and `eu` on another. */
  async function twoAccountApp(cleanup: (fn: () => Promise<void>) => void) {
    const euEmu = await startEmulator(cleanup, { rateLimits: false })
    const app = await setup(cleanup, {
      default: 'main',
      accounts: {
        main: {},
        eu: {
          apiKey: euEmu.apiKey,
          baseUrl: euEmu.baseUrl,
          webhook: { secret: 'whsec_eu_secret' },
        },
      },
    } as any)
    return { ...app, euEmu }
  }

  test('an unknown --account exits 1 naming the accounts, and does nothing', async ({
    assert,
    cleanup,
  }) => {
    const { run, emu, euEmu } = await twoAccountApp(cleanup)
    const created = await run(PayoutsWebhooksCreate, [
      '--account=nope',
      '--url=https://hooks.example.com/webhooks/payouts',
    ])
    created.assertFailed()
    created.assertLogMatches(/Unknown account "nope"\. Use main, eu/)
    assert.equal(emu.webhooks.subscriptions.size, 0)
    assert.equal(euEmu.webhooks.subscriptions.size, 0)

    const json = await run(PayoutsReconcile, ['--account', 'nope', '--json'])
    json.assertFailed()
    assert.match(jsonOf(json).error.message, /Unknown account "nope"\. Use main, eu/)

    const status = await run(PayoutsStatus, ['--account=nope', '--json'])
    status.assertFailed()
    assert.notProperty(jsonOf(status), 'accounts')
    assert.match(jsonOf(status).error.message, /Unknown account "nope"/)
  })

  test('--account eu acts on the eu account only', async ({ assert, cleanup }) => {
    const { run, app, emu, euEmu } = await twoAccountApp(cleanup)
    const created = await run(PayoutsWebhooksCreate, [
      '--account=eu',
      '--url=https://hooks.example.com/webhooks/payouts/eu',
      '--json',
    ])
    created.assertSucceeded()
    assert.equal(emu.webhooks.subscriptions.size, 0)
    assert.isTrue(euEmu.webhooks.subscriptions.has(jsonOf(created).id))
    const db = await app.app.container.make('lucid.db')
    const rows = await db.from(`${app.prefix}webhook_secrets`).select('account', 'subscription_id')
    assert.deepEqual(
      rows.map((row) => ({ ...row })),
      [{ account: 'eu', subscription_id: jsonOf(created).id }]
    )
  })

  test('payouts:status --json reports every account; --account one report', async ({
    assert,
    cleanup,
  }) => {
    const { run, emu, euEmu } = await twoAccountApp(cleanup)
    const all = jsonOf(await run(PayoutsStatus, ['--json']))
    assert.properties(all, ['status', 'message', 'accounts'])
    assert.deepEqual(Object.keys(all.accounts), ['main', 'eu'])
    assert.equal(all.accounts.main.account, 'main')
    assert.equal(all.accounts.eu.account, 'eu')
    assert.equal(all.accounts.main.checks.reachability.baseUrl, emu.baseUrl)
    assert.equal(all.accounts.eu.checks.reachability.baseUrl, euEmu.baseUrl)
    assert.property(all.accounts.eu.checks, 'inboxBacklog')

    const eu = jsonOf(await run(PayoutsStatus, ['--account=eu', '--json']))
    assert.notProperty(eu, 'accounts')
    assert.equal(eu.account, 'eu')
    assert.equal(eu.checks.reachability.baseUrl, euEmu.baseUrl)
    assert.property(eu.checks, 'inboxBacklog')
  })
})
