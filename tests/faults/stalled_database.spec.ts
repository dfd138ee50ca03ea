import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { Verrou } from '@verrou/core'
import { memoryStore } from '@verrou/core/drivers/memory'
import { request } from 'undici'
import { JobScheduler } from '../../src/jobs/scheduler.ts'
import { Payout, WebhookDelivery } from '../../src/models/main.ts'
import { signPayload } from '../../src/signature/main.ts'
import { boundedConnection, connectionConfig, TEST_DB } from '../helpers/database.ts'
import { startHttpApp, type HttpApp } from '../helpers/http_app.ts'
import { TcpProxy } from '../helpers/tcp_proxy.ts'

const SECRET = 'whsec_current_secret'
const SERVER_ONLY = 'needs PostgreSQL or MySQL (TEST_DB=pg, TEST_DB=mysql) behind a TCP proxy'

/** A signed payout.created delivery for a new payout. */
function delivery(payoutId = randomUUID(), deliveryId = `dlv_${randomUUID()}`) {
  const raw = JSON.stringify({
    type: 'payout.created',
    createdAt: new Date().toISOString(),
    data: {
      payoutId,
      transactionType: 'fiat_to_fiat',
      payoutAmount: 10,
      payoutCurrency: 'MXN',
      sourceCurrency: 'USD',
      recipientId: randomUUID(),
      status: 'pending',
      createdAt: new Date().toISOString(),
    },
  })
  return { payoutId, deliveryId, raw }
}

/**
 * Posts a delivery as the service does, giving up after its 10 s (a receiver that has not
 * answered by then has failed the attempt): the status, or 'no answer'.
 */
async function post(app: HttpApp, { raw, deliveryId }: ReturnType<typeof delivery>) {
  try {
    const response = await request(`${app.url}/webhooks/payouts`, {
      method: 'POST',
      body: raw,
      headers: {
        'content-type': 'application/json',
        'svc-signature': signPayload(SECRET, Math.floor(Date.now() / 1000), raw),
        'svc-delivery-id': deliveryId,
        'svc-event-type': 'payout.created',
      },
      headersTimeout: 10_000,
      bodyTimeout: 10_000,
    })
    await response.body.text()
    return response.statusCode
  } catch {
    return 'no answer' as const
  }
}

/**
 * The app's PostgreSQL or MySQL connection goes through a proxy the test controls, with the two
 * settings the README advises for production: a bound on opening a connection well below
 * the route's (a pool waiting on a dropped handshake has nothing to hand out), and sessions left
 * idle in a transaction ended by the server (a flow dropped silently never tells the
 * server its client went away, and its locks would stay).
 */
async function appBehindProxy(
  cleanup: (fn: () => Promise<void>) => void,
  payouts: Parameters<typeof startHttpApp>[1] = {}
) {
  const base = connectionConfig('http') as any
  const proxy = new TcpProxy({ host: base.connection.host, port: base.connection.port })
  await proxy.start()
  cleanup(() => proxy.close())
  const connection = boundedConnection(base, {
    port: proxy.port,
    connectMs: 500,
    idleInTransactionMs: 2000,
  })
  const app = await startHttpApp(
    cleanup,
    {
      ...payouts,
      webhook: { ackTimeoutMs: 2000, ...payouts.webhook },
      ledger: { transactionTimeoutMs: 1500, ...payouts.ledger },
    },
    undefined,
    connection
  )
  return { app, proxy }
}

test.group(`Faults | a database connection that stops answering (${TEST_DB})`, () => {
  test('the route answers 503 within its bound while stalled, and stores the next delivery once healed', async ({
    assert,
    cleanup,
  }) => {
    const { app, proxy } = await appBehindProxy(cleanup)
    assert.equal(await post(app, delivery()), 200)

    proxy.stall()
    const during = [delivery(), delivery(), delivery()]
    // Three at once (one group-commit batch, or several): each told 503, none left hanging.
    assert.deepEqual(await Promise.all(during.map((d) => post(app, d))), [503, 503, 503])
    // A later one is not queued behind the stuck batch either.
    const later = delivery()
    assert.equal(await post(app, later), 503)

    await proxy.heal()
    const after = delivery()
    assert.equal(await post(app, after), 200)
    // The service delivers the refused ones again: each stored or found stored, once.
    for (const d of [...during, later]) assert.equal(await post(app, d), 200)
    await app.payouts.drainInbox()
    for (const d of [...during, later, after]) {
      const rows = await WebhookDelivery.query().where('deliveryId', d.deliveryId)
      assert.equal(rows.length, 1)
      assert.equal(rows[0].state, 'processed')
      assert.exists(await Payout.findBy('payoutUuid', d.payoutId))
    }
  })
    .skip(TEST_DB === 'sqlite', SERVER_ONLY)
    .timeout(60_000)

  test('a secrets load that stalls fails its waiters; after healing the next request loads again', async ({
    assert,
    cleanup,
  }) => {
    const { app, proxy } = await appBehindProxy(cleanup)
    // Nothing read yet: the first delivery has to load the stored secrets.
    proxy.stall()
    assert.equal(await post(app, delivery()), 503)
    await proxy.heal()
    const healed = delivery()
    assert.equal(await post(app, healed), 200)
    assert.exists(await WebhookDelivery.findBy('deliveryId', healed.deliveryId))
  })
    .skip(TEST_DB === 'sqlite', SERVER_ONLY)
    .timeout(60_000)

  test('inbox processing stalled mid-transaction gives up, and processes the rows once healed', async ({
    assert,
    cleanup,
  }) => {
    const { app, proxy } = await appBehindProxy(cleanup, { webhook: { retryIntervalMs: 0 } })
    const stored = delivery()
    // Stored, but not processed: the route kicks the processor only after the answer.
    assert.equal(await post(app, stored), 200)
    await app.payouts.drainInbox()
    const second = delivery()
    assert.equal(await post(app, second), 200)

    proxy.stall()
    const error = await app.payouts.drainInbox().then(
      () => null,
      (caught) => caught
    )
    // Given up, not hanging: at the plugin's deadline, or when the pool's new connection
    // times out first (whichever the stall hits).
    assert.instanceOf(error, Error)

    await proxy.heal()
    // The abandoned transaction changed nothing; a fresh drain does the work, no restart.
    await app.payouts.drainInbox()
    const row = await WebhookDelivery.findByOrFail('deliveryId', second.deliveryId)
    assert.equal(row.state, 'processed')
    assert.exists(await Payout.findBy('payoutUuid', second.payoutId))
  })
    .skip(TEST_DB === 'sqlite', SERVER_ONLY)
    .timeout(60_000)

  test('a database that refuses connections gets 503s, and the route stores again once it is back', async ({
    assert,
    cleanup,
  }) => {
    const { app, proxy } = await appBehindProxy(cleanup)
    assert.equal(await post(app, delivery()), 200)
    await proxy.refuse()
    assert.equal(await post(app, delivery()), 503)
    await proxy.heal()
    const back = delivery()
    assert.equal(await post(app, back), 200)
    assert.exists(await WebhookDelivery.findBy('deliveryId', back.deliveryId))
  })
    .skip(TEST_DB === 'sqlite', SERVER_ONLY)
    .timeout(60_000)
})

test.group(`Faults | a database another process holds (${TEST_DB})`, () => {
  test('SQLite locked by another process: 503, then stored once the lock is released', async ({
    assert,
    cleanup,
  }) => {
    const app = await startHttpApp(cleanup)
    assert.equal(await post(app, delivery()), 200)
    // Processed, so the app holds no write lock when the other process asks for it.
    await app.payouts.drainInbox()
    // Another process's write transaction on the same file (a backup, a migration), which
    // waits for the lock if the app still holds it (a busy machine).
    const holder = spawn(
      process.execPath,
      [
        '-e',
        `const db = new (require('better-sqlite3'))(process.argv[1], { timeout: 20000 });
         db.exec('BEGIN IMMEDIATE'); console.log('locked');
         process.stdin.once('data', () => { db.exec('COMMIT'); console.log('released') })`,
        (connectionConfig('http') as any).connection.filename,
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] }
    )
    cleanup(async () => void holder.kill('SIGKILL'))
    holder.stdout.setEncoding('utf8')
    assert.match(String((await once(holder.stdout, 'data'))[0]), /locked/)
    const blocked = delivery()
    assert.equal(await post(app, blocked), 503)
    holder.stdin.write('commit\n')
    assert.match(String((await once(holder.stdout, 'data'))[0]), /released/)
    assert.equal(await post(app, blocked), 200)
    const next = delivery()
    assert.equal(await post(app, next), 200)
    await app.payouts.drainInbox()
    assert.exists(await Payout.findBy('payoutUuid', blocked.payoutId))
    assert.exists(await Payout.findBy('payoutUuid', next.payoutId))
  })
    .skip(TEST_DB !== 'sqlite', 'the SQLite file lock; PostgreSQL and MySQL have the proxy tests')
    .timeout(60_000)
})

test.group('Faults | a job run that never ends', () => {
  test('is given up at its bound, logged as failed, and the job runs again at a later tick', async ({
    assert,
  }) => {
    const errors: string[] = []
    const logger = {
      info: () => {},
      error: (_obj: object, message?: string) => void errors.push(String(message)),
    }
    const runs: string[] = []
    const job = {
      name: 'reconcile',
      intervalMs: 100,
      run: () => {
        runs.push('run')
        // The first run waits on a connection that never answers.
        return runs.length === 1 ? new Promise<never>(() => {}) : Promise.resolve('ok')
      },
    }
    const locks = new Verrou({ default: 'memory', stores: { memory: { driver: memoryStore() } } })
    const scheduler = new JobScheduler({
      locks: locks.use('memory'),
      logger,
      jobs: [job],
      runTimeoutMs: 300,
    })
    assert.equal(await scheduler.tick(job), 'failed')
    assert.include(errors, 'payouts job failed')
    // Its lock lapses at its TTL (the interval); then the job is free to run.
    await new Promise((resolve) => setTimeout(resolve, 150))
    assert.equal(await scheduler.tick(job), 'ran')
    assert.deepEqual(runs, ['run', 'run'])
    await scheduler.stop()
  }).timeout(10_000)
})
