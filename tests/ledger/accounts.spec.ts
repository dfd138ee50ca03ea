import { randomUUID } from 'node:crypto'
import { test } from '@japa/runner'
import type { Database } from '@adonisjs/lucid/database'
import { DateTime } from 'luxon'
import type { PayoutsClient } from '../../src/client/main.ts'
import { dbDate } from '../../src/database/dates.ts'
import { tableNames } from '../../src/database/schema.ts'
import { validateConfig } from '../../src/define_config.ts'
import { EscrowFallback } from '../../src/jobs/escrow_fallback.ts'
import { Reconciler } from '../../src/jobs/reconciler.ts'
import { EscrowDeposits, createEscrowDeposit } from '../../src/ledger/escrow_deposits.ts'
import { PayoutExecutor } from '../../src/ledger/payout_executor.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { createPruner } from '../../src/ledger/pruning.ts'
import { RecipientsMirror } from '../../src/ledger/recipients_mirror.ts'
import type { PayoutChange, PayoutObservation } from '../../src/ledger/vocabulary.ts'
import {
  EscrowDeposit,
  ExecutionIntent,
  Payout,
  PayoutEvent,
  Recipient,
} from '../../src/models/main.ts'
import type { EscrowEvent } from '../../src/types/events.ts'
import { IntentsDesk } from '../../src/service/intents_desk.ts'
import { startEmulator, testClient } from '../emulator/helpers.ts'
import { TEST_API_KEY } from '../helpers/app.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

const UUID = '5b2f6c1e-8d4a-4f7b-9c3e-2a1d0e9f8b7c'
const TX = (digit: string) => `0x${digit.repeat(64)}`

/** One account's ledger on the shared tables, with what its listener heard. */
function ledgerOf(db: Database, account: string) {
  const changes: Array<PayoutChange<Payout>> = []
  const deposits: EscrowEvent[] = []
  const ledger = new PayoutLedger(
    db,
    {
      onChange: (change, deposit) => {
        changes.push(change)
        if (deposit) deposits.push(deposit)
      },
    },
    { account }
  )
  return { ledger, changes, deposits }
}

/** Rows of a model, as `account: field` pairs in account order. */
async function byAccount<Row extends { account: string }>(
  rows: PromiseLike<Row[]>,
  field: (row: Row) => unknown
) {
  const found = await rows
  return found
    .sort((a, b) => a.account.localeCompare(b.account))
    .map((row) => [row.account, field(row)])
}

const observe = (fields: Partial<PayoutObservation>): PayoutObservation => ({
  payoutId: UUID,
  source: 'webhook',
  ...fields,
})

test.group(`Ledger | accounts on one set of tables (${TEST_DB})`, () => {
  test('the same payout id and read id in two accounts are two rows; a change in one never moves the other', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'accounts')
    const main = ledgerOf(db, 'main')
    const eu = ledgerOf(db, 'eu')
    await main.ledger.apply(observe({ readId: 'po_same', status: 'pending' }))
    await eu.ledger.apply(observe({ readId: 'po_same', status: 'pending' }))
    const rows = () => byAccount(Payout.query().where('payout_uuid', UUID), (p) => p.status)
    assert.deepEqual(await rows(), [
      ['eu', 'pending'],
      ['main', 'pending'],
    ])

    // By UUID, then by read id: only main's row moves, only main's listener hears.
    await main.ledger.apply(observe({ status: 'processing', step: 'compliance_cleared' }))
    await main.ledger.apply(observe({ payoutId: 'po_same', status: 'completed' }))
    assert.deepEqual(await rows(), [
      ['eu', 'pending'],
      ['main', 'completed'],
    ])
    assert.deepEqual(
      main.changes.map((c) => [c.payout.account, c.current.status]),
      [
        ['main', 'pending'],
        ['main', 'processing'],
        ['main', 'completed'],
      ]
    )
    assert.lengthOf(eu.changes, 1)
    const log = await byAccount(PayoutEvent.query().where('payout_uuid', UUID), () => 1)
    assert.deepEqual(
      log.map(([account]) => account),
      ['eu', 'main', 'main', 'main']
    )
  })

  test("a read id's placeholder merges into its UUID in its own account only", async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'accounts')
    const main = ledgerOf(db, 'main')
    const eu = ledgerOf(db, 'eu')
    // Both first seen by the read id alone (a placeholder each, eu's first), then main learns
    // the UUID.
    await eu.ledger.apply(observe({ payoutId: 'po_ph', status: 'pending', source: 'poll' }))
    await main.ledger.apply(observe({ payoutId: 'po_ph', status: 'processing', source: 'poll' }))
    await main.ledger.applyBatch([observe({ readId: 'po_ph', status: 'processing' })])

    const rows = await byAccount(Payout.query().orderBy('id'), (p) => [p.payoutUuid, p.readId])
    assert.deepEqual(rows, [
      ['eu', ['po_ph', 'po_ph']],
      ['main', [UUID, 'po_ph']],
    ])
    const euLog = await PayoutEvent.query().where('account', 'eu')
    assert.deepEqual(
      euLog.map((e) => [e.payoutUuid, e.mergedFrom]),
      [['po_ph', null]]
    )
  })

  test('the outbox sweep of one account takes only its own un-notified changes', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'accounts')
    // Listeners that fail leave every change to a sweep.
    const failing = (account: string) =>
      new PayoutLedger(db, { onChange: () => Promise.reject(new Error('down')) }, { account })
    await failing('main').apply(observe({ status: 'pending' }))
    await failing('eu').apply(observe({ status: 'processing', step: 'compliance_cleared' }))

    const main = ledgerOf(db, 'main')
    assert.equal(await main.ledger.renotify({ olderThanMs: 0 }), 1)
    assert.deepEqual(
      main.changes.map((c) => [c.payout.account, c.current.status]),
      [['main', 'pending']]
    )
    const waiting = await PayoutEvent.query().whereNull('notified_at')
    assert.deepEqual(
      waiting.map((e) => e.account),
      ['eu']
    )
    const eu = ledgerOf(db, 'eu')
    assert.equal(await eu.ledger.renotify({ olderThanMs: 0 }), 1)
    assert.deepEqual(
      eu.changes.map((c) => [c.payout.account, c.current.status]),
      [['eu', 'processing']]
    )
  })

  test('the same idempotency key in two accounts is two intents: each sends its own call, each retry answers its own payout', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'accounts')
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const euKey = emu.admin.issueKey({ accountId: 'eu' })
    const accounts = [
      { account: 'main', apiKey: emu.apiKey, emulated: undefined },
      { account: 'eu', apiKey: euKey, emulated: 'eu' },
    ]
    const parts = accounts.map(({ account, apiKey, emulated }) => {
      const client = testClient(cleanup, { apiKey, baseUrl: emu.baseUrl })
      const { ledger } = ledgerOf(db, account)
      const methods = emu.admin.accountPaymentMethods(emulated)
      const body = {
        fromCurrency: 'USD',
        toCurrency: 'MXN',
        amount: 100,
        recipientId: emu.admin.seedRecipient({}, emulated).id,
        userPaymentMethodId: methods.find((method) => method.currency === 'USD')!.id,
      }
      return { account, body, executor: new PayoutExecutor({ db, ledger, client }) }
    })
    const first = []
    for (const { executor, body } of parts) {
      first.push(await executor.execute(body, { idempotencyKey: 'order-42' }))
    }
    assert.lengthOf(emu.admin.payouts(), 2, 'one payout per account at the service')
    assert.notEqual(first[0].result.payoutId, first[1].result.payoutId)
    assert.deepEqual(
      first.map(({ intent, payout }) => [intent.account, payout.account]),
      [
        ['main', 'main'],
        ['eu', 'eu'],
      ]
    )

    // Again under the same key, eu first: each answers its own payout, nothing is sent.
    for (const index of [1, 0]) {
      const { executor, body } = parts[index]
      const again = await executor.execute(body, { idempotencyKey: 'order-42' })
      assert.equal(again.result.payoutId, first[index].result.payoutId)
      assert.equal(again.payout.account, parts[index].account)
    }
    assert.lengthOf(emu.admin.payouts(), 2)
    const intents = await byAccount(
      ExecutionIntent.query().where('idempotency_key', 'order-42'),
      (i) => i.payoutUuid
    )
    assert.deepEqual(intents, [
      ['eu', first[1].result.payoutId],
      ['main', first[0].result.payoutId],
    ])
    const [view] = await new IntentsDesk(parts[1].executor).list(['succeeded'], 10)
    assert.equal(view.payoutUuid, first[1].result.payoutId)
    assert.lengthOf(await new IntentsDesk(parts[1].executor).list(['succeeded'], 10), 1)
    assert.throws(
      () => new PayoutExecutor({ db, ledger: ledgerOf(db, 'main').ledger, account: 'eu' } as any),
      /account "eu"/
    )
  })

  test('a reconcile of one account reads only its payouts', async ({ assert, cleanup }) => {
    const { db } = await setupDatabase(cleanup, 'accounts')
    const main = ledgerOf(db, 'main')
    const eu = ledgerOf(db, 'eu')
    const mainOnly = randomUUID()
    await main.ledger.apply(observe({ payoutId: mainOnly, status: 'pending' }))
    await eu.ledger.apply(observe({ payoutId: randomUUID(), status: 'pending' }))
    await main.ledger.apply(observe({ status: 'pending' }))
    await eu.ledger.apply(observe({ status: 'pending' }))

    const read: string[] = []
    const client = {
      rateLimit: null,
      getPayout: async (id: string) => {
        read.push(id)
        return { id, status: 'processing', step: 'compliance_cleared' }
      },
    } as unknown as Pick<PayoutsClient, 'getPayout' | 'rateLimit'>
    const summary = await new Reconciler({ db, ledger: main.ledger, client }).run({
      staleAfterMs: 0,
    })
    assert.deepEqual([summary.checked, summary.changed], [2, 2])
    assert.sameMembers(read, [mainOnly, UUID])
    assert.deepEqual(await byAccount(Payout.query().where('payout_uuid', UUID), (p) => p.status), [
      ['eu', 'pending'],
      ['main', 'processing'],
    ])
    assert.lengthOf(eu.changes, 2)
  })

  test('pruning one account removes only its rows, the same delivery id and key in the other kept', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'accounts')
    const t = tableNames(prefix)
    const sql = db.connection()
    const old = dbDate(sql, DateTime.now().minus({ days: 40 }))
    for (const account of ['main', 'eu']) {
      await sql.table(t.webhookDeliveries).insert({
        account,
        delivery_id: 'dlv_same',
        event_type: 'payout.created',
        raw_body: 'e30=',
        source: 'webhook',
        state: 'processed',
        attempts: 1,
        received_at: old,
        processed_at: old,
      })
      await sql.table(t.executionIntents).insert({
        account,
        idempotency_key: 'key-same',
        key_origin: 'plugin',
        flow: 'fiat_to_fiat',
        request_body: '{}',
        body_hash: 'x'.repeat(64),
        state: 'succeeded',
        attempts: 1,
        created_at: old,
        updated_at: old,
      })
    }
    const pruner = (account: string) =>
      createPruner(
        db,
        validateConfig({
          account,
          apiKey: TEST_API_KEY,
          baseUrl: 'http://127.0.0.1:9',
          ledger: { tablePrefix: prefix },
        })
      )
    const left = async () =>
      Promise.all(
        [t.webhookDeliveries, t.executionIntents].map(async (table) =>
          (await sql.from(table).select('account')).map((row) => row.account)
        )
      )

    assert.deepInclude(await pruner('main').prune(), { processedDeliveries: 1, finishedIntents: 1 })
    assert.deepEqual(await left(), [['eu'], ['eu']])
    assert.deepInclude(await pruner('main').prune({ dryRun: true }), {
      processedDeliveries: 0,
      finishedIntents: 0,
    })
    assert.deepInclude(await pruner('eu').prune(), { processedDeliveries: 1, finishedIntents: 1 })
    assert.deepEqual(await left(), [[], []])
  })

  test('escrow deposits with the same quote id in two accounts are two: recorded, detected and claimed each in its own', async ({
    assert,
    cleanup,
  }) => {
    const { db } = await setupDatabase(cleanup, 'accounts')
    const stored = (account: string, quoteId: string, payoutId: string) =>
      db.transaction((trx) =>
        createEscrowDeposit(
          trx,
          {
            quoteId,
            payoutId,
            escrowAddress: '0xescrow',
            tokenAddress: '0xtoken',
            chainId: 8453,
            depositAmountAtomic: 100_000_000n,
          } as any,
          account
        )
      )
    await stored('main', 'qt_same', UUID)
    await stored('eu', 'qt_same', UUID)
    // And one of eu's own, still due when main's fallback runs.
    await stored('eu', 'qt_eu', randomUUID())
    const sent: string[] = []
    const client = {
      getQuoteStatus: async () => ({ status: 'awaiting_escrow_deposit' }),
      confirmEscrowDeposit: async ({ txHash }: { txHash: string }) => void sent.push(txHash),
    } as unknown as Pick<PayoutsClient, 'getQuoteStatus' | 'confirmEscrowDeposit'>
    const deposits = (account: string) => new EscrowDeposits({ db, client, account })
    const earlier = DateTime.now().minus({ hours: 1 })
    await deposits('main').record({ quoteId: 'qt_same', txHash: TX('a'), confirmedAt: earlier })
    await deposits('eu').record({ quoteId: 'qt_same', txHash: TX('b'), confirmedAt: earlier })
    await deposits('eu').record({ quoteId: 'qt_eu', txHash: TX('c'), confirmedAt: earlier })
    const rows = () =>
      byAccount(EscrowDeposit.query().where('quote_id', 'qt_same'), (d) => [d.state, d.txHash])
    assert.deepEqual(await rows(), [
      ['eu', ['deposit_recorded', TX('b')]],
      ['main', ['deposit_recorded', TX('a')]],
    ])

    // eu's stablecoin payout leaves pending: the service has eu's deposit, not main's.
    const eu = ledgerOf(db, 'eu')
    await eu.ledger.apply(observe({ status: 'processing', fields: { flow: 'stablecoin_to_fiat' } }))
    assert.deepEqual(
      eu.deposits.map((d) => d.txHash),
      [TX('b')]
    )
    // main's fallback claims main's alone, and asks the service: eu's payout says nothing of it.
    const fallback = (account: string) =>
      new EscrowFallback({ db, deposits: deposits(account), confirmAfterMinutes: 0 })
    assert.deepInclude(await fallback('main').run(), { checked: 1, confirmed: 1, detected: 0 })
    assert.deepEqual(sent, [TX('a')])
    const euOnly = await EscrowDeposit.query().where('quote_id', 'qt_eu').firstOrFail()
    assert.equal(euOnly.state, 'deposit_recorded', "eu's deposit is not main's to claim")
    assert.deepInclude(await fallback('eu').run(), { checked: 1, confirmed: 1 })
    assert.deepEqual(sent, [TX('a'), TX('c')])
    assert.deepEqual(await rows(), [
      ['eu', ['confirmed', TX('b')]],
      ['main', ['confirmed', TX('a')]],
    ])
  })

  test('the same recipient id in two accounts is two rows; a sync marks only its own missing', async ({
    assert,
    cleanup,
  }) => {
    await setupDatabase(cleanup, 'accounts')
    const id = randomUUID()
    const remote = { id, name: 'Ada', currency: 'MXN' }
    const client = {
      recipients: {
        create: async (body: { name: string }) => ({ ...remote, name: body.name }),
        update: async (_id: string, body: { name: string }) => ({ ...remote, name: body.name }),
        list: async () => ({ data: [], nextCursor: null }),
      },
    } as unknown as Pick<PayoutsClient, 'recipients'>
    const main = new RecipientsMirror(client, undefined, { account: 'main' })
    const eu = new RecipientsMirror(client, undefined, { account: 'eu' })
    await main.create({ name: 'Ada', currency: 'MXN' })
    await eu.create({ name: 'Eve', currency: 'MXN' })
    await main.update(id, { name: 'Ada L.' })
    const rows = () =>
      byAccount(Recipient.query().where('remote_id', id), (r) => [r.name, r.deletedAt !== null])
    assert.deepEqual(await rows(), [
      ['eu', ['Eve', false]],
      ['main', ['Ada L.', false]],
    ])
    assert.deepEqual(await main.sync(), { created: 0, updated: 0, deleted: 1 })
    assert.deepEqual(await rows(), [
      ['eu', ['Eve', false]],
      ['main', ['Ada L.', true]],
    ])
  })
})
