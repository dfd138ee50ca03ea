import { inspect } from 'node:util'
import { z } from 'zod'
import type { Secret } from '@adonisjs/core/helpers'
import type { RedisConnections } from '@adonisjs/redis/types'
import { E_PAYOUTS_INVALID_CONFIG } from './errors.ts'
import { redactCredentials } from './client/redact.ts'
import debug from './debug.ts'
import { DURATION_FORM, toMilliseconds } from './duration.ts'
import {
  ACCOUNT_NAME_PATTERN,
  API_KEY_PATTERN,
  DEFAULT_ACCOUNT,
  DEFAULT_TABLE_PREFIX,
  DEFAULT_WEBHOOK_PATH,
} from './constants.ts'

export type {
  PayoutsAccountInput,
  PayoutsAccountsInput,
  PayoutsManagerConfig,
  PayoutsManagerConfigInput,
} from './accounts_config.ts'
export type { Duration } from './duration.ts'

/**
 * The name of one of the app's `@adonisjs/redis` connections (`keyof RedisConnections`, as
 * `config/redis.ts` declares them); any name when the app has no `@adonisjs/redis`.
 */
export type RedisConnectionName = string extends keyof RedisConnections
  ? string
  : [keyof RedisConnections] extends [never]
    ? string
    : Extract<keyof RedisConnections, string>

/**
 * A secret of the config: a string, or the `Secret` that `Env.schema.secret()` gives. It is
 * released here, for `schema` and nowhere before; the validated config shows it as
 * `[redacted]`, and an error names its key, never its value.
 */
const secret = <Schema extends z.ZodType<string, string>>(schema: Schema) =>
  z
    .custom<string | Secret<string>>(
      (value) =>
        typeof value === 'string' ||
        // Duck-typed: the app may hold another copy of @poppinss/utils than ours.
        (typeof value === 'object' &&
          value !== null &&
          typeof (value as Secret<string>).release === 'function'),
      { error: 'must be a string or a Secret (Env.schema.secret())' }
    )
    .transform((value) => (typeof value === 'string' ? value : value.release()))
    .pipe(schema)

/**
 * A duration: a number of milliseconds, or a string such as `'10s'`, `'2h'` or `'500ms'`,
 * read as AdonisJS reads them; `bounds` apply to its milliseconds, which the validated config
 * holds.
 */
const duration = (bounds: z.ZodNumber) =>
  z
    .union([z.number(), z.string()], { error: `must be ${DURATION_FORM}` })
    .transform((value, ctx): number => {
      const ms = toMilliseconds(value)
      if (ms === undefined) {
        ctx.addIssue({ code: 'custom', message: `must be ${DURATION_FORM}` })
        return z.NEVER
      }
      // Every duration ends up in a timer, and Node runs a longer one as 1 ms (with a
      // TimeoutOverflowWarning): a '30d' job interval would then fire every millisecond.
      if (ms > MAX_TIMER_MS) {
        ctx.addIssue({
          code: 'custom',
          message: `must be at most ${MAX_TIMER_MS} ms (about 24.8 days), the longest timer Node runs`,
        })
        return z.NEVER
      }
      return ms
    })
    .pipe(bounds)

/** The longest delay `setTimeout`/`setInterval` take (2^31 - 1 ms). */
const MAX_TIMER_MS = 2_147_483_647

/** A `redis://` or `rediss://` URL. */
const REDIS_URL = /^rediss?:\/\//

/** The name of a connection in `config/redis.ts`. */
const CONNECTION_NAME = /^[A-Za-z][\w-]*$/

let warnedOfRedisUrl = false

/**
 * `jobs.redis` names a connection and `jobs.redisUrl` holds a URL: one of them. A URL in
 * `jobs.redis` (as configs published by earlier versions have it) still works, read as
 * `redisUrl`, with a deprecation warning once per process.
 */
function redisUrlOfJobs<Jobs extends { redis?: string; redisUrl?: string }>(
  jobs: Jobs,
  ctx: z.core.$RefinementCtx<Jobs>
): Jobs {
  if (jobs.redis === undefined) return jobs
  if (jobs.redisUrl !== undefined) {
    ctx.addIssue({
      code: 'custom',
      path: ['redisUrl'],
      message:
        'is set with jobs.redis: keep one (a connection name, or a URL without @adonisjs/redis)',
    })
    return z.NEVER
  }
  if (!REDIS_URL.test(jobs.redis)) return jobs
  if (!warnedOfRedisUrl) {
    warnedOfRedisUrl = true
    process.emitWarning(
      'jobs.redis with a redis:// URL is deprecated: name a connection of @adonisjs/redis, or set jobs.redisUrl',
      { type: 'DeprecationWarning', code: 'SVC_PAYOUTS_JOBS_REDIS_URL' }
    )
  }
  debug('jobs.redis holds a URL: read as jobs.redisUrl')
  return { ...jobs, redis: undefined, redisUrl: jobs.redis }
}

const retrySchema = z
  .object({
    maxRetries: z.number().int().min(0).max(10).default(5),
    baseDelayMs: duration(z.number().int().min(0)).default(1000),
    jitter: z.number().min(0).max(1).default(0.2),
    /**
     * The longest wait the service may ask for (Retry-After, X-RateLimit-Reset); a longer
     * one ends the call in a RateLimitedError carrying `retryAfterMs`, never a shorter wait.
     */
    maxRetryAfterMs: duration(z.number().int().positive()).default(120_000),
  })
  .prefault({})

/**
 * When a health line turns to warning, then error: once its value reaches the number.
 * `null` never turns it.
 */
const threshold = (defaults: { warning?: number; error?: number }) =>
  z
    .object({
      warning: z
        .number()
        .min(0)
        .nullable()
        .default(defaults.warning ?? null),
      error: z
        .number()
        .min(0)
        .nullable()
        .default(defaults.error ?? null),
    })
    .prefault({})

/** A `threshold` of a time (`health.oldestPendingMs`): each a duration, or `null`. */
const durationThreshold = (defaults: { warning?: number; error?: number }) =>
  z
    .object({
      warning: duration(z.number().min(0))
        .nullable()
        .default(defaults.warning ?? null),
      error: duration(z.number().min(0))
        .nullable()
        .default(defaults.error ?? null),
    })
    .prefault({})

/** The shape `config/payouts.ts` is validated against at boot. */
export const payoutsConfigSchema = z.object({
  /**
   * The account this config is for: its rows, routes, locks and events carry the name. Set
   * from the key of `accounts` (docs/accounts.md); a one-account config is `main`.
   */
  account: z
    .string()
    .regex(ACCOUNT_NAME_PATTERN, 'must be a-z, 0-9, _ or -, starting with a letter (at most 32)')
    .default(DEFAULT_ACCOUNT),
  /**
   * Optional until the operator has issued one (migrations and `node ace list` still run);
   * the client's first use without it fails naming PAYOUTS_API_KEY.
   */
  apiKey: secret(
    z
      .string()
      .regex(
        API_KEY_PATTERN,
        'must be sk_live_ or sk_test_ followed by 43 characters (check PAYOUTS_API_KEY)'
      )
  ).optional(),
  baseUrl: z.url(),
  environment: z.enum(['sandbox', 'production']).optional(),
  timeoutMs: duration(z.number().int().positive()).default(30_000),
  retry: retrySchema,
  clientRateLimiter: z.boolean().default(true),
  /** Development only: allow http://127.0.0.1 webhook URLs (the emulator accepts them). */
  allowInsecureLoopbackWebhooks: z.boolean().default(false),
  paths: z.record(z.string(), z.string()).optional(),
  webhook: z
    .object({
      path: z.string().startsWith('/').default(DEFAULT_WEBHOOK_PATH),
      secret: secret(z.string().startsWith('whsec_')).optional(),
      /**
       * A rotation done outside the plugin: the old secret stays accepted until
       * `previousSecretValidUntil`, which is then required. There is no default grace.
       */
      previousSecret: secret(z.string().startsWith('whsec_')).optional(),
      previousSecretValidUntil: z.iso.datetime({ offset: true }).optional(),
      toleranceSeconds: z.number().int().positive().max(3600).default(300),
      maxBodyBytes: z
        .number()
        .int()
        .positive()
        .default(256 * 1024),
      /** How often the web process retries due inbox rows; 0 leaves it to a worker. */
      retryIntervalMs: duration(z.number().int().min(0)).default(5000),
      /**
       * Inbox rows claimed and applied per transaction. On SQLite a transaction holds the
       * event loop until COMMIT, so smaller batches keep acknowledgements flowing while a
       * backlog drains; larger ones drain faster.
       */
      processBatchSize: z.number().int().positive().max(1000).default(100),
      /**
       * Inline processing (in the process that acknowledges) goes in slices of about this
       * long, sized from the pace of the last one, with a turn of the event loop between them
       * and none while an acknowledgement is in flight; 0 processes whole batches. Default:
       * 5 on SQLite, 0 on PostgreSQL and MySQL (a transaction holds neither the event loop
       * nor the connection an acknowledgement uses there).
       */
      inlineSliceMs: duration(z.number().int().min(0).max(1000)).optional(),
      /**
       * The route answers within this time whatever the database does: past it 503, and the
       * service delivers again. Below the service's 10 s, with room for the network.
       */
      ackTimeoutMs: duration(z.number().int().positive().max(9000)).default(5000),
      /**
       * Where stored deliveries are processed: `inline` in the web process (with the jobs and
       * the stream), or `worker`: the web process only verifies, stores and acknowledges, and
       * `node ace payouts:work` does the rest.
       */
      processing: z.enum(['inline', 'worker']).default('inline'),
      /**
       * When a batch goes row by row, how long its claimed rows are held: a process killed
       * meanwhile leaves them to another one after this long. Renewed while the batch runs.
       */
      processingLeaseMs: duration(z.number().int().min(1000).max(3_600_000)).default(15_000),
    })
    .refine((webhook) => !webhook.previousSecret || webhook.previousSecretValidUntil, {
      path: ['previousSecretValidUntil'],
      message: 'is required with webhook.previousSecret: the end of its grace window',
    })
    .prefault({}),
  events: z
    .object({
      /** Which sources feed the ledger: signed webhooks, the WebSocket stream, or both. */
      sources: z.enum(['webhooks', 'websocket', 'both']).default('webhooks'),
      /** Defaults to ws(s)://<host of baseUrl>/ws. */
      websocketUrl: z.url().optional(),
      reconnectBaseMs: duration(z.number().int().positive()).default(1000),
      reconnectMaxMs: duration(z.number().int().positive()).default(30_000),
      /**
       * How long the plugin waits for an app event's listeners: past it the listener is
       * logged as failed and the change's next events go on (a listener that never ends
       * would otherwise hold inbox processing behind it).
       */
      listenerTimeoutMs: duration(z.number().int().positive()).default(10_000),
      /**
       * How long a change's notification is held by the process that fires it: renewed every
       * third of it while its listeners run; a process that died leaves its changes to
       * another one after this long (they fire again, under the same eventKey). It starts
       * with the applying transaction, so one near `ledger.transactionTimeoutMs` or over it
       * can commit with the lease nearly gone: a change's lease is checked (renewed by a
       * conditional UPDATE) before its listeners run, and left to a process that took it.
       */
      notifyLeaseMs: duration(z.number().int().min(1000).max(3_600_000)).default(30_000),
    })
    .prefault({}),
  reconcile: z
    .object({
      staleAfterMs: duration(z.number().int().min(0)).default(5 * 60_000),
      batchSize: z.number().int().positive().default(50),
      budgetShare: z.number().gt(0).max(1).default(0.5),
    })
    .prefault({}),
  jobs: z
    .object({
      /** Run the jobs on intervals in the web process; false leaves them to cron or a worker. */
      enabled: z.boolean().default(true),
      reconcileEveryMs: duration(z.number().int().min(0)).default(60_000),
      escrowEveryMs: duration(z.number().int().min(0)).default(60_000),
      recoverEveryMs: duration(z.number().int().min(0)).default(60_000),
      /** How often the prune job removes rows past `retention` (0: never; run `payouts:prune`). */
      pruneEveryMs: duration(z.number().int().min(0)).default(3_600_000),
      /** Minutes after on-chain confirmation before confirm-escrow-deposit may be called. */
      escrowConfirmAfterMinutes: z.number().min(0).default(10),
      /** Confirmations the escrow fallback sends for a deposit before it alerts. */
      escrowMaxAttempts: z.number().int().min(1).max(20).default(3),
      /** Wait after the first failed confirmation; doubles after each one. */
      escrowRetryBackoffMs: duration(z.number().int().min(0)).default(5 * 60_000),
      /** Non-terminal payouts older than this raise payouts:stuck. */
      stuckAfterMs: duration(z.number().int().positive()).default(24 * 3600_000),
      /**
       * The job locks live in Redis instead of the app's database, through one of the app's
       * `@adonisjs/redis` connections, by name (its client is shared). A redis:// URL here
       * is deprecated: it is read as `redisUrl`.
       */
      redis: z
        .string()
        .refine(
          (value) => CONNECTION_NAME.test(value) || (REDIS_URL.test(value) && URL.canParse(value)),
          'must name a connection of config/redis.ts (a redis:// URL goes in jobs.redisUrl)'
        )
        .optional(),
      /**
       * For apps without `@adonisjs/redis`: a redis:// (or rediss://) URL for a Redis client
       * of the job locks' own (ioredis, an optional peer; query options go to ioredis, e.g.
       * `?keyPrefix=app1:` when apps with different databases share one Redis).
       */
      redisUrl: secret(z.url({ protocol: /^rediss?$/ })).optional(),
      /**
       * A store of the app's `@adonisjs/lock` config for the job locks. Without it, an app
       * with `@adonisjs/lock` has the locks in its default store (unless `redis` is set).
       */
      lockStore: z.string().min(1).optional(),
      /**
       * A job run that has not ended after this long is given up (logged as failed) so the
       * next interval runs it again; it cannot hold the job forever.
       */
      runTimeoutMs: duration(z.number().int().positive()).default(10 * 60_000),
    })
    .transform(redisUrlOfJobs)
    .prefault({}),
  retention: z
    .object({
      /**
       * Days a processed inbox row is kept (the service's own delivery history is 30 days).
       * Its unique delivery id is what deduplicates, so it must outlive the service's
       * retries of one delivery (about 43 minutes): at least 1 day.
       */
      processedDeliveriesDays: z.number().int().min(1).default(30),
      /** Hours a finished execution intent is kept: at least its 24 h replay window. */
      finishedIntentsHours: z.number().int().min(24).default(48),
      /** Rows removed per statement: short statements, no long lock. */
      batchSize: z.number().int().positive().max(10_000).default(500),
    })
    .prefault({}),
  transmit: z
    .object({
      payoutChannel: z.string().includes(':payoutId').default('payouts/:payoutId'),
      ownerChannel: z.string().includes(':ownerId').default('payouts/owners/:ownerId'),
      /**
       * Whether each web process broadcasts the changes any process applied, read from the
       * ledger (`true`), or the process that applies a change broadcasts it (`false`).
       * `auto`: the relay in worker mode when Transmit has no transport (Redis carries the
       * worker's broadcasts otherwise). See docs/production.md.
       */
      relay: z.union([z.literal('auto'), z.boolean()]).default('auto'),
      /**
       * How often the relay reads the changes applied since its last read. On PostgreSQL a
       * NOTIFY from the committing process wakes it at once; while it LISTENs, it polls
       * only every `max(relayIntervalMs, 1000)` ms, as a safety net.
       */
      relayIntervalMs: duration(z.number().int().min(10).max(60_000)).default(250),
    })
    .prefault({}),
  ledger: z
    .object({
      enabled: z.boolean().default(true),
      connection: z.string().optional(),
      tablePrefix: z
        .string()
        .regex(/^[a-z0-9_]*$/)
        .default(DEFAULT_TABLE_PREFIX),
      /**
       * How long one of the plugin's transactions (inbox processing, applying a batch,
       * storing an execute) may take. Past it the transaction is abandoned and its
       * connection dropped, so a connection that stops answering cannot stall the plugin.
       */
      transactionTimeoutMs: duration(z.number().int().positive()).default(30_000),
      /**
       * On a SQLite file in WAL mode (docs/production.md), how often a thread of its own copies
       * the log into the database file (a PASSIVE checkpoint: it waits for no lock, and no
       * writer waits for it). SQLite's own checkpoint runs inside the commit that takes the
       * log past 1,000 pages and stops the event loop while it copies and syncs; checkpointed
       * this often, the log never gets there. 0: SQLite's own checkpoints only.
       */
      sqliteCheckpointMs: duration(z.number().int().min(0).max(60_000)).default(50),
      /**
       * On better-sqlite3, how many prepared statements each connection keeps to run again
       * (`src/database/statement_cache.ts`): knex prepares every query anew, and preparing
       * took a third as long as running the statements of an inbox batch. A kept statement
       * holds up to about 130 KB (13 MB per connection at 100). 0: none kept.
       */
      sqliteStatementCache: z.number().int().min(0).max(1000).default(100),
    })
    .prefault({}),
  /**
   * What the health check and `payouts:status` report as warning or error. An error makes
   * the host's health route answer 503 (a load balancer takes the instance out), so it is
   * kept for what this instance cannot work through; what needs a human is a warning.
   */
  health: z
    .object({
      /** Inbox rows not processed yet. */
      inboxBacklog: threshold({ warning: 100, error: 1000 }),
      /** Age in ms of the oldest inbox row not processed yet. */
      oldestPendingMs: durationThreshold({ warning: 5 * 60_000, error: 30 * 60_000 }),
      /** Inbox rows given up on. */
      deadLetters: threshold({ warning: 1 }),
      /** Execution intents whose outcome is unknown or that wait for a human. */
      unknownIntents: threshold({ warning: 1 }),
      /** Escrow deposits whose confirmation failed past its attempts. */
      escrowFailed: threshold({ warning: 1 }),
      /** Non-terminal payouts older than `jobs.stuckAfterMs`. */
      stuckPayouts: threshold({ warning: 1 }),
      /** Ms since the inbox last stored an event (never reported before the first one). */
      sinceLastEventMs: durationThreshold({}),
      /**
       * The worker (in `webhook.processing: 'worker'`) and the jobs (with `jobs.enabled`)
       * that have not run for 3 of their intervals: the number of them.
       */
      heartbeats: threshold({ warning: 1 }),
      /**
       * The whole report answers within this: a database or a service that does not is an
       * error line naming it, and the host's health route answers 503 instead of hanging.
       * Every statement of the report (and each heartbeat write) is bounded by it too.
       */
      timeoutMs: duration(z.number().int().positive().max(60_000)).default(3000),
      /** The cheap read that tells whether the service answers with this key. */
      reachability: z
        .object({
          /** One attempt, no retry; past it the service counts as unreachable. */
          timeoutMs: duration(z.number().int().positive()).default(2000),
          /** How long an answer is reused before the service is asked again. */
          cacheForMs: duration(z.number().int().min(0)).default(30_000),
        })
        .prefault({}),
    })
    .prefault({}),
})

type SchemaInput = z.input<typeof payoutsConfigSchema>

/** What `config/payouts.ts` holds for one account: `jobs.redis` names an app's connection. */
export type PayoutsConfigInput = Omit<SchemaInput, 'jobs'> & {
  jobs?: Omit<NonNullable<SchemaInput['jobs']>, 'redis'> & { redis?: RedisConnectionName }
}
export type PayoutsConfig = z.output<typeof payoutsConfigSchema>

/**
 * Validates the plugin's config and fills in its defaults; a wrong value fails with the
 * offending key named (never its value: it may be a secret). `defineConfig` (config.ts)
 * calls it on first use, so this module and zod load only then.
 */
export function validateConfig(
  config: PayoutsConfigInput,
  /** Where a wrong value is reported (an account's own key, or the shared one). */
  nameKey: (path: PropertyKey[]) => string = (path) => path.join('.') || '(root)'
): PayoutsConfig {
  const result = payoutsConfigSchema.safeParse(config)
  if (!result.success) {
    const issue = result.error.issues[0]
    throw new E_PAYOUTS_INVALID_CONFIG([`${nameKey(issue.path)} ${issue.message}`])
  }
  return redactWhenShown(result.data)
}

const REDACTED = '[redacted]'

/** A `redis://user:password@host` URL with its credentials hidden. */
const withoutPassword = redactCredentials

/**
 * Makes the config safe to print: `console.log(config)`, `JSON.stringify(config)` and an
 * assertion's diff of it (or of its `webhook`, `jobs` and `events` parts) show `[redacted]` for the
 * API key, the webhook secrets and the credentials of any URL (`baseUrl`, `events.websocketUrl`,
 * `jobs.redisUrl`). The values themselves are untouched.
 */
function redactWhenShown(config: PayoutsConfig): PayoutsConfig {
  const shown = {
    webhook: () => ({
      ...config.webhook,
      secret: config.webhook.secret && REDACTED,
      previousSecret: config.webhook.previousSecret && REDACTED,
    }),
    jobs: () => ({ ...config.jobs, redisUrl: withoutPassword(config.jobs.redisUrl) }),
    root: () => ({
      ...config,
      apiKey: config.apiKey && REDACTED,
      baseUrl: redactCredentials(config.baseUrl),
      events: shown.events(),
      webhook: shown.webhook(),
      jobs: shown.jobs(),
    }),
    events: () => ({
      ...config.events,
      websocketUrl: redactCredentials(config.events.websocketUrl),
    }),
  }
  const hide = (target: object, view: () => object) => {
    for (const key of ['toJSON', inspect.custom]) {
      Object.defineProperty(target, key, { value: view, enumerable: false })
    }
  }
  hide(config.webhook, shown.webhook)
  hide(config.jobs, shown.jobs)
  hide(config.events, shown.events)
  hide(config, shown.root)
  return config
}
