import { test } from '@japa/runner'
import { dbDate } from '../../src/database/dates.ts'
import { tableNames } from '../../src/database/schema.ts'
import { SecretStore, type SecretCipher } from '../../src/webhooks/secret_store.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

/** Reversible and visibly not plain text; the real app uses AdonisJS encryption. */
const cipher: SecretCipher = {
  encrypt: (value) => `enc:${Buffer.from(value).toString('base64')}`,
  decrypt: <T>(value: string) => Buffer.from(value.slice(4), 'base64').toString() as T,
}

/** A store on a fresh table, its cache off, holding whsec_one or the given secret for sub_1. */
async function savedStore(cleanup: (fn: () => Promise<void>) => void, secret = 'whsec_one') {
  const { db, prefix } = await setupDatabase(cleanup, 'secrets')
  const table = tableNames(prefix).webhookSecrets
  const store = new SecretStore(db, table, cipher, undefined, 0)
  await store.save({ subscriptionId: 'sub_1', url: 'https://a.test/w', secret })
  return { db, table, store }
}

test.group(`Webhooks | stored secrets (${TEST_DB})`, () => {
  test('webhooks arriving together on a stale cache read the table once', async ({
    assert,
    cleanup,
  }) => {
    const { db, table, store } = await savedStore(cleanup)
    const reads: string[] = []
    const knex = db.connection().getReadClient()
    const onQuery = (query: { sql: string }) => {
      if (query.sql.includes(table) && query.sql.startsWith('select')) reads.push(query.sql)
    }
    knex.on('query', onQuery)
    cleanup(async () => void knex.off('query', onQuery))

    const results = await Promise.all(Array.from({ length: 20 }, () => store.activeSecrets()))
    assert.lengthOf(reads, 1)
    for (const secrets of results) assert.deepEqual(secrets, ['whsec_one'])
  })

  test('a rotation is seen at once through the warm cache; rows hold no plain secret', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'secrets')
    const store = new SecretStore(db, tableNames(prefix).webhookSecrets, cipher)
    await store.save({ subscriptionId: 'sub_1', url: 'https://a.test/w', secret: 'whsec_one' })
    assert.deepEqual(await store.activeSecrets(), ['whsec_one'])
    await store.rotate('sub_1', 'whsec_two')
    // No overlap: the service stopped signing with the old secret when it answered.
    assert.deepEqual(await store.activeSecrets(), ['whsec_two'])
    const raw = await db.connection().from(tableNames(prefix).webhookSecrets).first()
    assert.notInclude(JSON.stringify(raw), 'whsec_')
    assert.isNull(raw.previous_secret)
  })

  test('a previous secret left by an older rotation is never accepted', async ({
    assert,
    cleanup,
  }) => {
    const { db, table, store } = await savedStore(cleanup, 'whsec_two')
    // What a rotation by an earlier version left: the old secret with a grace end.
    await db
      .connection()
      .from(table)
      .where('subscription_id', 'sub_1')
      .update({
        previous_secret: cipher.encrypt('whsec_one'),
        previous_valid_until: dbDate(db.connection(), new Date(Date.now() + 3600_000)),
      })
    assert.deepEqual(await store.activeSecrets(), ['whsec_two'])
  })
})
