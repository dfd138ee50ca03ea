import { randomUUID } from 'node:crypto'
import { numbersConsecutively } from '../../src/database/dialects.ts'
import { connect, type Socket } from 'node:net'
import { test } from '@japa/runner'
import { request } from 'undici'
import { Payout, WebhookDelivery } from '../../src/models/main.ts'
import { signPayload } from '../../src/signature/main.ts'
import { recordStatements, TEST_DB } from '../helpers/database.ts'
import { startHttpApp, type HttpApp } from '../helpers/http_app.ts'
import { partsOf } from '../../src/service/payouts_service.ts'

const SECRET = 'whsec_current_secret'
const now = () => Math.floor(Date.now() / 1000)

function createdEvent(payoutId = randomUUID()) {
  return {
    type: 'payout.created',
    createdAt: new Date().toISOString(),
    data: {
      payoutId,
      transactionType: 'fiat_to_fiat',
      payoutAmount: 1701.45,
      payoutCurrency: 'MXN',
      sourceCurrency: 'USD',
      recipientId: randomUUID(),
      status: 'pending',
      createdAt: new Date().toISOString(),
    },
  }
}

function statusEvent(payoutId: string, status: string, step: string) {
  return {
    type: 'payout.status.updated',
    createdAt: new Date().toISOString(),
    data: { payoutId, status, provider: 'rail', step, stepChangedAt: new Date().toISOString() },
  }
}

async function post(
  app: HttpApp,
  body: Buffer | string,
  headers: Record<string, string | undefined>
) {
  const clean = Object.fromEntries(
    Object.entries(headers).filter(([, v]) => v !== undefined)
  ) as Record<string, string>
  const response = await request(`${app.url}/webhooks/payouts`, {
    method: 'POST',
    body,
    headers: { 'content-type': 'application/json', ...clean },
  })
  return { status: response.statusCode, body: await response.body.text() }
}

/**
 * Stores `events` as deliveries without the route (so without its kick): a backlog waiting
 * for the next drain.
 */
async function storeBacklog(app: HttpApp, events: Array<{ type: string }>) {
  const { inbox } = await partsOf(app.payouts)
  for (const event of events) {
    await inbox.insert({
      deliveryId: `dlv_${randomUUID()}`,
      eventType: event.type,
      rawBody: Buffer.from(JSON.stringify(event)),
      signatureHeader: null,
      source: 'webhook',
    })
  }
}

/** A signed delivery, as the service sends it. */
function signed(
  raw: Buffer | string,
  options: { secret?: string; t?: number; id?: string; type?: string } = {}
) {
  const t = options.t ?? now()
  return {
    'svc-signature': signPayload(options.secret ?? SECRET, t, raw),
    'svc-delivery-id': options.id ?? `dlv_${randomUUID()}`,
    'svc-event-type': options.type ?? 'payout.created',
  }
}

test.group(`Webhooks | signed route (${TEST_DB})`, () => {
  test('a valid delivery is stored, acknowledged, then applied to the ledger', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const event = createdEvent()
    const raw = JSON.stringify(event)
    const res = await post(app, raw, signed(raw))
    assert.equal(res.status, 200)
    await app.payouts.drainInbox()
    const payout = await Payout.findByOrFail('payoutUuid', event.data.payoutId)
    assert.deepEqual(
      [payout.status, payout.step, payout.payoutAmount],
      ['pending', 'initiated', '1701.45']
    )
    const [row] = await WebhookDelivery.all()
    assert.equal(row.state, 'processed')
    assert.equal(row.body.toString(), raw)
    assert.deepEqual(
      app.events
        .filter((e) => e.name.startsWith('payouts:'))
        .map((e) => e.name)
        .sort(),
      ['payouts:created', 'payouts:webhook_received']
    )
  })

  test('webhook.processBatchSize bounds the rows one processing transaction applies', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup, { webhook: { processBatchSize: 2 } })
    const events = Array.from({ length: 5 }, () => createdEvent())
    await storeBacklog(app, events)
    const db = await app.app.container.make('lucid.db')
    const statements = recordStatements(db)
    await app.payouts.drainInbox()
    // Batches of 2, 2 and 1: three transactions (and a fourth that finds nothing due), each
    // logging its observations at once (MySQL has no RETURNING to number a multi-row INSERT:
    // one per observation there).
    assert.lengthOf(
      statements.filter((sql) => /^begin/i.test(sql)),
      4
    )
    assert.lengthOf(
      statements.filter((sql) => /insert into \S*payout_events/i.test(sql)),
      // MySQL numbers a multi-row INSERT where InnoDB promises consecutive ids.
      TEST_DB === 'mysql' && !(await numbersConsecutively(db.connection())) ? 5 : 3
    )
    const payouts = await Payout.query().whereIn(
      'payout_uuid',
      events.map((e) => e.data.payoutId)
    )
    assert.lengthOf(payouts, 5)
    assert.lengthOf(
      app.events.filter((e) => e.name === 'payouts:created'),
      5
    )
  })

  test('inline processing goes in slices on SQLite by default, in whole batches on PostgreSQL and MySQL', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const { processor } = await partsOf(app.payouts)
    await storeBacklog(
      app,
      Array.from({ length: 20 }, () => createdEvent())
    )
    const db = await app.app.container.make('lucid.db')
    const statements = recordStatements(db)
    processor.kick()
    await processor.idle()
    const transactions = statements.filter((sql) => /^begin/i.test(sql)).length
    if (TEST_DB === 'sqlite') {
      // 8 rows first, then what the pace says fits in 5 ms; and one that finds nothing.
      assert.isAtLeast(transactions, 3)
    } else {
      assert.equal(transactions, 2, 'the 20 rows in one batch, and one that finds nothing')
    }
    assert.equal(
      await Payout.query()
        .count('* as total')
        .first()
        .then((r) => Number(r?.$extras.total)),
      20
    )
  })

  test('a delivery is an acknowledgement in flight from its verification to its answer; an unsigned or unfinished one never is', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const { processor } = await partsOf(app.payouts)
    const marks: Array<{ ended: boolean }> = []
    const acknowledging = processor.acknowledging.bind(processor)
    processor.acknowledging = () => {
      const mark = { ended: false }
      marks.push(mark)
      const end = acknowledging()
      return () => {
        mark.ended = true
        end()
      }
    }

    // Headers and half a body, then nothing: held open while the others are sent.
    const url = new URL(app.url)
    const stalled = await new Promise<Socket>((resolve) => {
      const socket = connect(Number(url.port), url.hostname, () => {
        socket.write(
          'POST /webhooks/payouts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
            'Content-Length: 1000\r\n\r\n{"type":'
        )
        resolve(socket)
      })
    })
    cleanup(() => void stalled.destroy())
    const unsigned = JSON.stringify(createdEvent())
    assert.equal(
      (await post(app, unsigned, { ...signed(unsigned), 'svc-signature': 't=1,v1=00' })).status,
      400
    )
    assert.lengthOf(marks, 0, 'neither the refused nor the unfinished request held processing')

    const raw = JSON.stringify(createdEvent())
    assert.equal((await post(app, raw, signed(raw))).status, 200)
    assert.lengthOf(marks, 1)
    assert.isTrue(marks[0].ended, 'ended once its answer was written')
  })

  test('the 200 goes out before the processing it starts (webhook.inlineSliceMs {$self})')
    .with([5, 0])
    .run(async ({ assert, cleanup }, sliceMs) => {
      const app = await startHttpApp(cleanup, { webhook: { inlineSliceMs: sliceMs } })
      const emitter = await app.app.container.make('emitter')
      let toldAt = 0
      // A listener holding the event loop 300 ms, as a slow synchronous one would.
      emitter.on('payouts:created', () => {
        const until = performance.now() + 300
        while (performance.now() < until);
        toldAt = performance.now()
      })
      const raw = JSON.stringify(createdEvent())
      const startedAt = performance.now()
      const { status } = await post(app, raw, signed(raw))
      const answeredAt = performance.now()
      const { processor } = await partsOf(app.payouts)
      await new Promise((resolve) => setTimeout(resolve, 50))
      await processor.idle()
      assert.equal(status, 200)
      assert.isAbove(toldAt, 0, 'then processed and told')
      assert.isBelow(answeredAt, toldAt - 250, 'the answer came before the listener held the loop')
      assert.isBelow(answeredAt - startedAt, 250)
    })

  test("a listener awaiting its own I/O does not shrink the slices: the pace is the transaction's", async ({
    assert,
    cleanup,
  }) => {
    // Slices of 200 ms: a transaction of a few dozen rows takes far less on every store, even
    // on a busy machine.
    const app = await startHttpApp(cleanup, { webhook: { inlineSliceMs: 200 } })
    const { processor } = await partsOf(app.payouts)
    const db = await app.app.container.make('lucid.db')
    const statements = recordStatements(db)
    /** The transactions the processor takes for 40 rows. */
    const transactionsFor40 = async () => {
      await storeBacklog(
        app,
        Array.from({ length: 40 }, () => createdEvent())
      )
      const before = statements.length
      processor.kick()
      await processor.idle()
      return statements.slice(before).filter((sql) => /^begin/i.test(sql)).length
    }
    const quick = await transactionsFor40()
    // Then listeners that take 100 ms a row. Counted in the pace, a slice would hold two rows:
    // 20 transactions for 40 rows. Paced by the transactions alone, slices grow (8, 16, ...).
    const emitter = await app.app.container.make('emitter')
    emitter.on('payouts:created', () => new Promise((resolve) => setTimeout(resolve, 100)))
    const slow = await transactionsFor40()
    assert.isBelow(slow, 12, `${slow} transactions for 40 rows (${quick} without the listeners)`)
    assert.equal(
      await Payout.query()
        .count('* as total')
        .first()
        .then((row) => Number(row?.$extras.total)),
      80
    )
  }).timeout(60_000)

  test('rejections answer 400 with a generic body: {name}')
    .with([
      {
        name: 'tampered body',
        mutate: (raw: string) => ({
          body: raw.replace('1701.45', '9701.45'),
          headers: signed(raw),
        }),
      },
      {
        name: 'wrong secret',
        mutate: (raw: string) => ({ body: raw, headers: signed(raw, { secret: 'whsec_other' }) }),
      },
      {
        name: 'stale timestamp',
        mutate: (raw: string) => ({ body: raw, headers: signed(raw, { t: now() - 305 }) }),
      },
      {
        name: 'future timestamp',
        mutate: (raw: string) => ({ body: raw, headers: signed(raw, { t: now() + 305 }) }),
      },
      {
        name: 'missing signature',
        mutate: (raw: string) => ({
          body: raw,
          headers: { ...signed(raw), 'svc-signature': undefined },
        }),
      },
      {
        name: 'malformed signature',
        mutate: (raw: string) => ({
          body: raw,
          headers: { ...signed(raw), 'svc-signature': 't=1,v1=zz' },
        }),
      },
      {
        name: 'missing delivery id',
        mutate: (raw: string) => ({
          body: raw,
          headers: { ...signed(raw), 'svc-delivery-id': undefined },
        }),
      },
      {
        name: 'malformed delivery id',
        mutate: (raw: string) => ({
          body: raw,
          headers: { ...signed(raw), 'svc-delivery-id': 'bad id with spaces' },
        }),
      },
      {
        name: 'delivery id over 255 characters',
        mutate: (raw: string) => ({
          body: raw,
          headers: { ...signed(raw), 'svc-delivery-id': 'x'.repeat(256) },
        }),
      },
      {
        name: 'delivery id outside visible ASCII',
        mutate: (raw: string) => ({
          body: raw,
          headers: { ...signed(raw), 'svc-delivery-id': 'dlv_\u00fc' },
        }),
      },
    ])
    .run(async ({ assert, cleanup }, row) => {
      const app = await startHttpApp(cleanup)
      const raw = JSON.stringify(createdEvent())
      const { body, headers } = row.mutate(raw)
      const res = await post(app, body, headers)
      assert.deepEqual([res.status, res.body], [400, '{"error":"invalid webhook"}'])
      assert.lengthOf(await WebhookDelivery.all(), 0)
    })

  test('several v1 values: any one matching is enough; other schemes are ignored', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const raw = JSON.stringify(createdEvent())
    const good = signed(raw)
    const v1 = good['svc-signature'].split(',v1=')[1]
    const header = `t=${good['svc-signature'].slice(2, 12)},v1=${'0'.repeat(64)},v2=${'f'.repeat(64)},v1=${v1}`
    assert.equal((await post(app, raw, { ...good, 'svc-signature': header })).status, 200)
  })

  test('the previous secret is accepted during the grace period and refused after it', async ({
    assert,
    cleanup,
  }) => {
    const inGrace = await startHttpApp(cleanup, {
      webhook: {
        secret: 'whsec_new',
        previousSecret: 'whsec_old',
        previousSecretValidUntil: new Date(Date.now() + 60_000).toISOString(),
      },
    })
    const raw = JSON.stringify(createdEvent())
    assert.equal((await post(inGrace, raw, signed(raw, { secret: 'whsec_old' }))).status, 200)
    assert.equal((await post(inGrace, raw, signed(raw, { secret: 'whsec_new' }))).status, 200)
    const expired = await startHttpApp(cleanup, {
      webhook: {
        secret: 'whsec_new',
        previousSecret: 'whsec_old',
        previousSecretValidUntil: new Date(Date.now() - 1000).toISOString(),
      },
    })
    assert.equal((await post(expired, raw, signed(raw, { secret: 'whsec_old' }))).status, 400)
  })

  test('a body over 256 KB gets 413 without being stored', async ({ assert, cleanup }) => {
    const app = await startHttpApp(cleanup)
    const raw = JSON.stringify({ ...createdEvent(), pad: 'x'.repeat(300 * 1024) })
    const res = await post(app, raw, signed(raw))
    assert.equal(res.status, 413)
    assert.lengthOf(await WebhookDelivery.all(), 0)
  })

  test('bodies with a BOM or invalid UTF-8 verify over their raw bytes and are kept byte for byte', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const withBom = Buffer.concat([
      Buffer.from([0xef, 0xbb, 0xbf]),
      Buffer.from(JSON.stringify(createdEvent())),
    ])
    const invalidUtf8 = Buffer.concat([
      Buffer.from('{"type":"payout.created","data":{"payoutId":"'),
      Buffer.from([0xc3, 0x28]),
      Buffer.from('"}}'),
    ])
    for (const raw of [withBom, invalidUtf8]) {
      const headers = signed(raw)
      assert.equal((await post(app, raw, headers)).status, 200)
      const row = await WebhookDelivery.findByOrFail('deliveryId', headers['svc-delivery-id'])
      assert.isTrue(row.body.equals(raw))
    }
  })

  test('a signed body starting with a BOM is acknowledged, then applied; its bytes stay as received', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const event = createdEvent()
    const raw = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(JSON.stringify(event))])
    const headers = signed(raw)
    assert.equal((await post(app, raw, headers)).status, 200)
    await app.payouts.drainInbox()
    const payout = await Payout.findByOrFail('payoutUuid', event.data.payoutId)
    assert.deepEqual([payout.status, payout.payoutAmount], ['pending', '1701.45'])
    const row = await WebhookDelivery.findByOrFail('deliveryId', headers['svc-delivery-id'])
    assert.deepEqual([row.state, row.lastError], ['processed', null])
    assert.isTrue(row.body.equals(raw))
    assert.deepEqual(
      app.events
        .filter((e) => e.name.startsWith('payouts:'))
        .map((e) => e.name)
        .sort(),
      ['payouts:created', 'payouts:webhook_received']
    )
  })

  test('Svc-Delivery-Id: any visible ASCII up to 255 characters is taken and stored as sent', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const ids = [
      'dlv/2026+01=',
      'aGVsbG8gd29ybGQ=',
      `!"#$%&'()*+,-./:;<=>?@[\\]^_\`{|}~`,
      'x'.repeat(255),
      '1',
    ]
    for (const id of ids) {
      const raw = JSON.stringify(createdEvent())
      const res = await post(app, raw, signed(raw, { id }))
      assert.equal(res.status, 200, id)
      assert.isNotNull(await WebhookDelivery.findBy('deliveryId', id), id)
    }
    await app.payouts.drainInbox()
    assert.lengthOf(
      app.events.filter((e) => e.name === 'payouts:created'),
      ids.length
    )
  })

  test('a duplicate Svc-Delivery-Id answers 200 and does nothing more', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const raw = JSON.stringify(createdEvent())
    const headers = signed(raw)
    assert.equal((await post(app, raw, headers)).status, 200)
    const again = await post(app, raw, headers)
    assert.deepEqual([again.status, JSON.parse(again.body).duplicate], [200, true])
    await app.payouts.drainInbox()
    assert.lengthOf(await WebhookDelivery.all(), 1)
    assert.lengthOf(
      app.events.filter((e) => e.name === 'payouts:created'),
      1
    )
  })

  test('out-of-order deliveries and a replay with a new id end in one completion', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const payoutId = randomUUID()
    const sequence = [
      statusEvent(payoutId, 'completed', 'delivered'),
      statusEvent(payoutId, 'processing', 'converting'),
      createdEvent(payoutId),
      statusEvent(payoutId, 'processing', 'collected'),
    ]
    for (const event of sequence) {
      const raw = JSON.stringify(event)
      assert.equal((await post(app, raw, signed(raw, { type: event.type }))).status, 200)
    }
    // The service replays the completion with a new delivery id.
    const replay = JSON.stringify(sequence[0])
    assert.equal(
      (await post(app, replay, signed(replay, { type: 'payout.status.updated' }))).status,
      200
    )
    await app.payouts.drainInbox()
    const payout = await Payout.findByOrFail('payoutUuid', payoutId)
    assert.deepEqual([payout.status, payout.step], ['completed', 'delivered'])
    assert.isNotNull(payout.completedAt)
    assert.lengthOf(
      app.events.filter((e) => e.name === 'payouts:completed'),
      1
    )
    assert.lengthOf(
      app.events.filter((e) => e.name === 'payouts:created'),
      1
    )
    assert.lengthOf(await WebhookDelivery.query().where('state', 'processed'), 5)
  })

  test('unknown event types are stored and acknowledged, never applied', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const raw = JSON.stringify({
      type: 'payout.delivered',
      createdAt: new Date().toISOString(),
      data: { payoutId: randomUUID() },
    })
    assert.equal((await post(app, raw, signed(raw, { type: 'payout.delivered' }))).status, 200)
    await app.payouts.drainInbox()
    const [row] = await WebhookDelivery.all()
    assert.equal(row.state, 'processed')
    assert.match(row.lastError!, /unknown event type/)
    assert.lengthOf(await Payout.all(), 0)
  })

  test("a database failure during insert answers 5xx; the service's retry is then stored", async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const db = await app.app.container.make('lucid.db')
    const table = `${app.prefix}webhook_deliveries`
    const raw = JSON.stringify(createdEvent())
    const headers = signed(raw)
    await db.connection().schema.renameTable(table, `${table}_away`)
    const failed = await post(app, raw, headers)
    await db.connection().schema.renameTable(`${table}_away`, table)
    assert.equal(failed.status, 503)
    assert.notInclude(failed.body, SECRET)
    const retried = await post(app, raw, headers)
    assert.equal(retried.status, 200)
    assert.lengthOf(await WebhookDelivery.all(), 1)
  })

  test("the bodyparser still parses JSON on the app's other routes", async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const response = await request(`${app.url}/echo`, {
      method: 'POST',
      body: '{"a":1}',
      headers: { 'content-type': 'application/json' },
    })
    assert.deepEqual(await response.body.json(), { a: 1 })
  })

  test('an event that can never apply (no payout id) is dead-lettered at once', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    const raw = JSON.stringify({ type: 'payout.status.updated', data: { status: 'processing' } })
    assert.equal((await post(app, raw, signed(raw, { type: 'payout.status.updated' }))).status, 200)
    await app.payouts.drainInbox()
    const [row] = await WebhookDelivery.all()
    assert.equal(row.state, 'dead', 'an event without a payout id can never apply: dead at once')
    assert.match(row.lastError!, /payoutId/)
  })
})
