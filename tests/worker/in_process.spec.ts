import { test } from '@japa/runner'
import PayoutsWork from '../../commands/payouts_work.ts'
import { createApp, TEST_API_KEY } from '../helpers/app.ts'
import { Logger } from '@adonisjs/core/logger'
import { validateConfig } from '../../src/define_config.ts'
import { PayoutsService } from '../../src/service/payouts_service.ts'
import { createClient } from '../../src/service/client_factory.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'

/**
 * What the provider's ready step starts in the web process, per `webhook.processing`: the
 * service's start methods are recorded (not run) before the app starts.
 */
async function started(
  cleanup: (fn: () => Promise<void>) => void,
  processing: 'inline' | 'worker'
) {
  const calls: string[] = []
  await startHttpApp(
    cleanup,
    { webhook: { processing }, jobs: { enabled: true }, events: { sources: 'both' } },
    async (app) => {
      const payouts = await app.container.make('payouts.manager')
      payouts.startInboxWorker = () => void calls.push('inbox worker')
      payouts.startStream = async () => {
        calls.push('stream')
        return undefined as never
      }
      payouts.startJobs = async () => {
        calls.push('jobs')
        return undefined as never
      }
    }
  )
  return calls
}

test.group(`Worker | the web process per processing mode (${TEST_DB})`, () => {
  test('inline (the default) starts the inbox worker, the stream and the jobs', async ({
    assert,
    cleanup,
  }) => {
    assert.deepEqual(await started(cleanup, 'inline'), ['inbox worker', 'stream', 'jobs'])
  })

  test('worker mode starts none of them', async ({ assert, cleanup }) => {
    assert.deepEqual(await started(cleanup, 'worker'), [])
  })
})

test.group('Worker | payouts:work without a ledger', () => {
  test('exits 1 and says why when the app has no database for the inbox', async ({
    assert,
    cleanup,
  }) => {
    const app = await createApp({}, cleanup)
    const ace = await app.container.make('ace')
    ace.ui.switchMode('raw')
    const command = await ace.create(PayoutsWork, [])
    await command.exec()
    assert.equal(command.exitCode, 1)
    const logs = command.logger.getLogs().map((log: { message: string }) => log.message)
    assert.match(logs.join('\n'), /Worker failed to start: .*ledger/)
  })
})

test.group(`Jobs | the prune job (${TEST_DB})`, () => {
  test('the prune job is scheduled with the other jobs, every jobs.pruneEveryMs', async ({
    assert,
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'prune_hook')
    const announced: object[] = []
    const logger = new Logger({ enabled: false })
    logger.info = ((obj: object, msg?: string) => {
      if (msg === 'payouts jobs started') announced.push(obj)
    }) as typeof logger.info
    const config = validateConfig({
      apiKey: TEST_API_KEY,
      baseUrl: 'http://127.0.0.1:9',
      ledger: { tablePrefix: prefix },
    })
    const service = new PayoutsService(config, {
      logger,
      createClient: () => createClient(config, logger),
      database: async () => db,
    })
    cleanup(() => service.close())
    await service.startJobs()
    assert.deepEqual(announced, [
      {
        account: 'main',
        locks: 'database',
        intervals: { reconcile: 60_000, escrow: 60_000, recover: 60_000, prune: 3_600_000 },
      },
    ])
  })
})
