import { readdir } from 'node:fs/promises'
import { test } from '@japa/runner'
import { Kernel, ListLoader } from '@adonisjs/core/ace'
import PayoutsDeliveriesReplay from '../../commands/payouts_deliveries_replay.ts'
import PayoutsReplay from '../../commands/payouts_replay.ts'
import PayoutsWebhooksRedeliver from '../../commands/payouts_webhooks_redeliver.ts'

const COMMANDS = new URL('../../commands/', import.meta.url)

test.group('Command names', () => {
  test('the command that asks the service is named apart from the local replay; the old name still runs it', async ({
    assert,
  }) => {
    const files = (await readdir(COMMANDS)).filter((file) => file.endsWith('.ts'))
    const commands = await Promise.all(
      files.map(async (file) => (await import(new URL(file, COMMANDS).href)).default)
    )
    const kernel = Kernel.create()
    kernel.addLoader(new ListLoader(commands))
    await kernel.boot()

    assert.strictEqual(await kernel.find('payouts:webhooks:redeliver'), PayoutsWebhooksRedeliver)
    // The former name is a command of its own (it says it is deprecated), the same one beneath.
    const former = await kernel.find('payouts:deliveries:replay')
    assert.strictEqual(former, PayoutsDeliveriesReplay)
    assert.strictEqual(Object.getPrototypeOf(former), PayoutsWebhooksRedeliver)
    assert.match(
      former.description,
      /^Deprecated \(removed in 0\.2\.0\): use payouts:webhooks:redeliver$/
    )
    assert.strictEqual(await kernel.find('payouts:replay'), PayoutsReplay)
    // Each name and alias belongs to one command.
    const names = commands.flatMap((command) => [command.commandName, ...command.aliases])
    assert.equal(new Set(names).size, names.length)
  })
})
