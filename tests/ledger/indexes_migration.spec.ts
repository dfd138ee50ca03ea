import { test } from '@japa/runner'
import type { Database } from '@adonisjs/lucid/database'
import {
  createPayoutsIndexes,
  createPayoutsTables,
  dropPayoutsIndexes,
  dropPayoutsTables,
  payoutsIndexes,
} from '../../src/database/schema.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

/** The names of the indexes on the plugin's tables under `prefix`. */
async function indexNames(db: Database, prefix: string): Promise<string[]> {
  const client = db.connection()
  if (TEST_DB === 'pg') {
    const result = await client.rawQuery(
      'select indexname from pg_indexes where schemaname = current_schema() and tablename like ?',
      [`${prefix}%`]
    )
    return result.rows.map((row: { indexname: string }) => row.indexname)
  }
  if (TEST_DB === 'mysql') {
    // mysql2 answers [rows, fields]; one row per indexed column, so names repeat.
    const [rows] = await client.rawQuery(
      'select distinct index_name as name from information_schema.statistics where table_schema = database() and table_name like ?',
      [`${prefix}%`]
    )
    return rows.map((row: { name: string }) => row.name)
  }
  const rows: Array<{ name: string }> = await client.rawQuery(
    `select name from sqlite_master where type = 'index' and tbl_name like ?`,
    [`${prefix}%`]
  )
  return rows.map((row) => row.name)
}

test.group(`Database | the indexes migration (${TEST_DB})`, () => {
  test('on tables created without them, up adds every index and down removes them', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'indexes', { createTables: false })
    const schema = () => db.connection().schema
    // The tables as an app installed before the indexes has them.
    await createPayoutsTables(schema(), prefix)
    cleanup(async () => {
      await dropPayoutsTables(schema(), prefix)
    })
    const expected = payoutsIndexes(prefix).map((index) => index.name)
    const before = await indexNames(db, prefix)
    assert.lengthOf(expected, 5)
    for (const name of expected) assert.notInclude(before, name)

    await createPayoutsIndexes(schema(), prefix)
    const after = await indexNames(db, prefix)
    for (const name of expected) assert.include(after, name)
    assert.sameMembers(
      after.filter((name) => !before.includes(name)),
      expected
    )

    await dropPayoutsIndexes(schema(), prefix)
    assert.sameMembers(await indexNames(db, prefix), before)
  })
})
