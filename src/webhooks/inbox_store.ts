import type { Database } from '@adonisjs/lucid/database'
import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import type {
  InboxContext,
  InboxDeliveryInput,
  InboxRow,
  InboxStoreOptions,
  InboxVerdict,
} from './inbox_context.ts'
import { accountOf } from './inbox_context.ts'
import { InboxInserts } from './inbox_inserts.ts'
import * as claims from './inbox_claims.ts'
import * as replay from './inbox_replay.ts'
import type { RequeueFilter } from './inbox_replay.ts'

export type {
  InboxDeliveryInput,
  InboxRow,
  InboxStoreOptions,
  InboxVerdict,
} from './inbox_context.ts'
export type { RequeueFilter } from './inbox_replay.ts'

/**
 * The durable inbox (`<prefix>webhook_deliveries`) of one account (`options.account`): the
 * accounts share the table, and a delivery id is unique within an account. Insert is the
 * only work on the webhook hot path, committed in groups; claiming uses a lease
 * (`next_attempt_at`) so a row held by a process that died is picked up again, and a
 * conditional update so two instances never both claim it.
 */
export class InboxStore {
  readonly #context: InboxContext
  readonly #inserts: InboxInserts

  constructor(
    private db: Database,
    private table: string,
    private connection?: string,
    private options: InboxStoreOptions = {}
  ) {
    this.#context = {
      table: this.table,
      account: accountOf(this.options),
      options: this.options,
      client: () => this.db.connection(this.connection),
    }
    this.#inserts = new InboxInserts(this.#context)
  }

  /** The account whose rows it stores and claims. */
  get account(): string {
    return this.#context.account
  }

  /** Whether its insert waits for another process's SQLite lock off the event loop. */
  get waitsForLocksOffLoop(): boolean {
    return this.#context.options.lockWaitOffLoop === true
  }

  /**
   * Persists a delivery; a Svc-Delivery-Id seen before is reported as a duplicate. It
   * resolves only once the row is committed. Deliveries arriving together share one
   * statement and one commit (group commit): at 500/s a commit per delivery queues behind
   * the disk's fsync, a commit per batch does not.
   */
  insert(input: InboxDeliveryInput): Promise<'stored' | 'duplicate'> {
    return this.#inserts.insert(input)
  }

  /**
   * Claims up to `limit` rows that are due: new ones, failed ones whose backoff expired,
   * and ones whose processing lease expired (the process holding them died). The claim is
   * a conditional update, so only one instance wins each row: one UPDATE ... RETURNING for
   * the batch where the dialect has it, else one per row.
   */
  claimDue(now: Date, limit: number, leaseMs: number): Promise<InboxRow[]> {
    return claims.claimDue(this.#context, now, limit, leaseMs)
  }

  /**
   * Whether `processDueInTransaction` works here: with UPDATE ... RETURNING, or with
   * `SELECT ... FOR UPDATE SKIP LOCKED` (MySQL 8, MariaDB 10.6), unless row by row is forced.
   */
  get claimsInTransaction(): boolean {
    return claims.claimsInTransaction(this.#context, this.#context.client())
  }

  /**
   * Claims up to `limit` due rows inside a transaction, hands them to `work` in that same
   * transaction, and records each verdict there: the rows are done exactly when the work
   * commits, and untouched if it rolls back. No lease is needed: on PostgreSQL the claimed
   * rows stay locked until COMMIT and other instances skip them; SQLite has one writer.
   * Resolves null when nothing is due.
   */
  processDueInTransaction(
    now: Date,
    limit: number,
    work: (trx: TransactionClientContract, rows: InboxRow[]) => Promise<InboxVerdict[]>
  ): Promise<{ rows: InboxRow[]; verdicts: InboxVerdict[] } | null> {
    return claims.processDueInTransaction(this.#context, now, limit, work)
  }

  /**
   * Processes one row claimed by `claimDue` in a transaction of its own: marks it processed
   * first, then hands the transaction to `work`, so the row is done exactly when its effects
   * commit (a process killed after COMMIT never applies it again), and untouched if `work`
   * throws. The mark holds only while the claim does (the row still `processing` at the
   * claim's attempt): a row whose lease expired and that another process claimed since is
   * left to it, and this resolves null without running `work`.
   */
  processClaimed<T>(
    row: Pick<InboxRow, 'id' | 'attempts'>,
    now: Date,
    work: (trx: TransactionClientContract) => Promise<{ note: string | null; value: T }>
  ): Promise<{ value: T } | null> {
    return claims.processClaimed(this.#context, row, now, work)
  }

  /**
   * Extends the lease of claimed rows to `until`, where the claim still holds (each row
   * `processing` at its claim's attempt); answers how many it extended.
   */
  renewLeases(rows: Array<Pick<InboxRow, 'id' | 'attempts'>>, until: Date): Promise<number> {
    return claims.renewLeases(this.#context, rows, until)
  }

  /**
   * Marks rows done in one statement; `note` records why an authentic but unusable
   * delivery was skipped.
   */
  markProcessed(ids: number[], note: string | null = null): Promise<void> {
    return claims.markProcessed(this.#context, ids, note)
  }

  /**
   * Records a failure: retried at `retryAt`, or dead-lettered when it is null. Given the
   * claim (`attempts`), only while it holds: a row another process claimed since is its.
   */
  markFailed(
    id: number,
    error: string,
    retryAt: Date | null,
    claim?: { attempts: number }
  ): Promise<void> {
    return claims.markFailed(this.#context, id, error, retryAt, claim)
  }

  /**
   * Puts matching rows back in the queue (for `payouts:replay`). Processed rows move only
   * with `force`; re-applying them is safe, the state machine ignores what it has seen.
   */
  requeue(filter: RequeueFilter): Promise<number[]> {
    return replay.requeue(this.#context, filter)
  }

  /** States of the given rows, after a replay. */
  statesOf(ids: number[]): Promise<string[]> {
    return replay.statesOf(this.#context, ids)
  }
}
