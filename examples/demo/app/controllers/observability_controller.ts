import type { HttpContext } from '@adonisjs/core/http'
import { PrometheusSerializer } from '@opentelemetry/exporter-prometheus'
import { prometheus } from '#config/otel'
import { readPayoutTrace } from '#services/payout_trace'

/** What OpenTelemetry saw: the web process's metrics, and one payout's spans as trees. */
export default class ObservabilityController {
  /** Prometheus text of this process (the worker serves its own on its own port). */
  async metrics({ response }: HttpContext) {
    const collected = await prometheus.collect().catch(() => null)
    if (!collected) {
      return response.serviceUnavailable('OpenTelemetry is off in this process (NODE_ENV=test)\n')
    }
    response
      .header('content-type', 'text/plain; version=0.0.4; charset=utf-8')
      .send(new PrometheusSerializer().serialize(collected.resourceMetrics))
  }

  /** GET /api/payouts/:id/trace (`?all=1`: SQL and HTTP client spans too). */
  async trace({ params, request }: HttpContext) {
    return readPayoutTrace(params.id, ['1', 'true'].includes(request.input('all')))
  }
}
