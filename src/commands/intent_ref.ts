import type { Database } from '@adonisjs/lucid/database'
import { DEFAULT_ACCOUNT } from '../constants.ts'
import { tableNames } from '../database/schema.ts'
import type { PayoutsConfig } from '../define_config.ts'
import { MAX_INT32 } from './payouts_command.ts'

/** What names an intent: the listing's id, the payout it made, or the app's idempotency key. */
export type IntentRefForm = 'id' | 'payout' | 'key'

/** A value given to `--resolve` or `--retry`, and each form it may be. */
export interface IntentRef {
  value: string
  forms: IntentRefForm[]
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i
/** An idempotency key's form (`idempotencyKeySchema`): no `:`, so `key:` never starts one. */
const KEY = /^[A-Za-z0-9_-]{8,255}$/

const FITS: Record<IntentRefForm, (value: string) => boolean> = {
  id: (value) => /^[1-9]\d*$/.test(value) && Number(value) <= MAX_INT32,
  payout: (value) => UUID.test(value),
  key: (value) => KEY.test(value),
}

/**
 * The forms `text` may be, from its shape (`12345678` is an id and may be a key, a UUID a
 * payout id and may be a key); `id:`, `payout:` or `key:` before it names one. Null when it
 * can be none.
 */
export function readIntentRef(text: string): IntentRef | null {
  const prefixed = /^(id|payout|key):(.*)$/.exec(text)
  const value = prefixed ? prefixed[2] : text
  const candidates = prefixed ? [prefixed[1] as IntentRefForm] : (['id', 'payout', 'key'] as const)
  const forms = candidates.filter((form) => FITS[form](value))
  return forms.length ? { value, forms } : null
}

/** "id 42", "payout id <uuid>", "idempotency key "<key>"". */
function formOf(form: IntentRefForm, value: string) {
  if (form === 'id') return `id ${value}`
  if (form === 'payout') return `payout id ${value}`
  return `idempotency key "${value}"`
}

/**
 * The id of the one execution intent of the config's account that `ref` names, in any of its
 * forms. None, or two intents (a key that is another intent's id or payout id), is an error:
 * nothing is acted on. A key matches exactly as written, case included, and only within the
 * account, where keys are unique.
 */
export async function intentIdOf(
  db: Database,
  config: Pick<PayoutsConfig, 'ledger'> & Partial<Pick<PayoutsConfig, 'account'>>,
  ref: IntentRef,
  verb: string
): Promise<number> {
  const { value, forms } = ref
  const account = config.account ?? DEFAULT_ACCOUNT
  const rows: Array<{ id: number; idempotency_key: string; payout_uuid: string | null }> = await db
    .connection(config.ledger.connection)
    .from(tableNames(config.ledger.tablePrefix).executionIntents)
    .select('id', 'idempotency_key', 'payout_uuid')
    .where('account', account)
    .where((query) => {
      if (forms.includes('id')) query.orWhere('id', Number(value))
      if (forms.includes('payout')) query.orWhereIn('payout_uuid', [value, value.toLowerCase()])
      if (forms.includes('key')) query.orWhere('idempotency_key', value)
    })
  const matches = rows.flatMap((row) =>
    forms
      .filter((form) =>
        form === 'id'
          ? Number(row.id) === Number(value)
          : form === 'payout'
            ? row.payout_uuid?.toLowerCase() === value.toLowerCase()
            : row.idempotency_key === value
      )
      .map((form) => ({ id: Number(row.id), form }))
  )
  const ids = [...new Set(matches.map((match) => match.id))]
  if (ids.length === 1) return ids[0]
  if (ids.length === 0) {
    const named = forms.map((form) => formOf(form, value)).join(' or ')
    // A number past the ids was looked up as a key alone: say why, for who meant an id.
    const past =
      /^[1-9]\d*$/.test(value) && Number(value) > MAX_INT32
        ? ` (an intent id is at most ${MAX_INT32})`
        : ''
    throw new Error(`No execution intent with ${named}${past}; nothing ${verb}`)
  }
  const which = matches.map((match) => `intent ${match.id} by its ${formOf(match.form, value)}`)
  throw new Error(
    `"${value}" names ${ids.length} execution intents (${which.join(', ')}); nothing ${verb}. ` +
      'Say which: id:<id>, payout:<payout id> or key:<key>'
  )
}
