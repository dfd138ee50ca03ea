import type { QueryClientContract } from '@adonisjs/lucid/types/database'
import type { LucidModel, LucidRow, ModelColumnOptions } from '@adonisjs/lucid/types/model'
import { BaseModel } from '@adonisjs/lucid/orm'

/**
 * The models of a hot path (an inbox batch's payouts), made and compared as Lucid makes and
 * compares them, without going through each model's Proxy for every column: Lucid's own
 * `$createFromAdapterResult` sets each column through the Proxy (two traps a column) and
 * copies the originals with a deep merge, 62 µs a payout on this machine, and `$dirty`
 * reads both objects through it again (13 µs). The result is the same model: same
 * attributes and originals (but for an own `__proto__` key of a JSON column, see
 * `original`), persisted, bound to the client's transaction.
 */

/** What a model's columns need here, computed once per model class. */
interface ColumnPlan {
  attribute: string
  consume: ModelColumnOptions['consume'] | undefined
}

const plans = new WeakMap<LucidModel, Map<string, ColumnPlan>>()

function planOf(model: LucidModel): Map<string, ColumnPlan> {
  let plan = plans.get(model)
  if (plan) return plan
  model.boot()
  plan = new Map()
  for (const [attribute, column] of model.$columnsDefinitions) {
    plan.set(column.columnName, {
      attribute,
      consume: typeof column.consume === 'function' ? column.consume : undefined,
    })
  }
  plans.set(model, plan)
  return plan
}

/**
 * A copy of a value as Lucid's originals keep it (lodash `merge` into `{}`): plain objects
 * (a null prototype's too) and arrays copied deeply, a plain object's copy an ordinary
 * object, anything else (a DateTime) the same instance. One difference, on purpose: an own
 * `__proto__` key (JSON.parse makes one from a payload) is kept, where lodash drops it and
 * Lucid then calls the column changed at every load and writes the same JSON again.
 */
function original(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(original)
  if (value === null || typeof value !== 'object') return value
  const prototype = Object.getPrototypeOf(value)
  if (prototype !== Object.prototype && prototype !== null) return value
  const copy: Record<string, unknown> = {}
  for (const key of Object.keys(value)) {
    const item = original((value as Record<string, unknown>)[key])
    // An own `__proto__` (JSON.parse makes one) stays a key, never the copy's prototype.
    if (key === '__proto__') {
      Object.defineProperty(copy, key, {
        value: item,
        enumerable: true,
        writable: true,
        configurable: true,
      })
    } else copy[key] = item
  }
  return copy
}

/**
 * A model of `model` from a row as the database answered it (`select *`), as
 * `model.$createFromAdapterResult(row, undefined, { client })` makes it. A row with a column
 * the model does not declare (it goes to `$extras`) is left to Lucid.
 */
export function hydrateRow<Model extends LucidModel>(
  model: Model,
  row: Record<string, unknown>,
  client: QueryClientContract
): InstanceType<Model> {
  const plan = planOf(model)
  const keys = Object.keys(row)
  if (!keys.every((key) => plan.has(key))) {
    return model.$createFromAdapterResult(row, undefined, { client }) as InstanceType<Model>
  }
  const instance = new model() as InstanceType<Model> & LucidRow
  // Bound first (Lucid binds after consuming): a column's `consume` that asks the row for
  // its client (the plugin's dates, for the dialect) gets the transaction at once.
  instance.$setOptionsAndTrx({ client })
  const attributes: Record<string, unknown> = {}
  const originals: Record<string, unknown> = {}
  for (const key of keys) {
    const { attribute, consume } = plan.get(key)!
    const value = consume ? consume(row[key], attribute, instance) : row[key]
    attributes[attribute] = value
    originals[attribute] = original(value)
  }
  instance.$attributes = attributes
  instance.$original = originals
  instance.$isPersisted = true
  instance.$isLocal = false
  return instance
}

/** Lucid's own `$dirty`, run on the model's objects instead of through its Proxy. */
const dirtyOf = Object.getOwnPropertyDescriptor(BaseModel.prototype, '$dirty')!.get!

/**
 * The attributes `row.$dirty` names, computed by Lucid's own `$dirty` (the same comparison:
 * DateTimes by `equals`, other values deeply), reading the row's objects once.
 */
export function dirtyAttributes(row: LucidRow): string[] {
  const view = {
    $isPersisted: row.$isPersisted,
    $attributes: row.$attributes,
    $original: row.$original,
    fillInvoked: (row as unknown as { fillInvoked: boolean }).fillInvoked,
  }
  return Object.keys(dirtyOf.call(view) as Record<string, unknown>)
}

/** `row.$hydrateOriginals()`: the originals made the attributes again, as Lucid copies them. */
export function hydrateOriginals(row: LucidRow): void {
  const attributes = row.$attributes
  const originals: Record<string, unknown> = {}
  for (const key of Object.keys(attributes)) originals[key] = original(attributes[key])
  row.$original = originals
}
