import type { LockFactory } from '@verrou/core'
import type { Database } from '@adonisjs/lucid/database'

export interface JobLocksOptions {
  /** A redis:// URL: the locks live in Redis. Without it, in the app's database. */
  redis?: string
  db: Database
  connection?: string
  /** The locks table (the knex store's schema), used without `redis`. */
  tableName: string
  logger: { error(obj: object, msg?: string): void }
}

export interface JobLocks {
  store: 'redis' | 'database'
  locks: LockFactory
  /** Closes the Redis connection, if one was opened. */
  close(): Promise<void>
}

/**
 * The lock factory of the job scheduler: @verrou/core on Redis (ioredis, loaded only when
 * configured) or on the app's database through its knex store.
 */
export async function createJobLocks(options: JobLocksOptions): Promise<JobLocks> {
  const { Verrou } = await import('@verrou/core')
  if (options.redis) {
    const [{ Redis }, { redisStore }] = await Promise.all([
      import('ioredis'),
      import('@verrou/core/drivers/redis'),
    ])
    // Options in the URL's query (?keyPrefix=app1:&db=2 …) win over these defaults.
    const redis = new Redis(options.redis, { maxRetriesPerRequest: 2 })
    let reported = false
    redis.on('error', (error) => {
      // Reconnects are ioredis's job; one log line per outage, not one per attempt.
      if (!reported) options.logger.error({ err: error }, 'payouts job locks: redis unavailable')
      reported = true
    })
    redis.on('ready', () => (reported = false))
    const verrou = new Verrou({
      default: 'redis',
      stores: { redis: { driver: redisStore({ connection: redis }) } },
    })
    return {
      store: 'redis',
      locks: verrou.use('redis'),
      close: async () => {
        await redis.quit().catch(() => redis.disconnect())
      },
    }
  }
  const { knexStore } = await import('@verrou/core/drivers/knex')
  const verrou = new Verrou({
    default: 'database',
    stores: {
      database: {
        driver: knexStore({
          connection: options.db.connection(options.connection).getWriteClient(),
          tableName: options.tableName,
          autoCreateTable: false,
        }),
      },
    },
  })
  return { store: 'database', locks: verrou.use('database'), close: async () => {} }
}
