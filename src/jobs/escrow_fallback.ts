import { DateTime } from 'luxon'
import type { Database } from '@adonisjs/lucid/database'
import { dbDate } from '../database/dates.ts'
import { affectedRows } from '../database/dialects.ts'
import type { EscrowDeposits } from '../ledger/escrow_deposits.ts'
import { sharedAccount } from '../ledger/accounts.ts'
import EscrowDeposit from '../models/escrow_deposit.ts'

/** What the fallback job needs: the deposits to work on, and when a deposit is due. */
export interface EscrowFallbackOptions {
  db: Database
  /** Where each claimed deposit is confirmed, refused, released or given up on. */
  deposits: EscrowDeposits
  /** The account whose deposits it claims (its deposits', which confirm them; not another). */
  account?: string
  connection?: string
  /** Minutes after on-chain confirmation before the manual fallback may be used. */
  confirmAfterMinutes?: number
  batchSize?: number
  now?: () => DateTime
}

/** What one run of the fallback did, deposit by deposit. */
export interface EscrowSummary {
  checked: number
  confirmed: number
  detected: number
  failed: number
  waiting: number
}

/**
 * The manual confirmation fallback job: a recorded deposit whose quote is still
 * awaiting_escrow_deposit N minutes after the transaction was confirmed on-chain is
 * claimed and handed to `EscrowDeposits.confirmClaimed`, which decides what to send.
 * See docs/spec-gaps.md.
 */
export class EscrowFallback {
  /** Deposits a run in this process is working on: not abandoned, whatever their age. */
  #working = new Set<number>()
  #options: Required<Omit<EscrowFallbackOptions, 'connection'>> &
    Pick<EscrowFallbackOptions, 'connection'>

  constructor(options: EscrowFallbackOptions) {
    this.#options = {
      confirmAfterMinutes: 10,
      batchSize: 50,
      now: () => DateTime.now(),
      ...options,
      account: sharedAccount(options.account, options.deposits, 'an escrow fallback'),
    }
  }

  /** One run: claims the due deposits, oldest on-chain confirmation first, one by one. */
  async run(): Promise<EscrowSummary> {
    const { db, connection, account, confirmAfterMinutes } = this.#options
    const now = this.#options.now()
    const sql = db.connection(connection)
    const due = dbDate(sql, now.minus({ minutes: confirmAfterMinutes }))
    // Recorded deposits past the wait (and past their backoff after a failed attempt), and
    // attempts that a dead process abandoned as long ago (resuming is safe: the state is
    // read first, and the service is idempotent on the quote and the transaction).
    const isDue = <Query extends { where: (...args: any[]) => Query }>(query: Query) =>
      query
        .where('account', account)
        .where((state: any) =>
          state
            .where((recorded: any) =>
              recorded
                .where('state', 'deposit_recorded')
                .where((backoff: any) =>
                  backoff
                    .whereNull('next_attempt_at')
                    .orWhere('next_attempt_at', '<=', dbDate(sql, now))
                )
            )
            .orWhere((interrupted: any) =>
              interrupted
                .where('state', 'confirm_requested')
                .where('confirm_attempted_at', '<=', due)
            )
        )
        .where('tx_confirmed_at', '<=', due)
    const deposits = await isDue(EscrowDeposit.query({ connection }))
      .orderBy('tx_confirmed_at', 'asc')
      .limit(this.#options.batchSize)
    const summary: EscrowSummary = { checked: 0, confirmed: 0, detected: 0, failed: 0, waiting: 0 }
    for (const deposit of deposits) {
      // Claimed by a conditional update, so overlapping runs (a run longer than the job's
      // interval, another instance) never both work on a deposit or both fire its event.
      // Marked as worked on before the claim is sent: a run of this process given up at
      // its deadline has claimed the deposit at its own, older, time, which a later run
      // would take for an abandoned attempt and claim again.
      if (this.#working.has(deposit.id)) continue
      this.#working.add(deposit.id)
      try {
        const claimed = await isDue(sql.from(EscrowDeposit.table).where('id', deposit.id)).update({
          state: 'confirm_requested',
          confirm_attempted_at: dbDate(sql, now),
        })
        if (affectedRows(claimed) !== 1) continue
        // Read again once claimed: the row read before the claim may be stale (the host
        // recorded another transaction, its attempts reset), and nothing changes it now.
        const current = await EscrowDeposit.query({ connection })
          .where('account', account)
          .where('id', deposit.id)
          .first()
        if (!current) continue
        summary.checked++
        summary[await this.#options.deposits.confirmClaimed(current)]++
      } finally {
        this.#working.delete(deposit.id)
      }
    }
    return summary
  }
}
