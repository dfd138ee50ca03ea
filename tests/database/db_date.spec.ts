import { test } from '@japa/runner'
import fc from 'fast-check'
import { DateTime } from 'luxon'
import { dbDate } from '../../src/database/dates.ts'

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
