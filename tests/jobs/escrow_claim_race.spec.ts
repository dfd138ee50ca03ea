import { test } from '@japa/runner'
import { DateTime } from 'luxon'
import type { PayoutsClient } from '../../src/client/main.ts'
import { EscrowFallback } from '../../src/jobs/escrow_fallback.ts'
import { EscrowDeposits } from '../../src/ledger/escrow_deposits.ts'
import { PayoutExecutor } from '../../src/ledger/payout_executor.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { EscrowDeposit } from '../../src/models/main.ts'
import { startEmulator, testClient } from '../emulator/helpers.ts'
import {
  connectionConfig,
  databaseHoldingAnAnswer,
  setupDatabase,
  TEST_DB,
} from '../helpers/database.ts'

/**
 * A real database whose answer to one claim (the fallback's UPDATE of a deposit to
 * `confirm_requested`) can be held back: the UPDATE has run and is committed, but the run
 * that sent it has not heard back, as when its connection or its process stalls.
 */
function databaseHoldingAClaim(cleanup: (fn: () => Promise<void>) => void) {
  return databaseHoldingAnAnswer(
    cleanup,
    'escrow_race',
    (query) =>
      query.sql.trim().toLowerCase().startsWith('update') &&
      query.sql.includes(EscrowDeposit.table) &&
      (query.bindings ?? []).includes('confirm_requested')
  )
}

test.group(`Jobs | escrow fallback, a run given up inside its claim (${TEST_DB})`, () => {
  test('a later run of the same process does not claim the deposit again: confirmed and announced once', async ({
    assert,
    cleanup,
  }) => {
    const database = await databaseHoldingAClaim(cleanup)
    const { db } = database
    const emu = await startEmulator(cleanup, { rateLimits: false })
    const client = testClient(cleanup, emu)
    const recipient = emu.admin.seedRecipient()
    const executor = new PayoutExecutor({ db, ledger: new PayoutLedger(db), client })
    const { result } = await executor.execute({
      fromCurrency: 'USDC',
      toCurrency: 'MXN',
      amount: 100,
      recipientId: recipient.id,
      walletAddress: '0x' + '7'.repeat(40),
    })
    const { quoteId } = result
    const { txHash } = emu.admin.simulateDeposit({ quoteId, detect: false })

    let confirmRequests = 0
    const counting = {
      getQuoteStatus: client.getQuoteStatus.bind(client),
      confirmEscrowDeposit: (input: Parameters<PayoutsClient['confirmEscrowDeposit']>[0]) => {
        confirmRequests++
        return client.confirmEscrowDeposit(input)
      },
    }
    const announced: string[] = []
    const deposits = new EscrowDeposits({
      db,
      client: counting,
      onConfirmed: (event) => void announced.push(event.quoteId),
    })
    // The job's clock: each run reads it once, when it starts.
    const start = DateTime.now()
    let clock = start
    const escrow = new EscrowFallback({ db, deposits, now: () => clock })
    await deposits.record({ quoteId, txHash, confirmedAt: start.minus({ minutes: 30 }) })

    // The first run claims the deposit, at its time; the answer does not come back. The
    // scheduler gives the run up at its deadline, and the run goes on in the background.
    database.holdNext()
    const first = escrow.run()
    await Promise.race([
      database.reached,
      first.then(() => {
        throw new Error('the first run ended without claiming the deposit')
      }),
    ])
    const claimed = await EscrowDeposit.findByOrFail('quoteId', quoteId)
    assert.equal(claimed.state, 'confirm_requested')

    // A later run of the same process, when the claim's time reads as an abandoned attempt.
    clock = start.plus({ minutes: 11 })
    const second = await escrow.run()

    database.release()
    const firstSummary = await first

    assert.deepEqual(announced, [quoteId], 'payouts:escrow_confirmed fired once')
    assert.equal(confirmRequests, 1, 'one confirmation sent')
    assert.equal(firstSummary.checked + second.checked, 1, 'claimed by one run')
    assert.equal(emu.admin.quote(quoteId)!.status, 'deposit_confirmed')
    assert.equal((await EscrowDeposit.findByOrFail('quoteId', quoteId)).state, 'confirmed')
  })
})

test.group(
  `Jobs | escrow fallback, a deposit changed between its read and its claim (${TEST_DB})`,
  () => {
    test('the claimed deposit is read again: the transaction recorded in between is confirmed', async ({
      assert,
      cleanup,
    }) => {
      // Once armed, the answer to the run's read of due deposits waits for `between` to run.
      let between: (() => Promise<unknown>) | undefined
      let readSent = false
      const { db } = await setupDatabase(cleanup, 'escrow_reread', {
        connection: {
          ...connectionConfig('escrow_reread'),
          ...(TEST_DB === 'sqlite' && { pool: { min: 1, max: 2 } }),
          postProcessResponse: (response: unknown) => {
            if (!readSent || !between) return response
            const change = between
            ;[readSent, between] = [false, undefined]
            return change().then(() => response)
          },
        },
      })
      db.connection()
        .getWriteClient()
        .on('query', (query: { sql: string }) => {
          const sql = query.sql.trim().toLowerCase()
          if (
            between &&
            sql.startsWith('select') &&
            sql.includes(EscrowDeposit.table.toLowerCase())
          )
            readSent = true
        })
      const emu = await startEmulator(cleanup, { rateLimits: false })
      const client = testClient(cleanup, emu)
      const recipient = emu.admin.seedRecipient()
      const executor = new PayoutExecutor({ db, ledger: new PayoutLedger(db), client })
      const { result } = await executor.execute({
        fromCurrency: 'USDC',
        toCurrency: 'MXN',
        amount: 100,
        recipientId: recipient.id,
        walletAddress: '0x' + '8'.repeat(40),
      })
      const { quoteId } = result
      // A transaction that pays too little: the service refuses to confirm it.
      const wrong = emu.admin.simulateDeposit({ quoteId, detect: false, amountAtomic: 1n })
      const right = emu.admin.simulateDeposit({ quoteId, detect: false })

      const sent: string[] = []
      const deposits = new EscrowDeposits({
        db,
        client: {
          getQuoteStatus: client.getQuoteStatus.bind(client),
          confirmEscrowDeposit: (input) => {
            sent.push(input.txHash)
            return client.confirmEscrowDeposit(input)
          },
        },
      })
      const start = DateTime.now()
      const escrow = new EscrowFallback({ db, deposits, now: () => start })
      const confirmedAt = start.minus({ minutes: 30 })
      await deposits.record({ quoteId, txHash: wrong.txHash, confirmedAt })
      // The host records the right transaction after the run read the deposit, before its claim.
      between = () => deposits.record({ quoteId, txHash: right.txHash, confirmedAt })

      const summary = await escrow.run()

      assert.isUndefined(between, 'the change ran between the read and the claim')
      assert.deepEqual(sent, [right.txHash], 'confirmed with the transaction recorded last')
      assert.equal(summary.confirmed, 1)
      const deposit = await EscrowDeposit.findByOrFail('quoteId', quoteId)
      assert.deepInclude(deposit.toJSON(), { state: 'confirmed', txHash: right.txHash })
      assert.equal(emu.admin.quote(quoteId)!.status, 'deposit_confirmed')
    })
  }
)
