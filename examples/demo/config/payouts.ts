import app from '@adonisjs/core/services/app'
import env from '#start/env'
import { defineConfig } from '@svc/adonis-payouts'

/**
 * Cross-Border Payout Service. The key's prefix (sk_test_ or sk_live_) must match the
 * environment of PAYOUTS_BASE_URL. Every option and its default:
 * node_modules/@svc/adonis-payouts/docs/configuration.md
 */
const payoutsConfig = defineConfig({
  apiKey: env.get('PAYOUTS_API_KEY'),
  baseUrl: env.get('PAYOUTS_BASE_URL'),
  // The emulator delivers webhooks to http://127.0.0.1; the real service only to https.
  allowInsecureLoopbackWebhooks: !app.inProduction,
  webhook: {
    path: '/webhooks/payouts',
    secret: env.get('PAYOUTS_WEBHOOK_SECRET'),
    // PAYOUTS_PROCESSING=worker: the web process only stores deliveries, and
    // node ace payouts:work processes them and runs the jobs.
    processing: env.get('PAYOUTS_PROCESSING', 'inline'),
  },
  jobs: {
    // Several instances: set PAYOUTS_REDIS_URL to keep the jobs' locks in Redis.
    redisUrl: env.get('PAYOUTS_REDIS_URL'),
  },
  ledger: {
    enabled: true,
    tablePrefix: 'svc_',
  },
})

export default payoutsConfig