import { test } from '@japa/runner'
import fc from 'fast-check'
import { DateTime, Settings } from 'luxon'
import type { PayoutsClient } from '../../src/client/main.ts'
import { tableNames } from '../../src/database/schema.ts'
import { batchKeyOf } from '../../src/ledger/batch_keys.ts'
import { PayoutExecutor } from '../../src/ledger/payout_executor.ts'
import { PayoutLedger } from '../../src/ledger/payout_ledger.ts'
import { Pruner } from '../../src/ledger/pruning.ts'
import { ExecutionIntent, Payout } from '../../src/models/main.ts'
import type { PayoutsEmulator } from '../../src/emulator/main.ts'
import { executeBodies, startEmulator, testClient } from '../emulator/helpers.ts'
import { setupDatabase, TEST_DB } from '../helpers/database.ts'
import { startRecordingProxy } from '../helpers/recording_proxy.ts'

/**
 * The README's first promise across days, as a model-based test: random sequences (seeded)
 * of executes and batches with the app's own keys, lost answers, crashes before and after
 * sending, time advances of minutes to days on the emulator's clock, prune runs, recovery runs
 * and process restarts. After every step: the service never holds two payouts for one key (nor
 * for one row of a batch's chunk); an answer the app once got for a key (or a batch's row) is
 * the answer it gets again; every ledger row is a payout the service holds, and every
 * succeeded intent (a chunk: each of its rows the service made) has its row; no change fires
 * twice. `MODEL_RUNS` sets the number of sequences (the chaos run uses more).
 */

const KEYS = 2
/** Batch keys, each for rows of its own, sent in chunks of 2: three chunks. */
const BATCHES = 2
const BATCH_ROWS = 5
const CHUNK_SIZE = 2
/** The row of each batch the service refuses (a recipient it does not know). */
const REFUSED_ROW = 3
const HOUR = 3_600_000
const RUNS = Number(process.env.MODEL_RUNS ?? 20)
const SEED = Number(process.env.MODEL_SEED ?? 20261126)

interface World {
  run: number
  emu: PayoutsEmulator
  db: Awaited<ReturnType<typeof setupDatabase>>['db']
  prefix: string
  client: PayoutsClient
  proxy: Awaited<ReturnType<typeof startRecordingProxy>>
  ledger: PayoutLedger
  executor: PayoutExecutor
  bodies: Array<Record<string, unknown>>
  /** The payout id the app was answered for each key, once it was. */
  answered: Map<number, string>
  /** Whether each key was first used with the other body. */
  firstBody: Map<number, boolean>
  /** eventIds of the changes the ledger fired in this process. */
  fired: number[]
  steps: string[]
  /** The recipient of the run's payouts. */
  recipientId: string
  /** Each batch key's rows (amounts distinct across the run's rows). */
  batchRows: Array<Array<Record<string, unknown>>>
  /** Per batch key, per row: `created:<payoutId>` or `refused:<code>`, once answered. */
  batchAnswered: Map<number, Map<number, string>>
  /** Whether each batch key was first used with the other rows. */
  batchFirstRows: Map<number, boolean>
}

type Model = { steps: number }

const key = (world: World, index: number) => `order-${world.run}-${index}-promise`
const batchKey = (world: World, index: number) => `batch-${world.run}-${index}-promise`

function newExecutor(
  world: World,
  client: Pick<PayoutsClient, 'execute'> &
    Partial<Pick<PayoutsClient, 'executeBatch'>> = world.client
) {
  return new PayoutExecutor({
    db: world.db,
    ledger: world.ledger,
    client,
    transactionTimeoutMs: 10_000,
    now: () => DateTime.fromMillis(world.emu.clock.now()),
  })
}

/** A client that "crashes" its process just before the request would leave. */
const crashingClient: Pick<PayoutsClient, 'execute'> = {
  execute: () => Promise.reject(new Error('process killed before sending')),
}

/**
 * A client whose process is killed as a batch's request is about to leave: the call never
 * returns, and nothing after it runs (`sent` settles then). The intents stay as a killed
 * process leaves them.
 */
function killedClient() {
  let reached!: () => void
  const sent = new Promise<void>((resolve) => (reached = resolve))
  const client: Pick<PayoutsClient, 'execute' | 'executeBatch'> = {
    execute: () => Promise.reject(new Error('not used')),
    executeBatch: () => {
      reached()
      return new Promise<never>(() => {})
    },
  }
  return { client, sent }
}

async function checkInvariants(world: World) {
  const context = world.steps.join(' > ')
  const mine = new Set(Array.from({ length: KEYS }, (_, index) => key(world, index)))
  const myBatches = new Set(Array.from({ length: BATCHES }, (_, index) => batchKey(world, index)))
  const atService = world.emu.admin
    .payouts()
    .filter(
      (p) => mine.has(p.idempotencyKey ?? '') || myBatches.has(batchKeyOf(p.batchKey ?? '') ?? '')
    )
  const perKey = new Map<string, number>()
  for (const payout of atService) {
    // One payout per key; per row of a chunk's key for a batch.
    const made = payout.batchKey
      ? `${payout.batchKey}#${payout.batchIndex}`
      : payout.idempotencyKey!
    perKey.set(made, (perKey.get(made) ?? 0) + 1)
  }
  for (const [idempotencyKey, count] of perKey) {
    if (count > 1)
      throw new Error(`${count} payouts at the service for ${idempotencyKey}: ${context}`)
  }
  // A batch's row is paid once, whatever keys it went under: its amount names it.
  const perRow = new Map<number, number>()
  for (const payout of world.emu.admin.payouts()) {
    if (payout.batchKey === undefined || payout.recipientId !== world.recipientId) continue
    perRow.set(payout.sourceAmount, (perRow.get(payout.sourceAmount) ?? 0) + 1)
  }
  for (const [amount, count] of perRow) {
    if (count > 1)
      throw new Error(`${count} payouts at the service for the row of ${amount}: ${context}`)
  }
  const serviceIds = new Set(atService.map((p) => p.payoutId))
  const ownerRows = await Payout.query().where('owner_id', `run-${world.run}`)
  for (const row of ownerRows) {
    if (!serviceIds.has(row.payoutUuid)) {
      throw new Error(`ledger row ${row.payoutUuid} is no payout of the service: ${context}`)
    }
  }
  const succeeded = await ExecutionIntent.query()
    .whereIn('idempotency_key', [...mine])
    .where('state', 'succeeded')
  for (const intent of succeeded) {
    const rows = ownerRows.filter((row) => row.payoutUuid === intent.payoutUuid)
    if (rows.length !== 1) {
      throw new Error(`succeeded intent ${intent.id} has ${rows.length} ledger rows: ${context}`)
    }
  }
  const chunks = await ExecutionIntent.query()
    .where('flow', 'batch')
    .where('state', 'succeeded')
    .where('owner_id', `run-${world.run}`)
  for (const chunk of chunks) {
    const results = (chunk.response as { results: Array<{ success: boolean; data?: any }> }).results
    for (const row of results.filter((result) => result.success)) {
      const rows = ownerRows.filter((payout) => payout.payoutUuid === row.data.payoutId)
      if (rows.length !== 1) {
        throw new Error(`a row of chunk ${chunk.id} has ${rows.length} ledger rows: ${context}`)
      }
    }
  }
  if (new Set(world.fired).size !== world.fired.length) {
    throw new Error(`a change fired twice in one process: ${context}`)
  }
}

/** One step of the sequence, with the check of what it answered. */
class Step implements fc.AsyncCommand<Model, World> {
  constructor(
    readonly label: string,
    readonly act: (world: World) => Promise<void>
  ) {}
  check() {
    return true
  }
  async run(model: Model, world: World) {
    model.steps++
    world.steps.push(this.label)
    await this.act(world)
    await checkInvariants(world)
  }
  toString() {
    return this.label
  }
}

/**
 * The app calls execute with one of its keys: with the body it first used the key for, or by
 * mistake another one; or its process is killed just before the request leaves.
 */
function executeStep(index: number, otherBody: boolean, crash: boolean) {
  const verb = crash ? 'crash-before-send' : 'execute'
  const label = `${verb}(${index}${otherBody ? ', other body' : ''})`
  return new Step(label, async (world) => {
    const variant = world.firstBody.get(index) ?? otherBody
    world.firstBody.set(index, variant)
    const body = otherBody ? { ...world.bodies[index], amount: 150 } : world.bodies[index]
    const caller = crash ? newExecutor(world, crashingClient) : world.executor
    const before = world.emu.admin.payouts().length
    let outcome: { payoutId: string } | { error: any }
    try {
      const { result } = await caller.execute(body as any, {
        idempotencyKey: key(world, index),
        ownerId: `run-${world.run}`,
      })
      outcome = { payoutId: result.payoutId }
    } catch (error) {
      outcome = { error }
    }
    if (otherBody !== variant) {
      // Another body under a used key: refused, whatever the key's age, and nothing sent.
      const code = 'error' in outcome ? outcome.error.code : 'accepted'
      if (code !== 'E_PAYOUTS_IDEMPOTENCY_KEY_REUSED') {
        throw new Error(
          `another body under a used key: ${code} ${'error' in outcome ? outcome.error.message : ''}: ${world.steps.join(' > ')}`
        )
      }
      if (world.emu.admin.payouts().length !== before) throw new Error('a refusal sent')
      return
    }
    const earlier = world.answered.get(index)
    if ('payoutId' in outcome) {
      if (earlier && earlier !== outcome.payoutId) {
        throw new Error(`key ${index} answered ${outcome.payoutId}, earlier ${earlier}`)
      }
      world.answered.set(index, outcome.payoutId)
      return
    }
    // An answer the app once got is answered again, at any age: pruning never forgets it.
    if (earlier && !crash) throw outcome.error
    if (crash) {
      // The crash left the intent as a killed process leaves it: pending, attempt counted.
      await ExecutionIntent.query()
        .where('idempotency_key', key(world, index))
        .whereIn('state', ['unknown', 'pending'])
        .update({ state: 'pending' })
    }
  })
}

/**
 * The app executes one of its batches (its rows, or by mistake other rows under the key), or
 * its process is killed as one of the batch's requests is about to leave.
 */
function batchStep(index: number, otherRows: boolean, crash: boolean) {
  const verb = crash ? 'batch-killed' : 'batch'
  const label = `${verb}(${index}${otherRows ? ', other rows' : ''})`
  return new Step(label, async (world) => {
    const variant = world.batchFirstRows.get(index) ?? otherRows
    world.batchFirstRows.set(index, variant)
    const rows = world.batchRows[index].map((row, i) =>
      otherRows && i === 0 ? { ...row, amount: 900 + index } : row
    )
    const killed = crash ? killedClient() : null
    const caller = killed ? newExecutor(world, killed.client) : world.executor
    const before = world.emu.admin.payouts().length
    const call = caller
      .executeBatch(rows as any, {
        idempotencyKey: batchKey(world, index),
        ownerId: `run-${world.run}`,
        chunkSize: CHUNK_SIZE,
      })
      .then(
        (batch) => ({ batch }),
        (error) => ({ error })
      )
    const outcome = await (killed ? Promise.race([killed.sent.then(() => null), call]) : call)
    // Killed: nothing of that process runs again (a restart follows or not).
    if (outcome === null) return
    if (otherRows !== variant) {
      const code = 'error' in outcome ? outcome.error.code : 'accepted'
      if (code !== 'E_PAYOUTS_IDEMPOTENCY_KEY_REUSED') {
        throw new Error(`other rows under a used batch key: ${code}: ${world.steps.join(' > ')}`)
      }
      if (world.emu.admin.payouts().length !== before) throw new Error('a refusal sent')
      return
    }
    if ('error' in outcome) throw outcome.error
    const answered = world.batchAnswered.get(index) ?? new Map<number, string>()
    world.batchAnswered.set(index, answered)
    for (const row of outcome.batch.rows) {
      const now =
        row.outcome === 'created'
          ? `created:${row.result.payoutId}`
          : row.outcome === 'refused'
            ? `refused:${row.code}`
            : null
      const earlier = answered.get(row.index)
      // A row once answered (made, or refused by the service) is answered so again.
      if (earlier && now !== earlier) {
        throw new Error(
          `batch ${index} row ${row.index} answered ${now ?? row.outcome}, earlier ${earlier}: ${world.steps.join(' > ')}`
        )
      }
      if ((row.index === REFUSED_ROW) !== (row.outcome === 'refused') && now) {
        throw new Error(`batch ${index} row ${row.index} is ${row.outcome}`)
      }
      if (now) answered.set(row.index, now)
    }
  })
}

const loseStep = new Step('lose-next-answer', async (world) => {
  world.proxy.loseNext(1)
})

const advanceStep = (ms: number) =>
  new Step(`advance(${ms / 60_000} min)`, async (world) => {
    await world.emu.clock.advance(ms)
  })

/** The hourly prune job, with the default retention. */
const pruneStep = new Step('prune', async (world) => {
  await new Pruner({
    db: world.db,
    tables: tableNames(world.prefix),
    processedDeliveriesDays: 30,
    finishedIntentsHours: 48,
    batchSize: 500,
    statementTimeoutMs: 10_000,
    now: () => new Date(world.emu.clock.now()),
  }).prune({ deadLetters: true })
})

/** The recovery job: intents left unknown or pending for a minute. */
const recoverStep = new Step('recover', async (world) => {
  await world.executor.recover({ olderThanMs: 60_000 })
})

/** A killed process restarted: nothing of the old one's memory survives. */
const restartStep = new Step('restart', async (world) => {
  world.executor = newExecutor(world)
})

const executes = fc
  .tuple(fc.nat(KEYS - 1), fc.constantFrom(false, false, true), fc.constantFrom(false, false, true))
  .map(([index, other, crash]) => executeStep(index, other, crash))

const batches = fc
  .tuple(
    fc.nat(BATCHES - 1),
    fc.constantFrom(false, false, true),
    fc.constantFrom(false, false, true)
  )
  .map(([index, other, crash]) => batchStep(index, other, crash))

// Executes and time weigh more than the jobs: the bugs live in their interleavings.
const steps = [
  executes,
  executes,
  executes,
  batches,
  batches,
  fc.constant(loseStep),
  fc.constantFrom(5 * 60_000, HOUR, 6 * HOUR, 23 * HOUR, 25 * HOUR, 49 * HOUR).map(advanceStep),
  fc.constantFrom(25 * HOUR, 49 * HOUR, 72 * HOUR).map(advanceStep),
  fc.constant(pruneStep),
  fc.constant(recoverStep),
  fc.constant(restartStep),
]

test.group(`Ledger | the execute promise across days, model-based (${TEST_DB})`, () => {
  test('no key ever pays twice, whatever the order of executes, losses, crashes, time and prunes', async ({
    cleanup,
  }) => {
    const { db, prefix } = await setupDatabase(cleanup, 'promise')
    const emu = await startEmulator(cleanup, { rateLimits: false })
    // Every timestamp the plugin writes (Lucid's autoCreate, the executor's clock) follows the
    // emulator's clock, so days pass for the ledger as they pass for the service.
    const realNow = Settings.now
    Settings.now = () => emu.clock.now()
    cleanup(async () => {
      Settings.now = realNow
    })
    const proxy = await startRecordingProxy(cleanup, emu.baseUrl)
    // No retries: a lost answer stays lost, as after the client's last attempt.
    const client = testClient(
      cleanup,
      { apiKey: emu.apiKey, baseUrl: proxy.baseUrl },
      { retry: { maxRetries: 0 } }
    )
    let run = 0
    await fc.assert(
      fc.asyncProperty(fc.commands(steps, { maxCommands: 20, size: 'max' }), async (commands) => {
        run++
        const fired: number[] = []
        const ledger = new PayoutLedger(db, {
          onChange: (change) => void fired.push(change.eventId),
        })
        const { fiat } = executeBodies(emu)
        const world: World = {
          run,
          emu,
          db,
          prefix,
          client,
          proxy,
          ledger,
          executor: undefined as unknown as PayoutExecutor,
          bodies: Array.from({ length: KEYS }, (_, index) => ({ ...fiat, amount: 100 + index })),
          answered: new Map(),
          firstBody: new Map(),
          fired,
          steps: [],
          recipientId: fiat.recipientId,
          batchRows: Array.from({ length: BATCHES }, (_, batch) =>
            Array.from({ length: BATCH_ROWS }, (_unused, row) => ({
              ...fiat,
              amount: 200 + batch * 10 + row,
              ...(row === REFUSED_ROW
                ? { recipientId: '00000000-0000-4000-8000-000000000000' }
                : {}),
            }))
          ),
          batchAnswered: new Map(),
          batchFirstRows: new Map(),
        }
        world.executor = newExecutor(world)
        proxy.reset()
        await fc.asyncModelRun(() => ({ model: { steps: 0 }, real: world }), commands)
      }),
      {
        numRuns: RUNS,
        seed: SEED,
        endOnFailure: true,
        includeErrorInReport: true,
        examples: process.env.MODEL_NO_EXAMPLES
          ? []
          : [
              // The two cases, always run first.
              [
                [
                  executeStep(0, false, false),
                  advanceStep(49 * HOUR),
                  pruneStep,
                  executeStep(0, false, false),
                ],
              ],
              [
                [
                  loseStep,
                  executeStep(1, false, false),
                  advanceStep(30 * HOUR),
                  executeStep(1, false, false),
                ],
              ],
              // A batch's: a chunk's answer lost, then the window passes; killed mid-batch.
              [
                [
                  loseStep,
                  batchStep(0, false, false),
                  advanceStep(30 * HOUR),
                  batchStep(0, false, false),
                  batchStep(0, true, false),
                ],
              ],
              [[batchStep(1, false, true), restartStep, recoverStep, batchStep(1, false, false)]],
            ],
      }
    )
  }).timeout(600_000)
})
