import { test } from '@japa/runner'
import fc from 'fast-check'
import { DateTime } from 'luxon'
import { dbDate, fromDbDate } from '../../src/database/dates.ts'

/** Every `dateTimeFormat` of Lucid's dialects (node_modules/@adonisjs/lucid/build/src/dialects). */
const FORMATS = ['yyyy-MM-dd HH:mm:ss', "yyyy-MM-dd'T'HH:mm:ss.SSSZZ"]

const clientWith = (dateTimeFormat: string) => ({ dialect: { dateTimeFormat } }) as never

test.group('dbDate', () => {
  test('writes what Luxon writes in UTC, for every dialect format, any instant and zone', ({
    assert,
  }) => {
    for (const format of FORMATS) {
      fc.assert(
        fc.property(
          fc.date({ min: new Date(-62_000_000_000_000), max: new Date(300_000_000_000_000) }),
          (date) => {
            fc.pre(Number.isFinite(date.getTime()))
            const expected = DateTime.fromJSDate(date).toUTC().toFormat(format)
            assert.equal(dbDate(clientWith(format), date), expected, `${format} ${date.getTime()}`)
            assert.equal(dbDate(clientWith(format), DateTime.fromJSDate(date)), expected)
            // A DateTime in any zone is the same instant, written in UTC.
            for (const zone of ['Asia/Kolkata', 'America/St_Johns', 'Pacific/Chatham']) {
              const zoned = DateTime.fromJSDate(date).setZone(zone)
              assert.equal(dbDate(clientWith(format), zoned), expected, `${format} ${zone}`)
            }
          }
        ),
        { numRuns: 2000 }
      )
    }
  })

  test('cuts the known formats from toISOString', ({ assert }) => {
    const date = new Date(Date.UTC(2026, 10, 26, 21, 5, 7, 89))
    assert.equal(dbDate(clientWith('yyyy-MM-dd HH:mm:ss'), date), '2026-11-26 21:05:07')
    assert.equal(
      dbDate(clientWith("yyyy-MM-dd'T'HH:mm:ss.SSSZZ"), date),
      '2026-11-26T21:05:07.089+00:00'
    )
    // A DateTime in another zone: the same instant in UTC, milliseconds kept.
    const kolkata = DateTime.fromJSDate(date).setZone('Asia/Kolkata')
    assert.equal(
      dbDate(clientWith("yyyy-MM-dd'T'HH:mm:ss.SSSZZ"), kolkata),
      '2026-11-26T21:05:07.089+00:00'
    )
    assert.equal(dbDate(clientWith('yyyy-MM-dd HH:mm:ss'), kolkata), '2026-11-26 21:05:07')
    // A format no dialect of this list uses goes through Luxon.
    assert.equal(dbDate(clientWith('dd/MM/yyyy'), date), '26/11/2026')
  })
})

/** What `fromDbDate` made of a string before its fast path: Luxon's SQL parser, then ISO. */
function luxonRead(value: string): DateTime {
  const sql = DateTime.fromSQL(value, { zone: 'utc' })
  return sql.isValid ? sql : DateTime.fromISO(value, { zone: 'utc' })
}

/** The same DateTime: instant, zone, locale and validity (Lucid's `equals`), or both invalid. */
function sameRead(actual: DateTime | null, expected: DateTime, what: string, assert: any) {
  assert.isNotNull(actual, what)
  if (!expected.isValid) {
    assert.isFalse(actual!.isValid, what)
    return
  }
  assert.isTrue(actual!.equals(expected), `${what}: ${actual!.toISO()} for ${expected.toISO()}`)
}

const pad = (n: number, width: number) => String(n).padStart(width, '0')

test.group('fromDbDate', () => {
  test('reads a string as Luxon reads it in UTC, in range or not, with any fraction', ({
    assert,
  }) => {
    const parts = fc.record({
      year: fc.integer({ min: 0, max: 9999 }),
      month: fc.integer({ min: 0, max: 13 }),
      day: fc.integer({ min: 0, max: 32 }),
      hour: fc.integer({ min: 0, max: 25 }),
      minute: fc.integer({ min: 0, max: 61 }),
      second: fc.integer({ min: 0, max: 61 }),
      fraction: fc.option(fc.stringMatching(/^[0-9]{1,12}$/), { nil: undefined }),
      separator: fc.constantFrom('.', ','),
    })
    fc.assert(
      fc.property(parts, (p) => {
        const value =
          `${pad(p.year, 4)}-${pad(p.month, 2)}-${pad(p.day, 2)} ` +
          `${pad(p.hour, 2)}:${pad(p.minute, 2)}:${pad(p.second, 2)}` +
          (p.fraction === undefined ? '' : `${p.separator}${p.fraction}`)
        sameRead(
          fromDbDate(clientWith('yyyy-MM-dd HH:mm:ss'), value),
          luxonRead(value),
          value,
          assert
        )
      }),
      { numRuns: 5000 }
    )
  })

  test('reads what dbDate wrote back as the same instant, in UTC', ({ assert }) => {
    fc.assert(
      fc.property(
        fc.date({ min: new Date(Date.UTC(1000, 0, 1)), max: new Date(Date.UTC(9999, 11, 31)) }),
        (date) => {
          fc.pre(Number.isFinite(date.getTime()))
          const client = clientWith('yyyy-MM-dd HH:mm:ss')
          const written = dbDate(client, date)
          const read = fromDbDate(client, written)!
          sameRead(read, luxonRead(written), written, assert)
          assert.equal(read.zoneName, 'UTC')
          assert.equal(read.toMillis(), Math.floor(date.getTime() / 1000) * 1000)
        }
      ),
      { numRuns: 2000 }
    )
  })

  test('leaves other shapes to Luxon: a leap day, February 29th of a common year, offsets', ({
    assert,
  }) => {
    const client = clientWith('yyyy-MM-dd HH:mm:ss')
    for (const value of [
      '2024-02-29 12:00:00',
      '2100-02-29 12:00:00',
      '2000-02-29 23:59:59.999',
      '2026-11-28 02:00:00.1234567',
      '2024-01-01 12:00:00.99999999999999999',
      '0999-12-31 23:59:59',
      '2026-11-28T02:00:00.000+00:00',
      '2026-11-28 02:00:00 +05:30',
      '2026-11-28',
      'not a date',
    ]) {
      sameRead(fromDbDate(client, value), luxonRead(value), value, assert)
    }
    assert.isFalse(fromDbDate(client, '2100-02-29 12:00:00')!.isValid)
    assert.isFalse(fromDbDate(client, '2024-01-01 12:00:00.99999999999999999')!.isValid)
    assert.equal(fromDbDate(client, '2024-02-29 12:00:00')!.toISO(), '2024-02-29T12:00:00.000Z')
  })
})
