import { test } from '@japa/runner'
import { tableNames } from '../../src/database/schema.ts'
import { checkAccountEnvironment, keyFingerprint } from '../../src/service/account_environment.ts'
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

test.group('Accounts | the key each account last used', () => {
  const KEY_A = `sk_test_${'a'.repeat(43)}`
  const KEY_B = `sk_test_${'b'.repeat(43)}`
  const KEY_C = `sk_test_${'c'.repeat(43)}`

  test("two accounts' keys swapped are refused with E_PAYOUTS_ACCOUNT_KEY, naming both accounts", async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup)
    const table = tableNames(prefix).accounts
    const check = (account: string, apiKey: string) =>
      checkAccountEnvironment({
        db,
        table,
        account,
        apiKey,
        environment: 'sandbox',
        timeoutMs: 5000,
      })
    await check('main', KEY_A)
    await check('eu', KEY_B)

    const swapped = await check('main', KEY_B).catch((error) => error)
    assert.equal(swapped?.code, 'E_PAYOUTS_ACCOUNT_KEY')
    assert.include(swapped.message, '"main" is configured with the API key account "eu" last used')
    assert.notInclude(swapped.message, KEY_B)
    // Nothing recorded changed: main still holds its own key's fingerprint.
    assert.deepEqual(await check('main', KEY_A), { rotated: false })
    // A new account given main's key: refused, and nothing recorded for it.
    const renamed = await check('us', KEY_A).catch((error) => error)
    assert.equal(renamed?.code, 'E_PAYOUTS_ACCOUNT_KEY')
    assert.isNull(await db.from(table).where('name', 'us').first())
  })

  test('a new key for an account is its rotation: recorded and reported once; only a fingerprint is kept', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup)
    const table = tableNames(prefix).accounts
    const check = (apiKey: string) =>
      checkAccountEnvironment({
        db,
        table,
        account: 'main',
        apiKey,
        environment: 'sandbox',
        timeoutMs: 5000,
      })
    assert.deepEqual(await check(KEY_A), { rotated: false })
    assert.deepEqual(await check(KEY_C), { rotated: true })
    assert.deepEqual(await check(KEY_C), { rotated: false })

    const rows = await db.from(table)
    assert.lengthOf(rows, 1)
    assert.equal(rows[0].key_fingerprint, keyFingerprint(KEY_C))
    assert.notInclude(JSON.stringify(rows), KEY_C.slice(8))
  })
})
