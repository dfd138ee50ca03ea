import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { test } from '@japa/runner'
import { PayoutsValidationError } from '../../src/client/main.ts'
import { RecipientsMirror } from '../../src/ledger/recipients_mirror.ts'
import { Recipient } from '../../src/models/main.ts'
import { startEmulator, testClient } from '../emulator/helpers.ts'
import { connectionConfig, setupDatabase, TEST_DB } from '../helpers/database.ts'
import { startRecordingProxy } from '../helpers/recording_proxy.ts'

test.group(`Ledger | recipients mirror (${TEST_DB})`, () => {
  test('create, update and delete through the API mirror locally; sync reconciles', async ({
    assert,
    cleanup,
  }) => {
    await setupDatabase(cleanup, 'recipients')
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const client = testClient(cleanup, emu)
    const mirror = new RecipientsMirror(client)

    const ada = await mirror.create({ name: 'Ada', currency: 'MXN' }, { ownerId: 'tenant-1' })
    assert.equal(ada.ownerId, 'tenant-1')
    assert.lengthOf(ada.paymentMethods!, 1)
    await mirror.update(ada.remoteId, { name: 'Ada L.' })
    assert.equal((await Recipient.findByOrFail('remoteId', ada.remoteId)).name, 'Ada L.')

    const bob = await mirror.create({ name: 'Bob' })
    await mirror.delete(bob.remoteId)
    assert.isNotNull((await Recipient.findByOrFail('remoteId', bob.remoteId)).deletedAt)

    // Changes made outside the app: one created remotely, one deleted remotely.
    for (let i = 0; i < 120; i++) emu.admin.seedRecipient({ name: `Remote ${i}` })
    await client.recipients.delete(ada.remoteId)
    const summary = await mirror.sync()
    assert.deepEqual(summary, { created: 120, updated: 0, deleted: 1 })
    assert.equal((await Recipient.query().whereNull('deleted_at')).length, 120)
    assert.deepEqual(await mirror.sync(), { created: 0, updated: 120, deleted: 0 })
  })

  test('createMany: 100 to a bulk request under derived keys, mirrored; the same key again makes none', async ({
    assert,
    cleanup,
  }) => {
    await setupDatabase(cleanup, 'recipients')
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const proxy = await startRecordingProxy(cleanup, emu.baseUrl, '/recipients/bulk')
    const client = testClient(
      cleanup,
      { apiKey: emu.apiKey, baseUrl: proxy.baseUrl },
      { retry: { maxRetries: 0 } }
    )
    const mirror = new RecipientsMirror(client)
    const rows = Array.from({ length: 150 }, (_, i) => ({ name: `Seller ${i}`, currency: 'MXN' }))
    const sent = () => proxy.requests.filter((r) => r.path === '/recipients/bulk')

    // The second request's answer is lost after the service made its recipients.
    proxy.loseNext(1, 1)
    await assert.rejects(() =>
      mirror.createMany(rows, { idempotencyKey: 'sellers-import-1', ownerId: 'tenant-1' })
    )
    assert.lengthOf(await Recipient.all(), 100)
    assert.equal(emu.state.recipients.size, 150)

    // Again with the key: the service answers the ones it made; none is made twice.
    const made = await mirror.createMany(rows, {
      idempotencyKey: 'sellers-import-1',
      ownerId: 'tenant-1',
    })
    assert.deepEqual(
      sent().map((r) => r.idempotencyKey),
      ['sellers-import-1-c0', 'sellers-import-1-c1', 'sellers-import-1-c0', 'sellers-import-1-c1']
    )
    assert.equal(emu.state.recipients.size, 150)
    assert.deepEqual(
      made.map((r) => r.name),
      rows.map((r) => r.name)
    )
    const local = await Recipient.all()
    assert.lengthOf(local, 150)
    assert.deepEqual([...new Set(local.map((r) => r.ownerId))], ['tenant-1'])
    assert.sameMembers(
      local.map((r) => r.remoteId),
      [...emu.state.recipients.keys()]
    )

    // A bad row is named, and nothing is sent.
    const error = await mirror
      .createMany([{ name: 'Ok' }, { name: '' }], { idempotencyKey: 'sellers-import-2' })
      .catch((e) => e)
    assert.instanceOf(error, PayoutsValidationError)
    assert.equal(error.field, 'rows.1.name')
    assert.lengthOf(sent(), 4)
  })
})

test.group(`Ledger | recipients mirror beside another writer (${TEST_DB})`, () => {
  test('on SQLite, a create while another process writes the file waits for it instead of failing "database is locked"', async ({
    assert,
    cleanup,
  }) => {
    await setupDatabase(cleanup, 'recipients_locked')
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const mirror = new RecipientsMirror(testClient(cleanup, emu))
    // Another process's write transaction on the same file (the worker applying a batch),
    // committed 500 ms after it took the lock.
    const writer = spawn(
      process.execPath,
      [
        '-e',
        `const db = new (require('better-sqlite3'))(process.argv[1]);
         db.exec('BEGIN IMMEDIATE'); console.log('locked');
         setTimeout(() => { db.exec('COMMIT'); db.close() }, 500)`,
        (connectionConfig('recipients_locked') as any).connection.filename,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] }
    )
    cleanup(async () => void writer.kill('SIGKILL'))
    writer.stdout.setEncoding('utf8')
    assert.match(String((await once(writer.stdout, 'data'))[0]), /locked/)
    const ada = await mirror.create({ name: 'Ada', currency: 'MXN' }, { ownerId: 'tenant-1' })
    assert.equal((await Recipient.findByOrFail('remoteId', ada.remoteId)).ownerId, 'tenant-1')
  })
    .skip(TEST_DB !== 'sqlite', "SQLite's file lock")
    .timeout(30_000)
})
