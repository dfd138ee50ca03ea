import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { stripVTControlCharacters } from 'node:util'
import { test } from '@japa/runner'
import type { TestContext } from '@japa/runner/core'
import type { PayoutsService } from '../../src/service/payouts_service.ts'
import type {
  ExecutedPayout,
  Match,
  PayoutRef,
  PayoutsFake,
  PayoutsFakeOptions,
} from '../../src/testing/main.ts'
import type { FaultConfig } from '../../src/emulator/faults.ts'
import type { PayoutStatus } from '../../src/schemas/common.ts'
import { TEST_DB } from '../helpers/database.ts'
import { TS_HOOKS } from '../helpers/ts_hooks.ts'

/** Runs the fixture host app's own Japa suite (tests/fixtures/plugin_host) in a child process. */
async function runHostSuite(env: Record<string, string> = {}) {
  const child = spawn(process.execPath, [TS_HOOKS, 'tests/fixtures/plugin_host/run.ts'], {
    env: {
      ...process.env,
      PLUGIN_HOST_PREFIX: `ph${Math.random().toString(36).slice(2, 7)}_`,
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout.on('data', (chunk) => (output += chunk))
  child.stderr.on('data', (chunk) => (output += chunk))
  const [code] = await once(child, 'exit')
  return { code: code as number, output: stripVTControlCharacters(output) }
}

test.group(`Testing | the Japa plugin (${TEST_DB})`, () => {
  test('every test of a host suite gets a fresh fake and empty tables, in and out of groups', async ({
    assert,
  }) => {
    const { code, output } = await runHostSuite()
    assert.equal(code, 0, output)
    assert.match(output, /Tests\s+3 passed \(3\)/)
  }).timeout(60_000)

  test('without clearing, a later test sees an earlier one’s rows (so the clearing is what passes it)', async ({
    assert,
  }) => {
    const { code, output } = await runHostSuite({ CLEAR_TABLES: 'off' })
    assert.equal(code, 1, output)
    assert.match(output, /starts from a fresh fake and empty tables/)
    assert.match(output, /to have a length of \+0 but got 1/)
  }).timeout(60_000)

  test('types: the fake handle and the test context', ({ expectTypeOf }) => {
    expectTypeOf<TestContext['payouts']>().toEqualTypeOf<PayoutsFake>()
    expectTypeOf<PayoutsService['fake']>().parameters.toEqualTypeOf<[PayoutsFakeOptions?]>()
    expectTypeOf<PayoutsService['fake']>().returns.resolves.toEqualTypeOf<PayoutsFake>()
    expectTypeOf<PayoutsService['restore']>().returns.resolves.toBeVoid()
    expectTypeOf<PayoutsFake['complete']>().parameters.toEqualTypeOf<[PayoutRef]>()
    expectTypeOf<PayoutsFake['cancel']>().parameters.toEqualTypeOf<[PayoutRef]>()
    expectTypeOf<PayoutsFake['fail']>()
      .parameter(1)
      .toEqualTypeOf<{ reason?: string; step?: ExecutedPayout['step'] } | undefined>()
    expectTypeOf<PayoutsFake['advance']>().parameters.toEqualTypeOf<[number]>()
    expectTypeOf<PayoutsFake['faults']>().parameters.toEqualTypeOf<[FaultConfig]>()
    expectTypeOf<PayoutsFake['assertExecuted']>().parameters.toEqualTypeOf<
      [Match<ExecutedPayout>?]
    >()
    expectTypeOf<PayoutsFake['assertExecutedCount']>().parameters.toEqualTypeOf<
      [number, Match<ExecutedPayout>?]
    >()
    expectTypeOf<PayoutsFake['assertEscrowConfirmed']>().parameters.toEqualTypeOf<[string?]>()
    expectTypeOf<ExecutedPayout['status']>().toEqualTypeOf<PayoutStatus>()
    expectTypeOf<ExecutedPayout>().toHaveProperty('idempotencyKey')
    // A ledger row, a UUID or an API payout all name a payout.
    expectTypeOf<{ payoutUuid: string }>().toExtend<PayoutRef>()
    expectTypeOf<string>().toExtend<PayoutRef>()
    expectTypeOf<number>().not.toExtend<PayoutRef>()
  })
})
