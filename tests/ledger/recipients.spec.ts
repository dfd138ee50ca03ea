import { test } from '@japa/runner'
import { RecipientsMirror } from '../../src/ledger/recipients_mirror.ts'
import { Recipient } from '../../src/models/main.ts'
import { startEmulator, testClient } from '../emulator/helpers.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'

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
})
