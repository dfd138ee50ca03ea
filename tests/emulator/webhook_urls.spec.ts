import { test } from '@japa/runner'
import { PayoutsClient, PayoutsValidationError } from '../../src/client/main.ts'
import { PayoutsEmulator, type EmulatorOptions } from '../../src/emulator/main.ts'
import { api, execute, startEmulator, startReceiver, subscribe } from './helpers.ts'

/** A public address (outside every refused range) for names that must resolve "outside". */
const PUBLIC = '93.184.215.14'

/**
 * A resolver for the emulator's `lookup` option: each name answers its list of addresses in
 * turn (the last one repeats), and every question is recorded.
 */
function fakeDns(answers: Record<string, string[][]>) {
  const asked: string[] = []
  const lookup = async (hostname: string) => {
    asked.push(hostname)
    const list = answers[hostname]
    if (!list) throw Object.assign(new Error(`no such name ${hostname}`), { code: 'ENOTFOUND' })
    const n = asked.filter((h) => h === hostname).length
    const addresses = list[Math.min(n, list.length) - 1]
    return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }))
  }
  return { asked, lookup }
}

/** Starts an emulator as `PayoutsEmulator.start` does with these options, on a manual clock. */
async function strictEmulator(
  cleanup: (fn: () => Promise<void>) => void,
  options: EmulatorOptions = {}
) {
  const emu = await PayoutsEmulator.start({ port: 0, clock: { mode: 'manual' }, ...options })
  cleanup(() => emu.close())
  return emu
}

test.group('Emulator | Webhook URL rule', () => {
  test('Creation and update refuse every forbidden host, however it is written', async ({
    assert,
    cleanup,
  }) => {
    const emu = await strictEmulator(cleanup, { lookup: fakeDns({}).lookup, rateLimits: false })
    const refused = [
      'https://LOCALHOST./h',
      'https://api.localhost/h',
      'https://127.0.0.1:8443/h',
      'https://0x7f.1/h',
      'https://[fe90::1]/h',
      'https://[febf::1]/h',
      'https://[fd00::1]/h',
      'https://[::127.0.0.1]/h',
      'https://[::ffff:10.0.0.1]/h',
      'https://[64:ff9b::a00:1]/h',
      'https://metadata.google.internal./h',
      'https://METADATA/h',
      'https://100.100.100.200/h',
    ]
    for (const url of refused) {
      const res = await subscribe(emu, url)
      assert.equal(res.status, 400, url)
      assert.equal(res.json.details.field, 'url', url)
    }
    const created = await subscribe(emu, `https://${PUBLIC}/h`)
    assert.equal(created.status, 201)
    for (const url of refused) {
      const res = await api(emu, 'PATCH', `/webhooks/subscriptions/${created.json.id}`, {
        body: { url },
      })
      assert.equal(res.status, 400, `PATCH ${url}`)
    }
  })

  test('Creation resolves names: one address in a forbidden range refuses the URL', async ({
    assert,
    cleanup,
  }) => {
    const dns = fakeDns({
      'internal.example': [['10.1.2.3']],
      'mixed.example': [[PUBLIC, '127.0.0.1']],
      'six.example': [['fe80::1']],
      'public.example': [[PUBLIC]],
    })
    const emu = await strictEmulator(cleanup, { lookup: dns.lookup })
    for (const host of ['internal.example', 'mixed.example', 'six.example']) {
      const res = await subscribe(emu, `https://${host}/h`)
      assert.equal(res.status, 400, host)
      assert.equal(res.json.details.field, 'url')
    }
    assert.equal((await subscribe(emu, 'https://public.example/h')).status, 201)
    assert.deepEqual(dns.asked, [
      'internal.example',
      'mixed.example',
      'six.example',
      'public.example',
    ])
  })

  test('Before each POST the name is resolved again: rebound to loopback, nothing is sent', async ({
    assert,
    cleanup,
  }) => {
    const dns = fakeDns({ 'rebind.example': [[PUBLIC], ['127.0.0.1']] })
    const emu = await strictEmulator(cleanup, { lookup: dns.lookup })
    assert.equal((await subscribe(emu, 'https://rebind.example/h')).status, 201)
    await execute(emu)
    await emu.admin.advance(0)
    assert.deepEqual(dns.asked, ['rebind.example', 'rebind.example'])
    const { json } = await api(emu, 'GET', '/webhooks/deliveries')
    assert.lengthOf(json.data, 1)
    const [delivery] = json.data
    assert.equal(delivery.status, 'retrying')
    assert.equal(delivery.attempts, 1)
    assert.notProperty(delivery, 'lastStatusCode', 'no request was sent')
    assert.match(delivery.lastError, /refused.*loopback.*127\.0\.0\.1/)
    assert.equal(emu.webhooks.stats.attempts, 0)
  })

  test('PayoutsEmulator.start() with no option refuses loopback; allowInsecureWebhooks turns it on', async ({
    assert,
    cleanup,
  }) => {
    const receiver = await startReceiver(cleanup)
    const strict = await strictEmulator(cleanup)
    const refused = await subscribe(strict, receiver.url)
    assert.equal(refused.status, 400)
    assert.equal(refused.json.details.field, 'url')

    const dns = fakeDns({ localhost: [['127.0.0.1']] })
    const dev = await startEmulator(cleanup, { allowInsecureWebhooks: true, lookup: dns.lookup })
    assert.equal((await subscribe(dev, receiver.url)).status, 201)
    const byName = receiver.url.replace('127.0.0.1', 'localhost')
    assert.equal((await subscribe(dev, byName)).status, 201)
    for (const url of ['https://10.0.0.1/h', 'http://10.0.0.1/h', 'https://[fe80::1]/h']) {
      assert.equal((await subscribe(dev, url)).status, 400, `still refused: ${url}`)
    }
    await execute(dev)
    await dev.admin.advance(0)
    assert.lengthOf(receiver.received, 2, 'delivered to the address and to the name')
    assert.deepEqual(dns.asked, ['localhost', 'localhost'])
  })

  test('The client applies the same rule to its input, without sending', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup, { allowInsecureWebhooks: true })
    const client = new PayoutsClient({ apiKey: emu.apiKey, baseUrl: emu.baseUrl })
    cleanup(async () => client.close())
    const devClient = new PayoutsClient({
      apiKey: emu.apiKey,
      baseUrl: emu.baseUrl,
      allowInsecureLoopbackWebhooks: true,
    })
    cleanup(async () => devClient.close())
    const events = ['payout.created' as const]
    const refusal = (c: PayoutsClient, url: string) =>
      c.webhooks.subscriptions.create({ url, events }).then(
        () => null,
        (error) => error
      )
    for (const url of ['https://LOCALHOST./h', 'https://[fe90::1]/h', 'https://[::127.0.0.1]/h']) {
      const error = await refusal(client, url)
      assert.instanceOf(error, PayoutsValidationError, url)
      assert.match(error.message, /url/, url)
    }
    const error = await refusal(devClient, 'https://10.0.0.1/h')
    assert.instanceOf(error, PayoutsValidationError, 'private stays refused with the option')
    const list = await api(emu, 'GET', '/webhooks/subscriptions')
    assert.lengthOf(list.json.data, 0, 'nothing reached the service')
  })
})
