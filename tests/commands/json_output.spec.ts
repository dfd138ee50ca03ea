import { randomUUID } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { test } from '@japa/runner'
import { request } from 'undici'
import PayoutsDeliveries from '../../commands/payouts_deliveries.ts'
import PayoutsIntents from '../../commands/payouts_intents.ts'
import type { BatchOutcomeName } from '../../src/ledger/payout_batches.ts'
import type { IntentState as ModelIntentState } from '../../src/models/execution_intent.ts'
import { dbDate } from '../../src/database/dates.ts'
import { signPayload } from '../../src/signature/main.ts'
import type {
  DeliveryRow,
  DeliveryState,
  IntentCandidate,
  IntentRow,
  IntentsBatch,
  IntentsBatchChunk,
  IntentState,
} from '../../src/types/main.ts'
import { executeBodies } from '../emulator/helpers.ts'
import { TEST_DB } from '../helpers/database.ts'
import { jsonOf, setup } from './helpers.ts'

/**
 * The documented keys of each type, checked by the compiler both ways: a key missing here, or
 * one the type does not have, does not compile. The tests hold the commands' JSON to them.
 */
const DELIVERY_ROW: Record<keyof DeliveryRow, true> = {
  deliveryId: true,
  eventType: true,
  source: true,
  state: true,
  attempts: true,
  lastError: true,
  receivedAt: true,
}
const INTENT_ROW: Record<keyof IntentRow, true> = {
  id: true,
  state: true,
  flow: true,
  amount: true,
  fromCurrency: true,
  toCurrency: true,
  recipientId: true,
  ownerId: true,
  attempts: true,
  payoutUuid: true,
  note: true,
  createdAt: true,
  lastAttemptAt: true,
  retryable: true,
  batch: true,
  candidates: true,
}
const CANDIDATE: Record<keyof IntentCandidate, true> = {
  payoutUuid: true,
  status: true,
  amount: true,
  fromCurrency: true,
  toCurrency: true,
  createdAt: true,
}
const BATCH: Record<keyof IntentsBatch, true> = {
  key: true,
  complete: true,
  counts: true,
  chunks: true,
}
const CHUNK: Record<keyof IntentsBatchChunk, true> = {
  chunk: true,
  intentId: true,
  state: true,
  attempts: true,
  rows: true,
  created: true,
  refused: true,
  open: true,
  note: true,
}
const COUNTS: Record<BatchOutcomeName, true> = {
  created: true,
  refused: true,
  failed: true,
  unknown: true,
  not_sent: true,
  needs_attention: true,
}

const keysOf = (value: object) => Object.keys(value).sort()
const documented = (keys: object) => Object.keys(keys).sort()

/** A signed delivery to the app's route. */
async function deliver(url: string, body: string) {
  const response = await request(`${url}/webhooks/payouts`, {
    method: 'POST',
    body,
    headers: {
      'content-type': 'application/json',
      'svc-signature': signPayload('whsec_current_secret', Math.floor(Date.now() / 1000), body),
      'svc-delivery-id': `dlv_${randomUUID()}`,
    },
  })
  await response.body.dump()
}

test.group(`Commands | --json output as documented (${TEST_DB})`, () => {
  test('payouts:deliveries --json rows have exactly the keys of DeliveryRow', async ({
    assert,
    cleanup,
  }) => {
    const { app, run } = await setup(cleanup)
    await deliver(
      app.url,
      JSON.stringify({ type: 'payout.created', data: { payoutId: randomUUID() } })
    )
    await deliver(app.url, '{"type":"payout.created",')
    await app.payouts.drainInbox()

    const listed = await run(PayoutsDeliveries, ['--state=dead', '--state=processed', '--json'])
    listed.assertSucceeded()
    const rows = jsonOf(listed)
    assert.lengthOf(rows, 2)
    for (const row of rows) assert.deepEqual(keysOf(row), documented(DELIVERY_ROW))
    assert.sameMembers(
      rows.map((row: DeliveryRow) => row.state),
      ['dead', 'processed']
    )
    assert.isString(rows.find((row: DeliveryRow) => row.state === 'dead').lastError)
    assert.isNull(rows.find((row: DeliveryRow) => row.state === 'processed').lastError)
  })

  test('payouts:intents --json rows, --resolve and --batch have exactly the documented keys', async ({
    assert,
    cleanup,
  }) => {
    const { app, run, emu } = await setup(cleanup, { retry: { maxRetries: 0 } })
    const { stable, fiat } = executeBodies(emu)
    // A batch whose chunk is listed, an intent left unknown, one that waits for a human.
    await app.payouts.executeBatch([fiat, { ...fiat, amount: 101 }], {
      idempotencyKey: 'rows-batch',
    })
    emu.admin.setFaults({ errorRate: 1, pathPrefixes: ['/rfq/execute'] })
    for (const amount of [20, 21]) {
      await assert.rejects(() => app.payouts.execute({ ...stable, amount }))
    }
    emu.admin.setFaults({})
    const db = await app.app.container.make('lucid.db')
    const intents = `${app.prefix}execution_intents`
    const [waiting] = await db.from(intents).where('state', 'unknown').orderBy('id').limit(1)
    await db.from(intents).where('id', waiting.id).update({ state: 'needs_attention' })

    const listed = await run(PayoutsIntents, [
      '--state=unknown',
      '--state=needs_attention',
      '--state=succeeded',
      '--json',
    ])
    listed.assertSucceeded()
    const rows: IntentRow[] = jsonOf(listed)
    assert.sameMembers(
      rows.map((row) => row.state),
      ['succeeded', 'unknown', 'needs_attention']
    )
    for (const row of rows) assert.deepEqual(keysOf(row), documented(INTENT_ROW))
    const chunk = rows.find((row) => row.flow === 'batch')!
    assert.deepEqual(keysOf(chunk.batch!), ['chunk', 'chunks', 'rows'])
    assert.deepInclude(chunk, { amount: null, fromCurrency: null, candidates: null })
    const single = rows.find((row) => row.state === 'unknown')!
    assert.deepInclude(single, { amount: 21, batch: null, candidates: null })
    assert.isArray(rows.find((row) => row.state === 'needs_attention')!.candidates)

    // A candidate's keys: a ledger payout (as a webhook brings it) that matches the waiting one.
    const now = dbDate(db.connection(), new Date())
    await db.table(`${app.prefix}payouts`).insert({
      payout_uuid: randomUUID(),
      account: 'main',
      status: 'pending',
      recipient_id: stable.recipientId,
      source_amount: '20',
      source_currency: 'USDC',
      payout_currency: 'MXN',
      created_at: now,
      updated_at: now,
    })
    const withCandidate = jsonOf(await run(PayoutsIntents, ['--state=needs_attention', '--json']))
    assert.lengthOf(withCandidate[0].candidates, 1)
    assert.deepEqual(keysOf(withCandidate[0].candidates[0]), documented(CANDIDATE))

    const resolved = await run(PayoutsIntents, [`--resolve=${single.id}`, '--as=sent', '--json'])
    resolved.assertSucceeded()
    assert.deepEqual(keysOf(jsonOf(resolved)), documented(INTENT_ROW))

    const batch = await run(PayoutsIntents, ['--batch=rows-batch', '--json'])
    batch.assertSucceeded()
    const view = jsonOf(batch)
    assert.deepEqual(keysOf(view), documented(BATCH))
    assert.deepEqual(keysOf(view.counts), documented(COUNTS))
    for (const each of view.chunks) assert.deepEqual(keysOf(each), documented(CHUNK))
  })

  test('the --state values and the rows are the types of @svc/adonis-payouts/types', ({
    expectTypeOf,
  }) => {
    expectTypeOf<IntentState>().toEqualTypeOf<ModelIntentState>()
    expectTypeOf<IntentsBatch['counts']>().toEqualTypeOf<Record<BatchOutcomeName, number>>()
    expectTypeOf<DeliveryRow['state']>().toEqualTypeOf<DeliveryState>()
    expectTypeOf<IntentRow['candidates']>().toEqualTypeOf<IntentCandidate[] | null>()
  })

  test('docs/production.md shows src/types/commands.ts as it is', async ({ assert }) => {
    const source = await readFile(new URL('../../src/types/commands.ts', import.meta.url), 'utf8')
    const docs = await readFile(new URL('../../docs/production.md', import.meta.url), 'utf8')
    // The declarations, after the module's own comment.
    const declarations = source.slice(source.indexOf('*/\n') + 3).trim()
    assert.include(docs, `\`\`\`ts\n${declarations}\n\`\`\``)
  })
})
