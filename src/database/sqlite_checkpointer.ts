import { createRequire } from 'node:module'
import { join, resolve as resolvePath } from 'node:path'
import { Worker } from 'node:worker_threads'
import debug from '../debug.ts'

/**
 * The checkpointer's thread: its own better-sqlite3 connection to the file, a PASSIVE
 * checkpoint every `intervalMs` (it never waits for a lock and never blocks a writer: it
 * copies what it can and leaves the rest for the next one), until told to stop. CommonJS
 * source, run with `eval`, so that it needs no file of its own next to the built one.
 */
const THREAD_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads')
const Database = require(workerData.driver)
const db = new Database(workerData.filename, { fileMustExist: true })
let timer
let stopped = false
let runs = 0
let pages = 0
const run = () => {
  if (stopped) return
  try {
    const [result] = db.pragma('wal_checkpoint(PASSIVE)')
    runs++
    pages += result ? Number(result.checkpointed) || 0 : 0
  } catch (error) {
    parentPort.postMessage({ type: 'error', message: String(error && error.message) })
  }
  timer = setTimeout(run, workerData.intervalMs)
}
parentPort.on('message', (message) => {
  if (message === 'stats') return parentPort.postMessage({ type: 'stats', runs, pages })
  if (message !== 'stop') return
  stopped = true
  clearTimeout(timer)
  try { db.close() } catch {}
  parentPort.postMessage({ type: 'stopped', runs, pages })
  parentPort.close()
})
run()
`

/** The path of the better-sqlite3 that knex loads for the app (or the nearest one). */
function driverPath(): string | null {
  const bases = [import.meta.url]
  try {
    bases.push(createRequire(import.meta.url).resolve('knex'))
  } catch {}
  bases.push(join(process.cwd(), 'package.json'))
  for (const base of bases) {
    try {
      return createRequire(base).resolve('better-sqlite3')
    } catch {}
  }
  return null
}

export interface CheckpointerStats {
  /** Checkpoints run so far. */
  runs: number
  /** WAL pages they copied into the database file. */
  pages: number
}

/**
 * Checkpoints a SQLite file in WAL mode from a thread of its own. SQLite's automatic
 * checkpoint runs inside the commit that takes the log past 1,000 pages: it copies the log
 * into the database file and syncs it, and better-sqlite3 is synchronous, so the event loop
 * of the process that committed stops meanwhile (10-100 ms here, under a webhook load), and
 * every acknowledgement waiting on it with it. Checkpointed from here every `intervalMs`,
 * the log never reaches that size, the commits never checkpoint, and the copying and its
 * sync happen beside the event loop. PASSIVE: it takes no lock a writer or a reader waits for.
 */
export class SqliteCheckpointer {
  #worker: Worker
  #stopped?: Promise<CheckpointerStats>
  /** Set once the thread has ended (stopped, or failed: a file it could not open). */
  #exited = false

  private constructor(worker: Worker) {
    this.#worker = worker
    worker.once('exit', () => (this.#exited = true))
  }

  /**
   * Starts a checkpointer on `filename` (a WAL database file that exists); null when the
   * driver can't be found from here (the app then keeps SQLite's automatic checkpoints).
   */
  static start(
    filename: string,
    options: { intervalMs: number; onError?: (message: string) => void }
  ): SqliteCheckpointer | null {
    const driver = driverPath()
    if (!driver) return null
    const worker = new Worker(THREAD_SOURCE, {
      eval: true,
      workerData: { filename, driver, intervalMs: options.intervalMs },
      // Nothing of the app's (loaders, flags) is needed in it.
      execArgv: [],
      env: {},
    })
    // It never holds the process open: a stop that never came ends with the process.
    worker.unref()
    worker.on('message', (message: { type: string; message?: string }) => {
      if (message.type === 'error') {
        debug('sqlite checkpoint failed: %s', message.message)
        options.onError?.(message.message ?? '')
      }
    })
    // A thread that fails ends: the app keeps SQLite's own checkpoints, which it never lost.
    worker.on('error', (error) => {
      debug('sqlite checkpointer stopped: %s', error.message)
      options.onError?.(error.message)
    })
    return new SqliteCheckpointer(worker)
  }

  /** What it did so far. */
  stats(): Promise<CheckpointerStats> {
    return this.#ask('stats')
  }

  /** Stops the thread and closes its connection; what it did. Idempotent. */
  stop(): Promise<CheckpointerStats> {
    this.#stopped ??= this.#ask('stopped').finally(() => void this.#worker.terminate())
    return this.#stopped
  }

  #ask(type: 'stats' | 'stopped'): Promise<CheckpointerStats> {
    // A thread that ended answers nothing and emits no second 'exit': waiting would hang
    // the app's shutdown.
    if (this.#exited) return Promise.resolve({ runs: 0, pages: 0 })
    return new Promise((resolve) => {
      const onMessage = (message: { type: string; runs: number; pages: number }) => {
        if (message.type !== type) return
        done({ runs: message.runs, pages: message.pages })
      }
      const onExit = () => done({ runs: 0, pages: 0 })
      const done = (stats: CheckpointerStats) => {
        this.#worker.off('message', onMessage)
        this.#worker.off('exit', onExit)
        resolve(stats)
      }
      this.#worker.on('message', onMessage)
      this.#worker.once('exit', onExit)
      this.#worker.postMessage(type === 'stats' ? 'stats' : 'stop')
    })
  }
}

/** The checkpointers of this process, one per database file, with how many services use each. */
const running = new Map<string, { checkpointer: SqliteCheckpointer; users: number }>()

/** How many files this process checkpoints from a thread now (tests, `payouts:status`). */
export function runningCheckpointers(): number {
  return running.size
}

/** What `checkpointsFor` needs of a connection: Lucid's query client. */
interface SqliteClient {
  dialect: { name: string }
  getWriteClient(): { client: { config: { connection?: unknown } } }
  rawQuery(sql: string): Promise<unknown>
}

/** The database file a better-sqlite3 connection opens, or null (in memory, another driver). */
function fileOf(client: SqliteClient): string | null {
  if (client.dialect.name !== 'better-sqlite3') return null
  const connection = client.getWriteClient().client.config.connection as
    { filename?: unknown } | undefined
  const filename = connection?.filename
  if (typeof filename !== 'string' || filename === '' || filename === ':memory:') return null
  if (filename.startsWith('file:')) return null
  return resolvePath(filename)
}

/**
 * Checkpoints the connection's database file from a thread while the returned release has
 * not been called, when it is a better-sqlite3 file in WAL mode (the journal docs/production.md
 * sets) and `intervalMs` is not 0; otherwise does nothing. Services of one process on
 * one file share one thread; the last release stops it.
 */
export async function checkpointsFor(
  client: SqliteClient,
  intervalMs: number,
  onError?: (message: string) => void
): Promise<() => Promise<void>> {
  const nothing = async () => {}
  if (intervalMs <= 0) return nothing
  const filename = fileOf(client)
  if (!filename) return nothing
  const rows = (await client.rawQuery('PRAGMA journal_mode')) as Array<{ journal_mode?: string }>
  if (String(rows?.[0]?.journal_mode).toLowerCase() !== 'wal') return nothing
  let entry = running.get(filename)
  if (!entry) {
    const checkpointer = SqliteCheckpointer.start(filename, { intervalMs, onError })
    if (!checkpointer) return nothing
    entry = { checkpointer, users: 0 }
    running.set(filename, entry)
  }
  entry.users++
  let released = false
  const held = entry
  return async () => {
    if (released) return
    released = true
    if (--held.users > 0) return
    if (running.get(filename) === held) running.delete(filename)
    await held.checkpointer.stop()
  }
}

/** The checkpointer of a file, while one runs (tests). */
export function checkpointerOf(filename: string): SqliteCheckpointer | null {
  return running.get(resolvePath(filename))?.checkpointer ?? null
}
