/**
 * `@svc/adonis-payouts/otel`: the plugin's OpenTelemetry instrumentation, for
 * `@adonisjs/otel`'s `config/otel.ts`. Needs `@opentelemetry/instrumentation` (an optional
 * peer dependency, which `@adonisjs/otel` brings); nothing else of the plugin imports it.
 */
export { PayoutsInstrumentation } from './instrumentation.ts'
export { ATTR as PAYOUTS_ATTRIBUTES, SCOPE_NAME } from './metrics.ts'
