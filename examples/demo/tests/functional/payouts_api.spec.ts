import db from '@adonisjs/lucid/services/db'
import { Recipient } from '@svc/adonis-payouts/models'
import { test } from '@japa/runner'

/** The demo's HTTP API, each test against its own `payouts` fake (tests/bootstrap.ts). */
test.group('Payouts API', () => {
  test('POST /api/payouts executes a {$self} payout and the list shows it pending')
    .with(['fiat_to_fiat', 'stablecoin_to_fiat', 'onramp'] as const)
    .run(async ({ client, payouts, assert }, flow) => {
      const created = await client
        .post('/api/payouts')
        .json({ flow, amount: 120, userPaymentMethodId: payouts.paymentMethodId })
      created.assertStatus(200)
      const { payoutId } = created.body()
      payouts.assertExecuted({ payoutId, flow })

      const list = await client.get('/api/payouts')
      list.assertStatus(200)
      const [payout, ...others] = list.body()
      assert.lengthOf(others, 0)
      assert.include(payout, { payoutUuid: payoutId, ownerId: 'demo-tenant', flow })
      assert.equal(payout.status, 'pending')
    })

  test('a reference given in the form is kept on the payout', async ({
    client,
    payouts,
    assert,
  }) => {
    const created = await client.post('/api/payouts').json({
      flow: 'fiat_to_fiat',
      amount: 75,
      reference: 'invoice-42',
      userPaymentMethodId: payouts.paymentMethodId,
    })
    created.assertStatus(200)
    payouts.assertExecuted({ reference: 'invoice-42' })
    const list = await client.get('/api/payouts')
    assert.equal(list.body()[0].reference, 'invoice-42')
  })

  test('an unknown flow is refused with 400 and nothing is sent', async ({ client, payouts }) => {
    const refused = await client.post('/api/payouts').json({ flow: 'barter', amount: 10 })
    refused.assertStatus(400)
    refused.assertBodyContains({ error: 'unknown flow barter' })
    payouts.assertNotExecuted()
    const list = await client.get('/api/payouts')
    list.assertBody([])
  })

  test('an amount refused before sending is answered 422, and nothing is sent', async ({
    client,
    payouts,
  }) => {
    const refused = await client
      .post('/api/payouts')
      .json({ flow: 'fiat_to_fiat', amount: -5, userPaymentMethodId: payouts.paymentMethodId })
    refused.assertStatus(422)
    payouts.assertNotExecuted()
    const list = await client.get('/api/payouts')
    list.assertBody([])
  })

  test('the service failing: 502 with the error, nothing sent', async ({ client, payouts }) => {
    payouts.faults({ errorRate: 1 })
    const refused = await client
      .post('/api/payouts')
      .json({ flow: 'fiat_to_fiat', amount: 10, userPaymentMethodId: payouts.paymentMethodId })
    refused.assertStatus(502)
    payouts.assertNotExecuted()
    const list = await client.get('/api/payouts')
    list.assertBody([])
  })

  test('a database error answers 502 without its statement: names and payment methods stay in the log', async ({
    client,
    payouts,
    assert,
    cleanup,
  }) => {
    // The recipient's local mirror cannot be written (a disk that fails, a full volume).
    await db.rawQuery(
      `CREATE TRIGGER demo_refuse BEFORE INSERT ON ${Recipient.table} BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END`
    )
    cleanup(() => db.rawQuery('DROP TRIGGER IF EXISTS demo_refuse'))
    const refused = await client
      .post('/api/payouts')
      .json({ flow: 'fiat_to_fiat', amount: 10, userPaymentMethodId: payouts.paymentMethodId })
    refused.assertStatus(502)
    const { error } = refused.body()
    assert.notInclude(error, 'Ana Demo')
    assert.notInclude(error.toLowerCase(), 'insert into')
    payouts.assertNotExecuted()
  })

  test('GET /api/payouts/:id/events lists the steps a payout went through', async ({
    client,
    payouts,
    assert,
  }) => {
    const created = await client
      .post('/api/payouts')
      .json({ flow: 'onramp', userPaymentMethodId: payouts.paymentMethodId })
    const { payoutId } = created.body()
    await payouts.advance(2000 * 3) // three lifecycle steps of the emulated service
    const events = await client.get(`/api/payouts/${payoutId}/events`)
    events.assertStatus(200)
    assert.deepEqual(
      events.body().map((event: { step: string }) => event.step),
      ['initiated', 'compliance_cleared', 'instructions_sent', 'collected']
    )
  })

  test('a failed payout shows its last step and what the service said', async ({
    client,
    payouts,
    assert,
  }) => {
    const created = await client
      .post('/api/payouts')
      .json({ flow: 'fiat_to_fiat', amount: 50, userPaymentMethodId: payouts.paymentMethodId })
    const { payoutId } = created.body()
    await payouts.advance(2000)
    await payouts.fail(payoutId, { reason: 'recipient_bank_closed' })

    const list = await client.get('/api/payouts')
    const [payout] = list.body()
    assert.equal(payout.status, 'failed')
    assert.equal(payout.failure.lastStep, 'compliance_cleared')
    assert.equal(payout.failure.providerMetadata.offramp.status, 'recipient_bank_closed')
  })
})

test.group('Health API', () => {
  test('GET /api/health reports the service reachable and an empty inbox', async ({
    client,
    assert,
  }) => {
    const health = await client.get('/api/health')
    health.assertStatus(200)
    const report = health.body()
    assert.equal(report.environment, 'sandbox')
    assert.equal(report.checks.reachability.status, 'ok')
    assert.include(report.checks.inboxBacklog, { status: 'ok', value: 0 })
    assert.include(report.checks.deadLetters, { status: 'ok', value: 0 })
  })
})
