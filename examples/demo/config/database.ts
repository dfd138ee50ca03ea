import app from '@adonisjs/core/services/app'
import env from '#start/env'
import { defineConfig } from '@adonisjs/lucid'

/** SQLite by default; DB_CONNECTION=pg for several instances on one PostgreSQL. */
export default defineConfig({
  connection: env.get('DB_CONNECTION', 'sqlite'),
  connections: {
    sqlite: {
      client: 'better-sqlite3',
      connection: { filename: app.makePath(env.get('DB_FILE', 'tmp/demo.sqlite')) },
      useNullAsDefault: true,
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
  },
})
