import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import { Logger } from '@adonisjs/core/logger'
import type { Database } from '@adonisjs/lucid/database'
import { dbDate } from '../../src/database/dates.ts'
import { tableNames } from '../../src/database/schema.ts'
import { validateConfig } from '../../src/define_config.ts'
import { Heartbeats } from '../../src/health/heartbeats.ts'
import type { Reachability } from '../../src/health/reachability.ts'
import { readHealth } from '../../src/health/report.ts'
import { BroadcastRelay } from '../../src/service/broadcast_relay.ts'
import { listInboxDeliveries } from '../../src/service/inbox_view.ts'
import type { PayoutChangedEvent } from '../../src/types/events.ts'
import { readBacklogNow } from '../../src/webhooks/inbox_backlog.ts'
import { InboxProcessor, type InboxApplier } from '../../src/webhooks/inbox_processor.ts'
import { InboxStore, type InboxStoreOptions } from '../../src/webhooks/inbox_store.ts'
import { SecretStore, type SecretCipher } from '../../src/webhooks/secret_store.ts'
import { TEST_API_KEY } from '../helpers/app.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'
import { inboxDelivery as delivery } from '../helpers/inbox.ts'

/**
 * Two accounts over the same tables: `main` (a store built without an account, as every
 * one-account app's) and `beta`. Each one's stores, processors, report and relay see their
 * own rows only, the same ids in both included.
 */
const OTHER = 'beta'
const logger = new Logger({ enabled: false })

/** The inbox of `main` and of `beta` on one fresh table. */
async function twoInboxes(
  cleanup: (fn: () => Promise<void>) => void,
  options: InboxStoreOptions = {}
) {
  const { db, prefix } = await setupDatabase(cleanup, 'accounts')
  const table = tableNames(prefix).webhookDeliveries
  return {
    db,
    prefix,
    table,
    main: new InboxStore(db, table, undefined, options),
    beta: new InboxStore(db, table, undefined, { ...options, account: OTHER }),
  }
}

/** The table's rows as `[account, delivery id, state]`, in id order. */
async function rowsOf(db: Database, table: string) {
  const rows = await db.connection().from(table).select('account', 'delivery_id', 'state')
  return rows
    .map((row: any) => [row.account, row.delivery_id, row.state])
    .sort((x: string[], y: string[]) => x.join().localeCompare(y.join()))
}

/** A processor on `store` recording what it applied, on the given path. */
function recordingProcessor(store: InboxStore, path: 'transaction' | 'row by row') {
  const applied: string[] = []
  const applier: InboxApplier = {
    applyOne: async (_envelope, row) => void applied.push(`${store.account}:${row.deliveryId}`),
    applyBatch:
      path === 'row by row'
        ? undefined
        : async (_trx, items) => {
            applied.push(...items.map((item) => `${store.account}:${item.row.deliveryId}`))
            return { verdicts: items.map(() => ({ state: 'processed' as const, note: null })) }
          },
  }
  return { applied, processor: new InboxProcessor({ store, applier, logger }) }
}

test.group(`Accounts | inboxes of two accounts on one table (${TEST_DB})`, () => {
  for (const path of ['transaction', 'row by row'] as const) {
    test(`the same delivery id in two accounts is two rows, each processed once by its own account (${path})`, async ({
      assert,
      cleanup,
    }) => {
      const { db, table, main, beta } = await twoInboxes(cleanup, {
        rowByRow: path === 'row by row',
      })
      assert.equal(await main.insert(delivery('dlv_1')), 'stored')
      assert.equal(await beta.insert(delivery('dlv_1')), 'stored')
      // Together, as the route's group commit stores them: a duplicate within its account only.
      const together = await Promise.all([
        main.insert(delivery('dlv_1')),
        beta.insert(delivery('dlv_2')),
        main.insert(delivery('dlv_2')),
      ])
      assert.deepEqual(together, ['duplicate', 'stored', 'stored'])

      const ofMain = recordingProcessor(main, path)
      assert.equal(await ofMain.processor.drain(), 2)
      assert.sameMembers(ofMain.applied, ['main:dlv_1', 'main:dlv_2'])
      assert.deepEqual(await rowsOf(db, table), [
        [OTHER, 'dlv_1', 'pending'],
        [OTHER, 'dlv_2', 'pending'],
        ['main', 'dlv_1', 'processed'],
        ['main', 'dlv_2', 'processed'],
      ])

      const ofBeta = recordingProcessor(beta, path)
      assert.equal(await ofBeta.processor.drain(), 2)
      assert.sameMembers(ofBeta.applied, [`${OTHER}:dlv_1`, `${OTHER}:dlv_2`])
      assert.equal(await ofMain.processor.drain(), 0, 'nothing is due for main again')
      assert.lengthOf(ofMain.applied, 2)
    })
  }

  for (const rowByRow of [false, true]) {
    const mode = rowByRow ? 'row by row' : 'in one statement'
    test(`a claim of one account never takes the other's rows (${mode})`, async ({
      assert,
      cleanup,
    }) => {
      const { db, table, main, beta } = await twoInboxes(cleanup, { rowByRow })
      await beta.insert(delivery('dlv_b1'))
      await beta.insert(delivery('dlv_b2'))
      const now = new Date()
      assert.deepEqual(await main.claimDue(now, 10, 60_000), [])
      if (main.claimsInTransaction) {
        assert.isNull(await main.processDueInTransaction(now, 10, async () => []))
      }
      assert.deepEqual(await rowsOf(db, table), [
        [OTHER, 'dlv_b1', 'pending'],
        [OTHER, 'dlv_b2', 'pending'],
      ])

      // Handed the other account's row ids, a store touches none of them.
      const claimed = await beta.claimDue(now, 10, 60_000)
      assert.lengthOf(claimed, 2)
      const [first, second] = claimed
      await main.markProcessed([first.id])
      await main.markFailed(second.id, 'not yours', null)
      assert.equal(await main.renewLeases(claimed, new Date(now.getTime() + 120_000)), 0)
      assert.isNull(await main.processClaimed(first, now, async () => ({ note: null, value: 1 })))
      assert.deepEqual(await main.statesOf([first.id, second.id]), [])
      assert.deepEqual(await beta.statesOf([first.id, second.id]), ['processing', 'processing'])
      assert.deepEqual(
        await beta.processClaimed(first, now, async () => ({ note: null, value: 1 })),
        {
          value: 1,
        }
      )
    })
  }

  test('a replay of one account requeues only its rows; the listing shows only its rows', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix, table, main, beta } = await twoInboxes(cleanup)
    for (const store of [main, beta]) {
      await store.insert(delivery('dlv_dead'))
      await store.insert(delivery('dlv_done'))
    }
    const client = db.connection()
    await client.from(table).where('delivery_id', 'dlv_dead').update({ state: 'dead' })
    await client.from(table).where('delivery_id', 'dlv_done').update({ state: 'processed' })

    const byState = await main.requeue({ state: 'dead' })
    assert.lengthOf(byState, 1)
    const byId = await main.requeue({ ids: ['dlv_done'], force: true })
    assert.lengthOf(byId, 1)
    assert.deepEqual(await rowsOf(db, table), [
      [OTHER, 'dlv_dead', 'dead'],
      [OTHER, 'dlv_done', 'processed'],
      ['main', 'dlv_dead', 'pending'],
      ['main', 'dlv_done', 'pending'],
    ])

    const config = (account?: string) =>
      validateConfig({
        apiKey: TEST_API_KEY,
        baseUrl: 'http://127.0.0.1:9',
        account,
        ledger: { tablePrefix: prefix },
      })
    const listed = await listInboxDeliveries(db, config(OTHER), {})
    assert.sameDeepMembers(
      listed.map((row) => [row.deliveryId, row.state]),
      [
        ['dlv_dead', 'dead'],
        ['dlv_done', 'processed'],
      ]
    )
    const backlog = (account?: string) =>
      readBacklogNow({ client: () => db.connection(), table, timeoutMs: 0, account })
    assert.equal((await backlog()).rows, 2)
    assert.equal((await backlog(OTHER)).rows, 0)
  })
})

/** Reversible and visibly not plain text; the real app uses AdonisJS encryption. */
const cipher: SecretCipher = {
  encrypt: (value) => `enc:${Buffer.from(value).toString('base64')}`,
  decrypt: <T>(value: string) => Buffer.from(value.slice(4), 'base64').toString() as T,
}

test.group(`Accounts | stored secrets of two accounts (${TEST_DB})`, () => {
  test("one account's subscriptions are neither listed, rotated nor deleted by the other", async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'accounts')
    const table = tableNames(prefix).webhookSecrets
    const main = new SecretStore(db, table, cipher, undefined, 0)
    const beta = new SecretStore(db, table, cipher, undefined, 0, undefined, { account: OTHER })
    await main.save({ subscriptionId: 'sub_1', url: 'https://a.test/w', secret: 'whsec_main' })
    // The same subscription id in the other account is a row of its own.
    await beta.save({ subscriptionId: 'sub_1', url: 'https://b.test/w', secret: 'whsec_beta' })
    await beta.save({ subscriptionId: 'sub_2', url: 'https://b.test/w', secret: 'whsec_beta2' })

    assert.deepEqual(await main.activeSecrets(), ['whsec_main'])
    assert.deepEqual(await beta.activeSecrets(), ['whsec_beta', 'whsec_beta2'])
    assert.isFalse(await main.has('sub_2'))
    assert.isFalse(await main.delete('sub_2'))
    await assert.rejects(() => main.rotate('sub_2', 'whsec_x'))
    await main.rotate('sub_1', 'whsec_main2')
    assert.deepEqual(await main.activeSecrets(), ['whsec_main2'])
    assert.deepEqual(await beta.activeSecrets(), ['whsec_beta', 'whsec_beta2'])
    assert.isTrue(await beta.has('sub_2'))
    const rows = await db.connection().from(table).select('account', 'subscription_id')
    assert.sameDeepMembers(
      rows.map((row: any) => [row.account, row.subscription_id]),
      [
        ['main', 'sub_1'],
        [OTHER, 'sub_1'],
        [OTHER, 'sub_2'],
      ]
    )
  })
})

test.group(`Accounts | health and relay of two accounts (${TEST_DB})`, () => {
  test('the health report of one account counts only its backlog, dead letters and beats', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'accounts')
    const t = tableNames(prefix)
    const config = (account: string) =>
      validateConfig({
        apiKey: TEST_API_KEY,
        baseUrl: 'http://127.0.0.1:9',
        account,
        ledger: { tablePrefix: prefix },
        webhook: { processing: 'worker' },
        jobs: { enabled: false },
      })
    const main = new InboxStore(db, t.webhookDeliveries)
    const beta = new InboxStore(db, t.webhookDeliveries, undefined, { account: OTHER })
    await main.insert(delivery('dlv_1'))
    for (const id of ['dlv_1', 'dlv_2', 'dlv_3']) await beta.insert(delivery(id))
    await db
      .connection()
      .from(t.webhookDeliveries)
      .where('account', OTHER)
      .where('delivery_id', 'dlv_3')
      .update({ state: 'dead' })
    const client = db.connection()
    const longAgo = dbDate(client, new Date(Date.now() - 7 * 86_400_000))
    await client.table(t.payouts).insert({
      account: OTHER,
      payout_uuid: randomUUID(),
      status: 'pending',
      created_at: longAgo,
      updated_at: longAgo,
    })
    await new Heartbeats({ db, config: config(OTHER), logger }).beat('worker')

    const reachability = {
      read: async () => ({ status: 'ok', value: null, message: 'not measured here' }),
    } as unknown as Reachability
    const report = (account: string) =>
      // Expected to beat from now on: main's worker, never seen, is not overdue yet.
      readHealth({
        config: config(account),
        environment: 'sandbox',
        db,
        reachability,
        watchingSince: Date.now(),
      })
    const [ofMain, ofBeta] = [await report('main'), await report(OTHER)]
    assert.deepEqual([ofMain.account, ofBeta.account], ['main', OTHER])
    assert.equal(ofMain.checks.inboxBacklog!.value, 1)
    assert.equal(ofBeta.checks.inboxBacklog!.value, 2)
    assert.equal(ofMain.checks.deadLetters!.value, 0)
    assert.equal(ofBeta.checks.deadLetters!.value, 1)
    assert.equal(ofMain.checks.stuckPayouts!.value, 0)
    assert.equal(ofBeta.checks.stuckPayouts!.value, 1)
    // Worker mode: beta's worker beat, main's never did.
    assert.deepEqual(ofMain.checks.heartbeats!.overdue, [])
    assert.isNull(ofMain.checks.heartbeats!.lastBeats.worker)
    assert.isString(ofBeta.checks.heartbeats!.lastBeats.worker)
  })

  test("a relay of one account never broadcasts the other's changes", async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'accounts')
    const t = tableNames(prefix)
    const client = db.connection()
    const relayOf = (account?: string) => {
      const sent: PayoutChangedEvent[] = []
      const relay = new BroadcastRelay({
        db,
        account,
        notifier: { broadcast: (event) => void sent.push(event) },
        logger,
        intervalMs: 250,
        gapWaitMs: 30_000,
      })
      return { relay, sent }
    }
    const main = relayOf()
    const beta = relayOf(OTHER)
    await main.relay.readOnce()
    await beta.relay.readOnce()

    // One payout id in both accounts (ids are unique per account), each with its own change.
    const payoutUuid = randomUUID()
    const now = dbDate(client, new Date())
    const change = async (account: string, status: string) => {
      const payouts = () => client.from(t.payouts).where('account', account)
      const found = await payouts().where('payout_uuid', payoutUuid).first()
      if (found) await payouts().where('id', found.id).update({ status })
      else {
        await client.table(t.payouts).insert({
          account,
          payout_uuid: payoutUuid,
          status,
          created_at: now,
          updated_at: now,
        })
      }
      await client.table(t.payoutEvents).insert({
        account,
        payout_uuid: payoutUuid,
        source: 'webhook',
        status,
        applied: true,
        observed_at: now,
        created_at: now,
      })
    }
    await change('main', 'pending')
    await change(OTHER, 'failed')
    await change('main', 'processing')

    await main.relay.readOnce()
    await beta.relay.readOnce()
    assert.deepEqual(
      main.sent.map((event) => [event.payoutId, event.status]),
      [
        [payoutUuid, 'pending'],
        [payoutUuid, 'processing'],
      ]
    )
    assert.deepEqual(
      beta.sent.map((event) => [event.payoutId, event.status]),
      [[payoutUuid, 'failed']]
    )
    // The other account's ids moved each cursor: nothing is waited for as a gap.
    assert.deepEqual(main.relay.pendingGaps(), [])
    assert.deepEqual(beta.relay.pendingGaps(), [])
  })
})
