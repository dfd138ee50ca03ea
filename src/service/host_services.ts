import type { ApplicationService } from '@adonisjs/core/types'
import type { HostLockManager, HostLockServices } from '../jobs/locks.ts'

/**
 * The host app's lock manager (`@adonisjs/lock`) and Redis connections (`@adonisjs/redis`),
 * each only when the app registers its provider, resolved lazily for the job locks.
 */
export function hostLockServices(app: ApplicationService): HostLockServices {
  const container = app.container as unknown as {
    hasBinding(name: string): boolean
    make(name: string): Promise<any>
  }
  return {
    lockManager: container.hasBinding('lock.manager')
      ? async () => (await container.make('lock.manager')) as HostLockManager
      : undefined,
    redisConnection: container.hasBinding('redis')
      ? async (name) => {
          const redis = await container.make('redis')
          return redis.connection(name).ioConnection
        }
      : undefined,
  }
}
