import type { LockFactory } from '@verrou/core'
import type { Database } from '@adonisjs/lucid/database'
import { E_PAYOUTS_INVALID_CONFIG } from '../errors.ts'
import { safeError } from '../safe_error.ts'

/** What the scheduler needs of a lock store: named locks with a TTL. */
export type JobLockFactory = Pick<LockFactory, 'createLock'>

/**
 * The host app's lock manager (`@adonisjs/lock`'s `lock.manager`, a Verrou instance): its
 * default store, or the one named.
 */
export interface HostLockManager {
  createLock: LockFactory['createLock']
  use(store: string): JobLockFactory
}

/** The host app's own services the job locks can use instead of building their own. */
export interface HostLockServices {
  /** `lock.manager` of `@adonisjs/lock`, when the app registers its provider. */
  lockManager?: () => Promise<HostLockManager>
  /** The ioredis client of a named `@adonisjs/redis` connection, when the app has it. */
  redisConnection?: (name: string) => Promise<unknown>
}

export interface JobLocksOptions extends HostLockServices {
  /**
   * The name of one of the app's `@adonisjs/redis` connections (its client is shared; a
   * redis:// URL here is read as `redisUrl`). Without it or `redisUrl`, the host's lock
   * manager when there is one, else the app's database.
   */
  redis?: string
  /** A redis:// URL: the locks get a Redis client of their own (ioredis). */
  redisUrl?: string
  /** A store of the host's lock manager; its default store when not given. */
  lockStore?: string
  db: Database
  connection?: string
  /** The locks table (the knex store's schema), used on the app's database. */
  tableName: string
  logger: { error(obj: object, msg?: string): void }
}

export interface JobLocks {
  store: 'redis' | 'database' | 'app'
  locks: JobLockFactory
  /** Closes the Redis connection, if one was opened here (never one of the app's). */
  close(): Promise<void>
}

/** Whether `jobs.redis` is a URL rather than a connection name. */
export function isRedisUrl(value: string): boolean {
  return /^rediss?:\/\//.test(value)
}

/**
 * The lock factory of the job scheduler, in this order: the host's `@adonisjs/lock`
 * manager (with `jobs.lockStore`, or when neither `jobs.redis` nor `jobs.redisUrl` is set);
 * Redis through one of the host's `@adonisjs/redis` connections (`jobs.redis` names it) or a
 * client of its own (`jobs.redisUrl`; ioredis, loaded only then); else the app's database
 * through @verrou/core's knex store. A client the app already has is never duplicated.
 */
export async function createJobLocks(options: JobLocksOptions): Promise<JobLocks> {
  const url =
    options.redisUrl ??
    (options.redis !== undefined && isRedisUrl(options.redis) ? options.redis : undefined)
  const name = url === undefined ? options.redis : undefined
  if (options.lockStore || (!name && !url && options.lockManager)) {
    if (!options.lockManager) {
      throw new E_PAYOUTS_INVALID_CONFIG([
        'jobs.lockStore needs @adonisjs/lock: register its provider and config/lock.ts',
      ])
    }
    const manager = await options.lockManager()
    return {
      store: 'app',
      locks: options.lockStore ? manager.use(options.lockStore) : manager,
      close: async () => {},
    }
  }
  const { Verrou } = await import('@verrou/core')
  if (name || url) {
    const { redisStore } = await import('@verrou/core/drivers/redis')
    const named = name !== undefined
    if (named && !options.redisConnection) {
      throw new E_PAYOUTS_INVALID_CONFIG([
        `jobs.redis names a connection ("${name}") but the app has no @adonisjs/redis; register it, or give a redis:// URL in jobs.redisUrl`,
      ])
    }
    const redis = named
      ? ((await options.redisConnection!(name)) as any)
      : await ownRedisClient(url!, options.logger)
    const verrou = new Verrou({
      default: 'redis',
      stores: { redis: { driver: redisStore({ connection: redis }) } },
    })
    return {
      store: 'redis',
      locks: verrou.use('redis'),
      close: async () => {
        if (!named) await redis.quit().catch(() => redis.disconnect())
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

/** An ioredis client for a redis:// URL, logging one line per outage. */
async function ownRedisClient(url: string, logger: JobLocksOptions['logger']) {
  const { Redis } = await import('ioredis')
  // Options in the URL's query (?keyPrefix=app1:&db=2 …) win over these defaults.
  const redis = new Redis(url, { maxRetriesPerRequest: 2 })
  let reported = false
  redis.on('error', (error) => {
    // Reconnects are ioredis's job; one log line per outage, not one per attempt.
    if (!reported) logger.error({ err: safeError(error) }, 'payouts job locks: redis unavailable')
    reported = true
  })
  redis.on('ready', () => (reported = false))
  return redis
}
