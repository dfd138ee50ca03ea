/**
 * The host app that the tests, the chaos suite and the bench run the plugin in: a real
 * AdonisJS app booted the AdonisJS way (IgnitorFactory, core providers and config), with the
 * payouts provider and, when asked, Lucid and Transmit; served over real HTTP on loopback.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { IgnitorFactory } from '@adonisjs/core/factories'
import type { ApplicationService, HttpRouterService } from '@adonisjs/core/types'
import { defineConfig as defineDbConfig } from '@adonisjs/lucid'
import { dropPayoutsTables } from '../../src/database/schema.ts'
import { createAllPayoutsTables } from './database.ts'
import type { PayoutsManager } from '../../src/service/payouts_manager.ts'

/** How bootHostApp and serveHostApp build the app. */
export interface HostAppOptions {
  /** The app root: relative imports of the app resolve from it. */
  root: URL
  /** The app's `payouts` config. */
  payouts: Record<string, unknown>
  /** Lucid's `primary` connection; without one the app has no Lucid. */
  connection?: Record<string, unknown>
  /** Adds Transmit (no ping, no transport). */
  transmit?: boolean
  /** Further config keys (logger, ...), merged last. */
  config?: Record<string, unknown>
  /** Further providers of the app (`@adonisjs/lock`, ...), before the payouts provider. */
  providers?: Array<() => Promise<unknown>>
}

/** The ignitor of a host app with the payouts provider: `createApp('web')`, or `ace()`. */
export function hostAppIgnitor(options: HostAppOptions) {
  const providers = [
    ...(options.connection ? [() => import('@adonisjs/lucid/database_provider')] : []),
    ...(options.transmit ? [() => import('@adonisjs/transmit/transmit_provider')] : []),
    ...(options.providers ?? []),
    () => import('../../providers/payouts_provider.ts'),
  ]
  return new IgnitorFactory()
    .withCoreProviders()
    .withCoreConfig()
    .merge({
      config: {
        ...(options.transmit ? { transmit: { pingInterval: false, transport: null } } : {}),
        ...(options.connection
          ? {
              database: defineDbConfig({
                connection: 'primary',
                connections: { primary: options.connection as any },
              }),
            }
          : {}),
        payouts: options.payouts,
        ...options.config,
      },
      rcFileContents: { providers },
    })
    .create(options.root, {
      importer: (filePath) =>
        filePath.startsWith('.') ? import(new URL(filePath, options.root).href) : import(filePath),
    })
}

/** Boots a host app with the payouts provider (not started: no HTTP, no `ready` hooks). */
export async function bootHostApp(options: HostAppOptions): Promise<ApplicationService> {
  const app = hostAppIgnitor(options).createApp('web')
  await app.init()
  await app.boot()
  return app
}

/** What a `setup` hook of serveHostApp gets: the booted app and its webhook route. */
export interface HostAppParts {
  app: ApplicationService
  payouts: PayoutsManager
  router: HttpRouterService
  route: Awaited<ReturnType<PayoutsManager['registerRoutes']>>
}

/** A served host app: its parts, its address, and how to stop it. */
export interface HostAppServer extends HostAppParts {
  url: string
  /** Stops the HTTP server and the app, and drops the tables serveHostApp created. */
  close(): Promise<void>
}

/**
 * Boots a host app and serves it on 127.0.0.1: the payouts tables created with
 * `tablePrefix` (when given), the stock bodyparser as router middleware, the plugin's
 * webhook route, then `setup` (the caller's routes and hooks), then the app started.
 */
export async function serveHostApp(
  options: HostAppOptions & {
    /** Creates the payouts tables under this prefix, and drops them in close(). */
    tablePrefix?: string
    /** Fixed port; a free one by default. */
    port?: number
    setup?: (parts: HostAppParts) => Promise<void> | void
    /** Sees every request before the app handles it. */
    onRequest?: (req: IncomingMessage, res: ServerResponse) => void
  }
): Promise<HostAppServer> {
  const app = await bootHostApp(options)
  const db = options.tablePrefix === undefined ? undefined : await app.container.make('lucid.db')
  if (db) await createAllPayoutsTables(db.connection().schema, options.tablePrefix)
  const payouts = await app.container.make('payouts.manager')
  const router = await app.container.make('router')
  router.use([() => import('@adonisjs/core/bodyparser_middleware')])
  const route = await payouts.registerRoutes(router)
  const parts = { app, payouts, router, route }
  await options.setup?.(parts)

  await app.start(async () => {})
  const server = await app.container.make('server')
  await server.boot()
  const http = createServer((req, res) => {
    options.onRequest?.(req, res)
    return server.handle(req, res)
  })
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject)
    http.listen(options.port ?? 0, '127.0.0.1', resolve)
  })
  return {
    ...parts,
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}`,
    async close() {
      http.closeAllConnections()
      await new Promise((resolve) => http.close(resolve))
      await payouts.close()
      if (db) await dropPayoutsTables(db.connection().schema, options.tablePrefix)
      await app.terminate()
    },
  }
}
