import { test } from '@japa/runner'
import { api, executeBodies, startEmulator } from './helpers.ts'

/** POST /rfq/execute-batch with the rows and an Idempotency-Key. */
function batch(
  emu: Awaited<ReturnType<typeof startEmulator>>,
  items: unknown[],
  key = 'batch-key-0001-c0'
) {
  return api(emu, 'POST', '/rfq/execute-batch', {
    body: { items },
    headers: { 'idempotency-key': key },
  })
}

test.group('Emulator | execute-batch', () => {
  test('Idempotency: the same key and body answer the same results and make nothing more', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const { fiat, stable } = executeBodies(emu)
    const items = [fiat, { ...fiat, amount: 120 }, { ...fiat, recipientId: crypto.randomUUID() }]
    const first = await batch(emu, items)
    assert.equal(first.status, 200)
    assert.deepEqual(
      first.json.data.results.map((r: any) => [r.index, r.success]),
      [
        [0, true],
        [1, true],
        [2, false],
      ]
    )
    assert.equal(first.json.data.results[2].error.code, 'INVALID_PARAMETER')

    const again = await batch(emu, items)
    assert.equal(again.status, 200)
    assert.equal(again.headers['idempotent-replayed'], 'true')
    assert.deepEqual(again.json, first.json)
    assert.lengthOf(emu.admin.payouts(), 2)
    // One request processed: its payouts carry its key and their row.
    assert.lengthOf(emu.admin.batches(), 1)
    assert.deepEqual(
      emu.admin.payouts().map((p) => [p.batchKey, p.batchIndex, p.idempotencyKey]),
      [
        ['batch-key-0001-c0', 0, undefined],
        ['batch-key-0001-c0', 1, undefined],
      ]
    )
    assert.deepEqual(emu.admin.batches()[0].rows[2], { index: 2, code: 'INVALID_PARAMETER' })

    // Another body under the key: 409, nothing made, nothing recorded.
    for (const other of [[fiat], [...items, stable], [items[1], items[0], items[2]]]) {
      const refused = await batch(emu, other)
      assert.deepEqual([refused.status, refused.json.code], [409, 'IDEMPOTENCY_KEY_REUSED'])
    }
    assert.lengthOf(emu.admin.payouts(), 2)
    assert.lengthOf(emu.admin.batches(), 1)
    const state = await api(emu, 'GET', '/__emulator/state', { key: null })
    assert.lengthOf(state.json.batches, 1)
  })

  test('Rate limit: execute-batch counts in the execute family (10 at once), not in the default one', async ({
    assert,
    cleanup,
  }) => {
    const emu = await startEmulator(cleanup)
    const { fiat } = executeBodies(emu)
    for (let i = 0; i < 10; i++) {
      const answer = await batch(emu, [fiat], `batch-rate-${i}-c0`)
      assert.equal(answer.status, 200)
      assert.equal(answer.headers['x-ratelimit-limit'], '10')
      assert.equal(answer.headers['x-ratelimit-remaining'], String(9 - i))
    }
    // The family is spent: the next batch and the next execute wait, the default family not.
    const throttled = await batch(emu, [fiat], 'batch-rate-10-c0')
    assert.equal(throttled.status, 429)
    assert.isAbove(Number(throttled.headers['retry-after']), 0)
    const execute = await api(emu, 'POST', '/rfq/execute', {
      body: fiat,
      headers: { 'idempotency-key': 'single-after-batches' },
    })
    assert.equal(execute.status, 429)
    assert.equal((await api(emu, 'GET', '/payouts')).status, 200)
    assert.lengthOf(emu.admin.payouts(), 10)
  })
})
