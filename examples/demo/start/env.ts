import { Env } from '@adonisjs/core/env'

export default await Env.create(new URL('../', import.meta.url), {
  NODE_ENV: Env.schema.enum(['development', 'production', 'test'] as const),
  PORT: Env.schema.number(),
  HOST: Env.schema.string({ format: 'host' }),
  APP_KEY: Env.schema.string(),
  LOG_LEVEL: Env.schema.string.optional(),

  /*
  |----------------------------------------------------------
  | Variables for configuring the database package
  |----------------------------------------------------------
  */
  DB_CONNECTION: Env.schema.enum.optional(['sqlite', 'pg', 'mysql'] as const),
  DB_FILE: Env.schema.string.optional(),
  PG_HOST: Env.schema.string.optional({ format: 'host' }),
  PG_PORT: Env.schema.number.optional(),
  PG_USER: Env.schema.string.optional(),
  PG_PASSWORD: Env.schema.string.optional(),
  PG_DATABASE: Env.schema.string.optional(),
  MYSQL_HOST: Env.schema.string.optional({ format: 'host' }),
  MYSQL_PORT: Env.schema.number.optional(),
  MYSQL_USER: Env.schema.string.optional(),
  MYSQL_PASSWORD: Env.schema.string.optional(),
  MYSQL_DATABASE: Env.schema.string.optional(),

  /*
  |----------------------------------------------------------
  | Variables for configuring the Transmit Redis transport
  |----------------------------------------------------------
  */
  REDIS_HOST: Env.schema.string.optional({ format: 'host' }),
  REDIS_PORT: Env.schema.number.optional(),

  /*
  |----------------------------------------------------------
  | Variables for configuring @svc/adonis-payouts
  |----------------------------------------------------------
  */
  PAYOUTS_API_KEY: Env.schema.secret.optional(),
  PAYOUTS_BASE_URL: Env.schema.string({ format: "url", tld: false }),
  PAYOUTS_WEBHOOK_SECRET: Env.schema.secret.optional(),
  PAYOUTS_REDIS_URL: Env.schema.secret.optional(),
  PAYOUTS_PROCESSING: Env.schema.enum.optional(['inline', 'worker'] as const)
})
