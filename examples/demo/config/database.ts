import app from '@adonisjs/core/services/app'
import env from '#start/env'
import { defineConfig } from '@adonisjs/lucid'

/**
 * SQLite by default; DB_CONNECTION=pg or DB_CONNECTION=mysql for several instances on one
 * PostgreSQL or MySQL/MariaDB database.
 */
export default defineConfig({
  connection: env.get('DB_CONNECTION', 'sqlite'),
  connections: {
    sqlite: {
      client: 'better-sqlite3',
      connection: { filename: app.makePath(env.get('DB_FILE', 'tmp/demo.sqlite')) },
      useNullAsDefault: true,
      pool: {
        // Two processes share this file (the web process and `node ace payouts:work`): in WAL
        // mode a reader never waits for the writer, and a writer waits up to 10 s for the other.
        afterCreate: (connection: any, done: (error: unknown, connection: unknown) => void) => {
          connection.pragma('journal_mode = WAL')
          connection.pragma('busy_timeout = 10000')
          done(null, connection)
        },
      },
      migrations: { naturalSort: true, paths: ['database/migrations'] },
    },
    pg: {
      client: 'pg',
      connection: {
        host: env.get('PG_HOST', '127.0.0.1'),
        port: env.get('PG_PORT', 5432),
        user: env.get('PG_USER', 'postgres'),
        password: env.get('PG_PASSWORD'),
        database: env.get('PG_DATABASE', 'test'),
      },
      migrations: { naturalSort: true, paths: ['database/migrations'] },
    },
    mysql: {
      client: 'mysql2',
      connection: {
        host: env.get('MYSQL_HOST', '127.0.0.1'),
        port: env.get('MYSQL_PORT', 3306),
        user: env.get('MYSQL_USER', 'root'),
        password: env.get('MYSQL_PASSWORD'),
        database: env.get('MYSQL_DATABASE', 'test'),
      },
      migrations: { naturalSort: true, paths: ['database/migrations'] },
    },
  },
})
