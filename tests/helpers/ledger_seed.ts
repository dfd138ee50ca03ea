import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import { tableNames } from '../../src/database/schema.ts'

/**
 * A ledger that has run for a while, seeded in bulk (one INSERT ... SELECT per table over a
 * generated series: PostgreSQL's generate_series, a recursive CTE on SQLite and MySQL), for
 * the query-plan test and `npm run bench:growth`.
 *
 * Payout x (1-based) is `00000000-0000-4000-8000-<x, 12 digits>` (read id `po_<x>`):
 * - one in 50 is `processing`, created within the last hour and observed within the last
 *   minute (in flight, not stale); one in 5,000 is `pending` and created long ago (stuck);
 *   the rest are `completed` or `failed`, created and last observed over `spanDays`, older
 *   ids older;
 * - `eventsPerPayout` payout_events rows each, all notified;
 * - one in three is a stablecoin payout with an escrow deposit (`confirmed` by one of its
 *   events when the payout is terminal, `awaiting_deposit` otherwise);
 * - `inboxPerPayout` processed inbox rows each, received over `spanDays` (older ids older),
 *   with a body of `bodyBytes` base64 characters.
 *
 * `seedLedger(client, prefix, { from, to })` adds payouts from+1..to (and their rows), so
 * a bench grows the same ledger size by size. Times are spread over `horizon` payouts (the
 * largest size the caller will reach), so each row keeps its age as the ledger grows.
 */
export interface SeedOptions {
  from: number
  to: number
  horizon: number
  eventsPerPayout?: number
  inboxPerPayout?: number
  spanDays?: number
  bodyBytes?: number
}

type Dialect = 'pg' | 'sqlite' | 'mysql'

function dialectOf(client: QueryClientContract): Dialect {
  const name = client.dialect.name
  if (name === 'postgres') return 'pg'
  if (name === 'mysql') return 'mysql'
  return 'sqlite'
}

/** Rows per INSERT on MySQL. */
const MYSQL_CHUNK = 100_000

/** SQL fragments that differ between the three stores. */
function sqlOf(dialect: Dialect, options: { sequenceEngine?: boolean; mariadb?: boolean } = {}) {
  return {
    /** Strings joined. */
    concat: (...parts: string[]) =>
      dialect === 'mysql' ? `CONCAT(${parts.join(', ')})` : parts.join(' || '),
    /** An integer as 12 digits. */
    pad: (expr: string) =>
      dialect === 'sqlite'
        ? `printf('%012d', ${expr})`
        : dialect === 'pg'
          ? `lpad((${expr})::text, 12, '0')`
          : `LPAD(${expr}, 12, '0')`,
    /** The timestamp `seconds` (an SQL expression) before now, in the column's format. */
    ago: (seconds: string) =>
      dialect === 'sqlite'
        ? `strftime('%Y-%m-%d %H:%M:%S', 'now', '-' || CAST(${seconds} AS INTEGER) || ' seconds')`
        : dialect === 'pg'
          ? `(now() - ((${seconds}) * interval '1 second'))`
          : `(UTC_TIMESTAMP() - INTERVAL FLOOR(${seconds}) SECOND)`,
    /** Integer division. */
    div: (a: string, b: string) =>
      dialect === 'pg'
        ? `((${a}) / (${b}))`
        : dialect === 'mysql'
          ? `((${a}) DIV (${b}))`
          : `((${a}) / (${b}))`,
    /**
     * INSERT INTO `table` (`columns`) SELECT `select` FROM a series x = from+1..to: one
     * statement on PostgreSQL and SQLite; on MySQL one per `MYSQL_CHUNK` rows (InnoDB keeps a
     * transaction's undo until it commits, and a recursive CTE materialises its rows), over
     * MariaDB's SEQUENCE engine (`seq_1_to_n`) where there is one.
     */
    insertSeries: (
      table: string,
      columns: string[],
      select: string[],
      from: number,
      to: number
    ): string[] => {
      const cols = columns.join(', ')
      const values = select.join(', ')
      if (dialect === 'pg') {
        return [
          `INSERT INTO ${table} (${cols}) SELECT ${values} FROM generate_series(${from + 1}, ${to}) AS s(x)`,
        ]
      }
      const recursive = (a: number, b: number) =>
        `WITH RECURSIVE s(x) AS (SELECT ${a} UNION ALL SELECT x + 1 FROM s WHERE x < ${b})`
      if (dialect === 'sqlite') {
        return [`${recursive(from + 1, to)} INSERT INTO ${table} (${cols}) SELECT ${values} FROM s`]
      }
      const statements: string[] = []
      for (let a = from + 1; a <= to; a += MYSQL_CHUNK) {
        const b = Math.min(to, a + MYSQL_CHUNK - 1)
        // Without the SEQUENCE engine, the recursion's limit (1,000 by default) is raised for
        // the statement itself: a SET SESSION would reach one connection of the pool only.
        statements.push(
          options.sequenceEngine
            ? `INSERT INTO ${table} (${cols}) SELECT ${values} FROM (SELECT seq AS x FROM seq_${a}_to_${b}) AS s`
            : options.mariadb
              ? `SET STATEMENT max_recursive_iterations = ${MYSQL_CHUNK} FOR INSERT INTO ${table} (${cols}) ${recursive(a, b)} SELECT ${values} FROM s`
              : `INSERT /*+ SET_VAR(cte_max_recursion_depth = ${MYSQL_CHUNK}) */ INTO ${table} (${cols}) ${recursive(a, b)} SELECT ${values} FROM s`
        )
      }
      return statements
    },
  }
}

/** The SQL of `client`'s store (on MySQL, whether MariaDB's SEQUENCE engine is there). */
async function sqlFor(client: QueryClientContract) {
  const dialect = dialectOf(client)
  if (dialect !== 'mysql') return sqlOf(dialect)
  const [rows] = await client.rawQuery(
    "SELECT VERSION() AS version, (SELECT COUNT(*) FROM information_schema.ENGINES WHERE ENGINE = 'SEQUENCE' AND SUPPORT IN ('YES', 'DEFAULT')) AS n"
  )
  return sqlOf(dialect, {
    sequenceEngine: Number(rows[0].n) > 0,
    mariadb: String(rows[0].version).includes('MariaDB'),
  })
}

/** Runs each statement in turn (each its own transaction). */
async function runAll(client: QueryClientContract, statements: string[]) {
  for (const statement of statements) await client.rawQuery(statement)
}

/** A base64 body of about `bytes` characters. */
export function seedBody(bytes = 600) {
  return 'eyJ0eXBlIjoicGF5b3V0LnVwZGF0ZWQi'.repeat(Math.ceil(bytes / 32))
}

/** The UUID of seeded payout `x`. */
export function seededPayoutUuid(x: number) {
  return `00000000-0000-4000-8000-${String(x).padStart(12, '0')}`
}

/** Adds payouts from+1..to, their events, escrow deposits and inbox rows. */
export async function seedLedger(
  client: QueryClientContract,
  prefix: string,
  options: SeedOptions
) {
  const { from, to, horizon } = options
  if (to <= from) return
  const events = options.eventsPerPayout ?? 7
  const inbox = options.inboxPerPayout ?? 10
  const span = (options.spanDays ?? 33) * 86_400
  const body = seedBody(options.bodyBytes)
  const dialect = dialectOf(client)
  const sql = await sqlFor(client)
  const t = tableNames(prefix)
  const run = (statements: string[]) => runAll(client, statements)

  const uuid = (x: string) => sql.concat(`'00000000-0000-4000-8000-'`, sql.pad(x))
  // Older ids older: payout x was created (horizon - x) / horizon of the span ago.
  const age = (x: string, total: number) => `(${total} - (${x})) * ${span / total} + 120`
  const inFlight = (x: string) => `(${x}) % 50 = 0`
  const stuck = (x: string) => `(${x}) % 5000 = 25`
  const status = (x: string) =>
    `CASE WHEN ${inFlight(x)} THEN 'processing' WHEN ${stuck(x)} THEN 'pending' WHEN (${x}) % 20 = 7 THEN 'failed' ELSE 'completed' END`
  const created = (x: string) =>
    `CASE WHEN ${inFlight(x)} THEN ${sql.ago(`(${x}) % 3600`)} ELSE ${sql.ago(age(x, horizon))} END`
  const observed = (x: string) =>
    `CASE WHEN ${inFlight(x)} OR ${stuck(x)} THEN ${sql.ago(`(${x}) % 60`)} ELSE ${sql.ago(age(x, horizon))} END`
  const flow = (x: string) =>
    `CASE WHEN (${x}) % 3 = 0 THEN 'stablecoin_to_fiat' ELSE 'fiat_to_fiat' END`

  await run(
    sql.insertSeries(
      t.payouts,
      [
        'payout_uuid',
        'read_id',
        'owner_id',
        'flow',
        'status',
        'step',
        'quote_id',
        'source_amount',
        'source_currency',
        'payout_amount',
        'payout_currency',
        'last_observed_at',
        'status_changed_at',
        'provider_metadata_due_at',
        'created_at',
        'updated_at',
      ],
      [
        uuid('x'),
        sql.concat(`'po_'`, sql.pad('x')),
        sql.concat(`'owner_'`, `(x % 1000)`),
        flow('x'),
        status('x'),
        `CASE WHEN ${inFlight('x')} THEN 'initiated' ELSE NULL END`,
        sql.concat(`'q_'`, sql.pad('x')),
        `'100.00'`,
        `'USD'`,
        `'92.50'`,
        `'EUR'`,
        observed('x'),
        observed('x'),
        // Ended, its routing detail never read: marked as the ledger marks it.
        `CASE WHEN ${inFlight('x')} OR ${stuck('x')} THEN NULL ELSE ${observed('x')} END`,
        created('x'),
        observed('x'),
      ],
      from,
      to
    )
  )

  // Event y belongs to payout ceil(y / events).
  const owner = (y: string) => sql.div(`(${y}) - 1`, String(events)) + ' + 1'
  await run(
    sql.insertSeries(
      t.payoutEvents,
      [
        'payout_uuid',
        'source',
        'event_type',
        'status',
        'applied',
        'delivery_id',
        'observed_at',
        'notified_at',
        'created_at',
      ],
      [
        uuid(owner('x')),
        `'webhook'`,
        `'payout.updated'`,
        `'processing'`,
        dialect === 'pg' ? 'true' : '1',
        sql.concat(`'dlv_'`, sql.pad('x')),
        sql.ago(age('x', horizon * events)),
        sql.ago(age('x', horizon * events)),
        sql.ago(age('x', horizon * events)),
      ],
      from * events,
      to * events
    )
  )

  // Deposits of the stablecoin payouts (x = 3z).
  const terminal = (x: string) => `NOT (${inFlight(x)} OR ${stuck(x)})`
  await run(
    sql.insertSeries(
      t.escrowDeposits,
      [
        'quote_id',
        'payout_uuid',
        'chain_id',
        'amount_atomic',
        'tx_hash',
        'tx_confirmed_at',
        'state',
        'attempts',
        'confirmed_by_event_id',
        'created_at',
        'updated_at',
      ],
      [
        sql.concat(`'q_'`, sql.pad('3 * x')),
        uuid('3 * x'),
        '8453',
        `'100000000'`,
        `CASE WHEN ${terminal('3 * x')} THEN ${sql.concat(`'0x'`, sql.pad('3 * x'))} ELSE NULL END`,
        `CASE WHEN ${terminal('3 * x')} THEN ${created('3 * x')} ELSE NULL END`,
        `CASE WHEN ${terminal('3 * x')} THEN 'confirmed' ELSE 'awaiting_deposit' END`,
        '0',
        `CASE WHEN ${terminal('3 * x')} THEN (3 * x - 1) * ${events} + 2 ELSE NULL END`,
        created('3 * x'),
        observed('3 * x'),
      ],
      Math.floor(from / 3),
      Math.floor(to / 3)
    )
  )

  await insertInbox(client, prefix, {
    from: from * inbox,
    to: to * inbox,
    horizon: horizon * inbox,
    span,
    body,
  })
}

/**
 * Processed inbox rows x = from+1..to, received (horizon - x) / horizon of `span` seconds
 * ago: the seed's inbox, and fresh rows when `horizon` is `to` (a refill after pruning).
 */
export async function insertInbox(
  client: QueryClientContract,
  prefix: string,
  options: { from: number; to: number; horizon: number; span: number; body: string }
) {
  const { from, to, horizon, span, body } = options
  const sql = await sqlFor(client)
  const received = sql.ago(`(${horizon} - x) * ${span / horizon} + 120`)
  await runAll(
    client,
    sql.insertSeries(
      tableNames(prefix).webhookDeliveries,
      [
        'delivery_id',
        'event_type',
        'raw_body',
        'source',
        'state',
        'attempts',
        'received_at',
        'processed_at',
      ],
      [
        sql.concat(`'seed_'`, sql.pad('x')),
        `'payout.updated'`,
        `'${body}'`,
        `'webhook'`,
        `'processed'`,
        '1',
        received,
        received,
      ],
      from,
      to
    )
  )
}

/** Refreshes the planner's statistics of the plugin's tables. */
export async function analyzeLedger(client: QueryClientContract, prefix: string) {
  const dialect = dialectOf(client)
  const tables = Object.values(tableNames(prefix))
  if (dialect === 'sqlite') {
    await client.rawQuery('ANALYZE')
    return
  }
  for (const table of tables) {
    await client.rawQuery(dialect === 'pg' ? `ANALYZE ${table}` : `ANALYZE TABLE ${table}`)
  }
}
