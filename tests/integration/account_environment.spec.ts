import { test } from '@japa/runner'
import { tableNames } from '../../src/database/schema.ts'
import { checkAccountEnvironment } from '../../src/service/account_environment.ts'
import { setupDatabase } from '../helpers/database.ts'

test.group('Accounts | the environment of each account key', () => {
  test('the first use records the key environment; the same environment passes again', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup)
    const table = tableNames(prefix).accounts
    const check = (account: string, environment: string) =>
      checkAccountEnvironment({ db, table, account, environment, timeoutMs: 5000 })

    await check('main', 'sandbox')
    await check('main', 'sandbox')
    await check('live', 'production')

    const rows = await db.from(table).orderBy('name').select('name', 'environment')
    assert.deepEqual(
      rows.map((row) => ({ name: row.name, environment: row.environment })),
      [
        { name: 'live', environment: 'production' },
        { name: 'main', environment: 'sandbox' },
      ]
    )
  })

  test('a key of the other environment is refused with E_PAYOUTS_ACCOUNT_ENVIRONMENT, naming both', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup)
    const table = tableNames(prefix).accounts
    await checkAccountEnvironment({
      db,
      table,
      account: 'main',
      environment: 'sandbox',
      timeoutMs: 5000,
    })

    const error = await checkAccountEnvironment({
      db,
      table,
      account: 'main',
      environment: 'production',
      timeoutMs: 5000,
    }).catch((caught) => caught)

    assert.equal(error?.code, 'E_PAYOUTS_ACCOUNT_ENVIRONMENT')
    assert.include(error.message, '"main" holds sandbox rows')
    assert.include(error.message, 'a production key')
    const row = await db.from(table).where('name', 'main').first()
    assert.equal(row.environment, 'sandbox')
  })

  test('two processes recording at once: one row, both pass', async ({ assert, cleanup }) => {
    const { db, prefix } = await setupDatabase(cleanup)
    const table = tableNames(prefix).accounts
    const check = () =>
      checkAccountEnvironment({ db, table, account: 'eu', environment: 'sandbox', timeoutMs: 5000 })

    await Promise.all([check(), check(), check()])

    const rows = await db.from(table).where('name', 'eu')
    assert.lengthOf(rows, 1)
  })
})
