import type { TransactionClientContract } from '@adonisjs/lucid/types/database'
import { DateTime } from 'luxon'
import { isMysql, isPostgres, isSqlite } from '../database/dialects.ts'
import Payout from '../models/payout.ts'
import { Turns } from '../database/turns.ts'
import { dirtyAttributes, hydrateOriginals } from '../models/row_hydration.ts'

/**
 * Saves payout rows the caller's transaction has locked (`SELECT ... FOR UPDATE`, or held by
 * SQLite's one writer), as `row.save()` one by one would, in one UPDATE per 200 rows: the
 * same columns get the same values, `updated_at` is set as Lucid sets an `autoUpdate`
 * column, and each row is clean afterwards. One statement per row was most of an inbox
 * batch's statements (300 of 330 for 300 new payouts on PostgreSQL) and a third of its time
 * in this process, on the wire and in Lucid. Another dialect saves row by row.
 */
export async function saveLockedPayouts(
  trx: TransactionClientContract,
  rows: Iterable<Payout>,
  /** Turns of the event loop taken while it compares and prepares the rows (none: `new Turns(0)`). */
  turns: Turns = new Turns(0)
): Promise<void> {
  const all = [...rows]
  // Each row's changed attributes, read once: Lucid compares every column to compute them
  // (its own comparison, without the model's Proxy: `dirtyAttributes`).
  const changed = new Set<string>()
  const dirty: Payout[] = []
  for (const row of all) {
    const turn = turns.next()
    if (turn) await turn
    row.useTransaction(trx)
    const names = dirtyAttributes(row)
    if (names.length === 0) continue
    dirty.push(row)
    for (const name of names) changed.add(name)
  }
  if (dirty.length < 2) {
    for (const row of dirty) await row.save()
    return
  }
  // What Lucid's save does to an `autoUpdate` column of a dirty row before it writes.
  const now = DateTime.local()
  for (const row of dirty) row.updatedAt = now
  changed.add('updatedAt')
  // Every row gets each column any of them changed: a column another row changed keeps
  // this row's own value (it holds the lock, so its value is the stored one).
  const attributes = [...changed]
  const columns = attributes.map((attribute) => Payout.$getColumn(attribute)!)
  const values: Array<Record<string, unknown>> = []
  for (const row of dirty) {
    const turn = turns.next()
    if (turn) await turn
    const value: Record<string, unknown> = { id: row.id }
    columns.forEach((column, index) => {
      const attribute = attributes[index]
      const raw = row.$attributes[attribute]
      value[column.columnName] = column.prepare ? column.prepare(raw, attribute, row) : raw
    })
    values.push(value)
  }
  const names = columns.map((column) => column.columnName)
  // A row not read whole (a column it never loaded) has no value to keep: row by row.
  if (values.some((value) => names.some((name) => value[name] === undefined))) {
    for (const row of dirty) await row.save()
    return
  }
  for (let start = 0; start < values.length; start += ROWS_PER_STATEMENT) {
    const chunk = values.slice(start, start + ROWS_PER_STATEMENT)
    if (isPostgres(trx)) await updateFromJson(trx, names, chunk)
    else if (isMysql(trx)) await updateJoiningUnion(trx, names, chunk)
    else if (isSqlite(trx)) await updateFromUnion(trx, names, chunk)
    else for (const row of dirty.slice(start, start + ROWS_PER_STATEMENT)) await row.save()
  }
  for (const row of dirty) hydrateOriginals(row)
}

/**
 * Rows per statement: SQLite refuses a compound SELECT of more than 500 parts
 * (SQLITE_MAX_COMPOUND_SELECT), and 200 rows of a dozen columns stay far below every
 * dialect's bound on parameters.
 */
const ROWS_PER_STATEMENT = 200

/** `select ? as "id", ? as "status", ... union all select ...`: the rows as a derived table. */
function unionOf(columns: string[], values: Array<Record<string, unknown>>) {
  const select = `select ${columns.map(() => '? as ??').join(', ')}`
  return {
    sql: values.map(() => select).join(' union all '),
    bindings: values.flatMap((value) => columns.flatMap((column) => [value[column], column])),
  }
}

/**
 * PostgreSQL: the rows as one JSON parameter, read back as the table's own row type
 * (`json_populate_recordset`), so every value is cast to its column's type as an UPDATE of
 * that column would.
 */
async function updateFromJson(
  trx: TransactionClientContract,
  names: string[],
  values: Array<Record<string, unknown>>
) {
  const sets = names.map(() => '?? = "v".??').join(', ')
  const result = await trx.rawQuery(
    `update ?? as "t" set ${sets} from json_populate_recordset(null::??, ?::json) as "v" ` +
      `where "t"."id" = "v"."id"`,
    [Payout.table, ...names.flatMap((name) => [name, name]), Payout.table, JSON.stringify(values)]
  )
  const updated = Number(result?.rowCount ?? values.length)
  if (updated !== values.length) {
    throw new Error(`payouts saved: ${updated} rows updated for ${values.length}`)
  }
}

/**
 * MySQL/MariaDB: the rows as a derived table joined on the id; MySQL converts each value on
 * assignment as an UPDATE of that column would.
 */
async function updateJoiningUnion(
  trx: TransactionClientContract,
  names: string[],
  values: Array<Record<string, unknown>>
) {
  const derived = unionOf(['id', ...names], values)
  const sets = names.map(() => '`t`.?? = `v`.??').join(', ')
  const bindings: unknown[] = [
    Payout.table,
    ...derived.bindings,
    ...names.flatMap((name) => [name, name]),
  ]
  await trx.rawQuery(
    `update ?? as \`t\` join (${derived.sql}) as \`v\` on \`t\`.\`id\` = \`v\`.\`id\` set ${sets}`,
    bindings as never[]
  )
}

/**
 * SQLite (3.33 and later: `UPDATE ... FROM`): the rows as a derived table; a column keeps
 * the value bound, as an UPDATE of that column would.
 */
async function updateFromUnion(
  trx: TransactionClientContract,
  names: string[],
  values: Array<Record<string, unknown>>
) {
  const derived = unionOf(['id', ...names], values)
  const sets = names.map(() => '?? = "v".??').join(', ')
  const bindings: unknown[] = [
    Payout.table,
    ...names.flatMap((name) => [name, name]),
    ...derived.bindings,
    Payout.table,
  ]
  await trx.rawQuery(
    `update ?? set ${sets} from (${derived.sql}) as "v" where ??."id" = "v"."id"`,
    bindings as never[]
  )
}
