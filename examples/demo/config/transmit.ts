import env from '#start/env'
import { defineConfig } from '@adonisjs/transmit'
import { redis } from '@adonisjs/transmit/transports/redis'

/**
 * One instance needs no transport. With REDIS_HOST set, broadcasts travel through Redis so
 * a browser on any instance sees changes ingested on every other.
 */
export default defineConfig({
  pingInterval: '30s',
  transport: env.get('REDIS_HOST')
    ? {
        driver: redis({
          host: env.get('REDIS_HOST'),
          port: env.get('REDIS_PORT', 6379),
        }),
      }
    : null,
})
