/**
 * Fuzz of the Svc-Signature parser and verifier: they face attacker-controlled strings,
 * so they must never throw, never accept without a real HMAC over the exact bytes, and
 * always accept a genuine signature however the other parts of the header are arranged.
 */
import { createHmac } from 'node:crypto'
import { test } from '@japa/runner'
import fc from 'fast-check'
import { parseSignatureHeader, verifySignature } from '../../src/signature/main.ts'

const SEED = 4242
const REASONS = ['malformed_header', 'timestamp_out_of_tolerance', 'no_matching_signature']

/** HMAC-SHA256 of `t.` + body, computed here so the oracle does not trust the code under test. */
function digest(secret: string, t: string, body: Uint8Array) {
  return createHmac('sha256', secret).update(`${t}.`).update(body).digest('hex')
}

const hex64 = fc.stringMatching(/^[0-9a-f]{64}$/)
const spaces = fc.stringMatching(/^[ \t]{0,2}$/)

/** One comma-separated part, mostly near what the parser expects, sometimes not at all. */
const part = fc.oneof(
  fc.tuple(fc.constantFrom('t', ' t', 't '), fc.stringMatching(/^\d{0,17}$/)),
  fc.tuple(fc.constantFrom('t', 'v1'), fc.string({ maxLength: 20 })),
  fc.tuple(fc.constant('v1'), hex64),
  fc.tuple(
    fc.constant('v1'),
    hex64.map((h) => h.toUpperCase())
  ),
  fc.tuple(fc.constant('v1'), fc.stringMatching(/^[0-9a-f]{63}$|^[0-9a-f]{65}$/)),
  fc.tuple(fc.stringMatching(/^v\d{1,3}$/), fc.string({ maxLength: 70 })),
  fc.tuple(fc.string({ maxLength: 4 }), fc.string({ maxLength: 10 }))
)
const structuredHeader = fc
  .array(fc.tuple(part, fc.constantFrom('=', '==', ' = ', '')), { maxLength: 8 })
  .map((parts) => parts.map(([[key, value], eq]) => `${key}${eq}${value}`).join(','))

/** A well-formed header with, half of the time, one part swapped for a random one. */
const nearValidHeader = fc
  .tuple(
    fc.stringMatching(/^\d{1,16}$/),
    fc.array(hex64, { minLength: 1, maxLength: 3 }),
    fc.option(fc.tuple(part, fc.nat()), { freq: 2 })
  )
  .map(([t, v1s, swap]) => {
    const parts = [`t=${t}`, ...v1s.map((v) => `v1=${v}`)]
    if (swap) parts[swap[1] % parts.length] = `${swap[0][0]}=${swap[0][1]}`
    return parts.join(',')
  })

const anyHeader = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 300 }),
  nearValidHeader,
  fc.string({ unit: 'grapheme', maxLength: 100 }),
  structuredHeader,
  fc.constantFrom(
    undefined,
    null,
    '',
    ',',
    '=',
    't=',
    'v1=',
    't=1,v1=',
    `t=1,v1=${'a'.repeat(64)}`
  ),
  fc.integer({ min: 4090, max: 5000 }).map((n) => `t=1,v1=${'a'.repeat(64)},v2=${'x'.repeat(n)}`)
)

/** A header that carries a genuine v1 among noise the spec says to ignore. */
function genuineHeader(t: number, v1: string) {
  return fc
    .record({
      extraV1: fc.array(hex64, { maxLength: 3 }),
      otherSchemes: fc.array(
        fc.tuple(fc.stringMatching(/^v([02-9]|\d{2})$/), fc.stringMatching(/^[!-+\--~]{1,70}$/)),
        { maxLength: 3 }
      ),
      pad: fc.array(fc.tuple(spaces, spaces), { minLength: 8, maxLength: 8 }),
    })
    .chain(({ extraV1, otherSchemes, pad }) => {
      const parts = [
        `t=${t}`,
        `v1=${v1}`,
        ...extraV1.map((value) => `v1=${value}`),
        ...otherSchemes.map(([key, value]) => `${key}=${value}`),
      ]
      return fc
        .shuffledSubarray(parts, { minLength: parts.length, maxLength: parts.length })
        .map((shuffled) => shuffled.map((p, i) => `${pad[i % 8][0]}${p}${pad[i % 8][1]}`).join(','))
    })
}

const nowArb = fc.integer({ min: 1_000_000_000, max: 4_000_000_000 })
const toleranceArb = fc.integer({ min: 1, max: 3600 })
const bodyArb = fc.oneof(
  fc.uint8Array({ maxLength: 512 }),
  fc.string({ unit: 'binary' }).map((s) => new Uint8Array(Buffer.from(s, 'utf8')))
)
const secretArb = fc.string({ unit: 'binary', maxLength: 40 })

test.group('Fuzz | signature parser and verifier', () => {
  test('parseSignatureHeader never throws and returns null or a well-formed value', ({
    assert,
  }) => {
    fc.assert(
      fc.property(anyHeader, (header) => {
        const parsed = parseSignatureHeader(header)
        if (parsed === null) return
        assert.isTrue(typeof header === 'string' && header.length <= 4096)
        assert.isTrue(Number.isSafeInteger(parsed.timestamp) && parsed.timestamp >= 0)
        assert.isAbove(parsed.v1.length, 0)
        for (const value of parsed.v1) {
          assert.match(value, /^[0-9a-f]{64}$/)
          assert.include(header!, value)
        }
      }),
      { seed: SEED, numRuns: 3000 }
    )
  })

  test('verifySignature never throws and accepts only a real HMAC of the exact bytes', ({
    assert,
  }) => {
    fc.assert(
      fc.property(
        anyHeader,
        bodyArb,
        fc.array(secretArb, { maxLength: 3 }),
        nowArb,
        toleranceArb,
        (header, rawBody, secrets, now, tolerance) => {
          const result = verifySignature({
            header,
            rawBody,
            secrets,
            nowSeconds: now,
            toleranceSeconds: tolerance,
          })
          if (!result.ok) {
            assert.include(REASONS, result.reason)
            assert.equal(result.reason === 'malformed_header', !parseSignatureHeader(header))
            return
          }
          // Accepted: the header must hold a t in tolerance and a v1 we can recompute.
          const parts = header!.split(',').map((p) => p.split('=').map((s) => s.trim()))
          const ts = parts.filter(([k]) => k === 't').map(([, v]) => v)
          const v1s = parts.filter(([k]) => k === 'v1').map(([, v]) => v)
          const secret = secrets[result.secretIndex]
          assert.isTrue(
            ts.some(
              (t) =>
                Math.abs(now - Number(t)) <= tolerance &&
                v1s.includes(digest(secret, String(Number(t)), rawBody))
            ),
            'accepted without a genuine signature'
          )
        }
      ),
      { seed: SEED, numRuns: 3000 }
    )
  })

  test('a genuine signature is accepted whatever noise surrounds it', ({ assert }) => {
    const arb = fc
      .record({
        body: bodyArb,
        secrets: fc.array(secretArb, { minLength: 1, maxLength: 3 }),
        signer: fc.nat(),
        now: nowArb,
        tolerance: toleranceArb,
        offset: fc.double({ min: -1, max: 1, noNaN: true }),
      })
      .chain((input) => {
        const signing = input.secrets[input.signer % input.secrets.length]
        const t = input.now + Math.trunc(input.offset * input.tolerance)
        return genuineHeader(t, digest(signing, String(t), input.body)).map((header) => ({
          ...input,
          signing,
          t,
          header,
        }))
      })
    fc.assert(
      fc.property(arb, ({ body, secrets, signing, now, tolerance, t, header }) => {
        const result = verifySignature({
          header,
          rawBody: body,
          secrets,
          nowSeconds: now,
          toleranceSeconds: tolerance,
        })
        // HMAC pads short keys with zeros, so 'k' and 'k\0' sign alike: expect the first
        // secret whose digest matches, as computed here.
        const v1 = digest(signing, String(t), body)
        const first = secrets.findIndex((s) => digest(s, String(t), body) === v1)
        assert.deepEqual(result, { ok: true, timestamp: t, secretIndex: first })
      }),
      { seed: SEED, numRuns: 1500 }
    )
  })

  test('any change to body, timestamp, secret or digest turns a genuine signature down', ({
    assert,
  }) => {
    const arb = fc.record({
      body: fc.uint8Array({ minLength: 1, maxLength: 512 }),
      secret: secretArb,
      now: nowArb,
      tolerance: toleranceArb,
      at: fc.nat(),
      mutation: fc.constantFrom('body', 'skew', 'stale', 'secret', 'digest', 'uppercase'),
      bit: fc.integer({ min: 0, max: 7 }),
    })
    fc.assert(
      fc.property(arb, ({ body, secret, now, tolerance, at, mutation, bit }) => {
        let rawBody = body
        let t = now
        let signWith = secret
        let v1 = digest(secret, String(t), body)
        if (mutation === 'body') {
          rawBody = Uint8Array.from(body)
          rawBody[at % body.length] ^= 1 << bit
        } else if (mutation === 'skew') {
          v1 = digest(secret, String(t - 1 - (at % tolerance)), body)
        } else if (mutation === 'stale') {
          const far = 1 + (at % 900_000_000)
          t = at % 2 === 0 ? now - tolerance - far : now + tolerance + far
          v1 = digest(secret, String(t), body)
        } else if (mutation === 'secret') {
          signWith = `${secret}${String.fromCharCode(32 + (at % 90))}`
          v1 = digest(signWith, String(t), body)
        } else if (mutation === 'digest') {
          const i = at % 64
          const flipped = ((Number.parseInt(v1[i], 16) + 1 + (bit % 15)) % 16).toString(16)
          v1 = `${v1.slice(0, i)}${flipped}${v1.slice(i + 1)}`
        } else {
          v1 = /[a-f]/.test(v1) ? v1.toUpperCase() : `${v1.slice(0, 63)}A`
        }
        const result = verifySignature({
          header: `t=${t},v1=${v1}`,
          rawBody,
          secrets: [secret],
          nowSeconds: now,
          toleranceSeconds: tolerance,
        })
        const expected =
          mutation === 'stale'
            ? 'timestamp_out_of_tolerance'
            : mutation === 'uppercase'
              ? 'malformed_header'
              : 'no_matching_signature'
        assert.deepEqual(result, { ok: false, reason: expected })
      }),
      { seed: SEED, numRuns: 2000 }
    )
  })
})
