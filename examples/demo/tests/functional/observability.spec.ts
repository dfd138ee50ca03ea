import { test } from '@japa/runner'

/**
 * OpenTelemetry in the test environment: @adonisjs/otel starts no SDK (NODE_ENV=test), so
 * nothing is measured or written; the routes answer all the same.
 */
test.group('Observability API', () => {
  test('GET /metrics says OpenTelemetry is off', async ({ client }) => {
    const metrics = await client.get('/metrics')
    metrics.assertStatus(503)
    metrics.assertTextIncludes('OpenTelemetry is off')
  })

  test('GET /api/payouts/:id/trace of a payout with no span answers no trace', async ({
    client,
    payouts,
  }) => {
    const created = await client
      .post('/api/payouts')
      .json({ flow: 'fiat_to_fiat', amount: 120, userPaymentMethodId: payouts.paymentMethodId })
    const { payoutId } = created.body()
    const trace = await client.get(`/api/payouts/${payoutId}/trace`)
    trace.assertStatus(200)
    trace.assertBody({ payoutId, traces: [], spanCount: 0, processes: [] })
  })
})
