/**
 * OpenTelemetry initialization (what `node ace add @adonisjs/otel` writes): imported first in
 * bin/server.ts and bin/console.ts, so the web process and the worker (`node ace
 * payouts:work`) are both traced. It reads config/otel.ts.
 */
import { init } from '@adonisjs/otel/init'

await init(import.meta.dirname)
