import type { AddressInfo } from 'node:net'
import { test } from '@japa/runner'
import { WebSocketServer } from 'ws'
import { PayoutsStream } from '../../src/stream/payouts_stream.ts'
import { Payout, PayoutEvent, WebhookDelivery } from '../../src/models/main.ts'
import { startEmulator } from '../emulator/helpers.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'

async function until(check: () => Promise<boolean>, timeoutMs = 8000) {
  const started = Date.now()
  while (!(await check())) {
    if (Date.now() - started > timeoutMs) throw new Error('condition not met in time')
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

test.group(`Stream | WebSocket source (${TEST_DB})`, () => {
  test('events arrive over the socket, a dropped connection reconnects and catches up', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const app = await startHttpApp(cleanup, {
      apiKey: emu.apiKey,
      baseUrl: emu.baseUrl,
      events: { sources: 'websocket', reconnectBaseMs: 50, reconnectMaxMs: 200 },
    })
    await until(async () => emu.admin.authenticatedSockets === 1)
    const recipient = emu.admin.seedRecipient()
    const { result } = await app.payouts.execute(
      {
        fromCurrency: 'USD',
        toCurrency: 'MXN',
        amount: 100,
        recipientId: recipient.id,
        userPaymentMethodId: emu.admin.accountPaymentMethodId,
      },
      { ownerId: 'tenant-ws' }
    )
    await emu.admin.advance(2000)
    await until(
      async () =>
        (await Payout.findByOrFail('payoutUuid', result.payoutId)).step === 'compliance_cleared'
    )
    const viaSocket = await WebhookDelivery.query().where('source', 'websocket')
    assert.isAtLeast(
      viaSocket.length,
      2,
      'payout.created and the first status update came over the socket'
    )

    // Cut the socket, let the payout complete while nobody listens, then reconnect. New
    // connections are refused meanwhile: on a loaded machine the advance took longer than
    // the 50 ms reconnect, and the completion came over the new socket instead.
    emu.admin.dropWebSockets({ refuseNew: true })
    await emu.admin.advance(20_000)
    emu.admin.acceptWebSockets()
    await until(async () => emu.admin.authenticatedSockets === 1)
    await until(
      async () => (await Payout.findByOrFail('payoutUuid', result.payoutId)).status === 'completed'
    )
    const payout = await Payout.findByOrFail('payoutUuid', result.payoutId)
    assert.deepEqual([payout.step, payout.ownerId], ['delivered', 'tenant-ws'])
    assert.isNotNull(payout.completedAt)
    const polled = await PayoutEvent.query()
      .where('payout_uuid', result.payoutId)
      .where('source', 'poll')
      .where('applied', true)
    assert.lengthOf(polled, 1, 'the catch-up read applied the missed completion')
    assert.lengthOf(
      app.events.filter((e) => e.name === 'payouts:completed'),
      1
    )
  }).timeout(30_000)

  test('binary messages starting with a BOM: the auth reply is recognised, the event kept byte for byte', async ({
    assert,
    cleanup,
  }) => {
    const bom = Buffer.from([0xef, 0xbb, 0xbf])
    const event = Buffer.concat([bom, Buffer.from('{"type":"payout.created","data":{}}')])
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 })
    await new Promise((resolve) => wss.once('listening', resolve))
    cleanup(async () => void (await new Promise((resolve) => wss.close(resolve))))
    wss.on('connection', (socket) =>
      socket.once('message', () => {
        socket.send(Buffer.concat([bom, Buffer.from('{"type":"auth.ok"}')]), { binary: true })
        socket.send(event, { binary: true })
      })
    )
    const received: Buffer[] = []
    const stream = new PayoutsStream({
      url: `ws://127.0.0.1:${(wss.address() as AddressInfo).port}`,
      apiKey: 'sk_test_x',
      onMessage: async (raw) => void received.push(raw),
    })
    cleanup(() => stream.stop())
    stream.start()
    await until(async () => received.length > 0)
    assert.isTrue(stream.authenticated)
    assert.lengthOf(received, 1, 'the auth reply is not taken for an event')
    assert.isTrue(received[0].equals(event))
  })
})
