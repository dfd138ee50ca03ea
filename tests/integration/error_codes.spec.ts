import { readFileSync } from 'node:fs'
import { test } from '@japa/runner'
import { apiErrors, errors } from '../../index.ts'

const ROOT = new URL('../../', import.meta.url)
const SCHEME = /^E_PAYOUTS_[A-Z_]+$/

/** The names 0.1.0's development builds exported, and the class each is now an alias of. */
const DEPRECATED: Record<string, string> = {
  E_INVALID_PAYOUTS_CONFIG: 'E_PAYOUTS_INVALID_CONFIG',
  E_WEBHOOK_SECRET_NOT_STORED: 'E_PAYOUTS_WEBHOOK_SECRET_NOT_STORED',
  E_WEBHOOK_ROTATION_UNCONFIRMED: 'E_PAYOUTS_WEBHOOK_ROTATION_UNCONFIRMED',
  E_WEBHOOK_SUBSCRIPTION_NOT_FOUND: 'E_PAYOUTS_WEBHOOK_SUBSCRIPTION_NOT_FOUND',
  E_ESCROW_CONFIRMATION_IN_FLIGHT: 'E_PAYOUTS_ESCROW_CONFIRMATION_IN_FLIGHT',
  E_UNKNOWN_PAYOUTS_ACCOUNT: 'E_PAYOUTS_UNKNOWN_ACCOUNT',
}

/** Exports of `errors` that are no error class. */
const HELPERS = new Set(['missingKey'])

const exported = errors as unknown as Record<string, unknown>

/** Every error class of `errors` by its export name, with its static `code`. */
function frameworkCodes() {
  const codes = new Map<string, string>()
  for (const [name, value] of Object.entries(exported)) {
    if (HELPERS.has(name)) continue
    const code = (value as { code?: unknown }).code
    if (typeof value !== 'function' || typeof code !== 'string') {
      throw new Error(`errors.${name} is neither an error class with a code nor a known helper`)
    }
    codes.set(name, code)
  }
  return codes
}

/** The code of every client error class the plugin decides (not a `PayoutsApiError`). */
function clientCodes() {
  const codes = new Map<string, string>()
  for (const [name, value] of Object.entries(apiErrors)) {
    if (typeof value !== 'function' || !(value.prototype instanceof apiErrors.PayoutsError)) {
      continue
    }
    const answered = value === apiErrors.PayoutsApiError
    if (answered || value.prototype instanceof apiErrors.PayoutsApiError) continue
    const instance = new (value as new (...args: string[]) => { code?: unknown })('field', 'why')
    if (typeof instance.code === 'string') codes.set(name, instance.code)
  }
  return codes
}

/** The `E_` codes of the README's `## Errors` table, from its first column. */
function readmeCodes() {
  const readme = readFileSync(new URL('README.md', ROOT), 'utf8')
  const section = readme.split(/^## Errors$/m)[1]?.split(/^## /m)[0] ?? ''
  const codes = new Set<string>()
  for (const line of section.split('\n')) {
    if (!line.startsWith('| ')) continue
    const firstColumn = line.split('|')[1]
    for (const match of firstColumn.matchAll(/`(E_[A-Z_]+)`/g)) codes.add(match[1])
  }
  return codes
}

test.group('Errors | one code scheme', () => {
  test('every code the plugin decides is E_PAYOUTS_<WHAT>', ({ assert }) => {
    const framework = frameworkCodes()
    const client = clientCodes()
    assert.isAbove(framework.size, 10)
    assert.includeMembers([...client.keys()], ['PayoutsValidationError', 'PayoutsConfigError'])
    for (const [name, code] of [...framework, ...client]) assert.match(code, SCHEME, name)
  })

  test('each class of errors is exported under its code; the old names are its aliases', ({
    assert,
  }) => {
    const names = [...frameworkCodes()].filter(([name]) => !(name in DEPRECATED))
    for (const [name, code] of names) assert.equal(code, name, `errors.${name}`)
    // One class per current name: only the deprecated names share one.
    assert.equal(new Set(names.map(([name]) => exported[name])).size, names.length)
    for (const [old, current] of Object.entries(DEPRECATED)) {
      assert.strictEqual(exported[old], exported[current], `errors.${old}`)
      const ErrorClass = exported[old] as new (args?: unknown[]) => Error & { code: string }
      const error = new ErrorClass(['x', 'y'])
      assert.instanceOf(error, exported[current] as new () => Error, old)
      assert.equal(error.code, current, old)
    }
  })

  test('the old names are marked deprecated, removed in 0.2.0', ({ assert }) => {
    const source = readFileSync(new URL('src/errors.ts', ROOT), 'utf8')
    for (const [old, current] of Object.entries(DEPRECATED)) {
      assert.include(
        source,
        `/** @deprecated Use \`${current}\`; removed in 0.2.0. */\nexport const ${old} = ${current}\n`,
        old
      )
    }
  })

  test("the README's error table lists every code, and no other E_ code", ({ assert }) => {
    const documented = readmeCodes()
    const codes = new Set([...frameworkCodes().values(), ...clientCodes().values()])
    for (const code of codes) assert.isTrue(documented.has(code), `${code} is not in the README`)
    for (const code of documented) assert.isTrue(codes.has(code), `${code} is no code of errors`)
  })

  test("a PayoutsApiError's code is the service's, never E_-prefixed", ({ assert }) => {
    for (let status = 0; status < 600; status++) {
      assert.notMatch(apiErrors.codeForStatus(status), /^E_/, String(status))
    }
    const answered = apiErrors.errorFromResponse(429, { code: 'RATE_LIMITED', error: 'slow' }, 1)
    assert.equal(answered.code, 'RATE_LIMITED')
  })
})
