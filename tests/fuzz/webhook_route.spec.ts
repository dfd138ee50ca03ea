/**
 * Fuzz of the webhook route over real HTTP: random headers, encodings, bodies and
 * signatures never get a 5xx, never get a 2xx (nor a row in the inbox) without a signature
 * that is genuinely valid for those bytes, and a genuinely signed delivery is always taken.
 */
import { createHmac, randomUUID } from 'node:crypto'
import { Readable } from 'node:stream'
import { gzipSync } from 'node:zlib'
import { test } from '@japa/runner'
import fc from 'fast-check'
import { request } from 'undici'
import { WebhookDelivery } from '../../src/models/main.ts'
import { signPayload } from '../../src/signature/main.ts'
import { TEST_DB } from '../helpers/database.ts'
import { startHttpApp } from '../helpers/http_app.ts'

const SEED = 4242
const SECRET = 'whsec_current_secret'
const LIMIT = 256 * 1024
const TOLERANCE = 300
const nowSeconds = () => Math.floor(Date.now() / 1000)

/** Characters undici lets through in a header value (tab, visible ASCII, Latin-1). */
const headerChar = fc
  .oneof(
    fc.integer({ min: 0x20, max: 0x7e }),
    fc.integer({ min: 0xa0, max: 0xff }),
    fc.constant(0x09)
  )
  .map((code) => String.fromCharCode(code))
const headerValue = (maxLength = 80) => fc.string({ unit: headerChar, minLength: 1, maxLength })

const json = (value: unknown) => Buffer.from(JSON.stringify(value), 'utf8')
const eventBody = fc
  .record({ type: fc.string(), data: fc.dictionary(fc.string(), fc.jsonValue()) })
  .map(json)

/** Bodies: JSON, arbitrary bytes, invalid UTF-8, BOM, gzip, empty, at and over the limit. */
const bodyArb = fc.oneof(
  { weight: 4, arbitrary: eventBody },
  { weight: 3, arbitrary: fc.uint8Array({ maxLength: 2048 }).map((b) => Buffer.from(b)) },
  { weight: 2, arbitrary: fc.jsonValue().map(json) },
  {
    weight: 2,
    arbitrary: fc
      .array(fc.integer({ min: 0x80, max: 0xff }), { minLength: 1, maxLength: 64 })
      .map((bytes) =>
        Buffer.concat([Buffer.from('{"type":"'), Buffer.from(bytes), Buffer.from('"}')])
      ),
  },
  {
    weight: 2,
    arbitrary: eventBody.map((b) => Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), b])),
  },
  { weight: 2, arbitrary: eventBody.map((b) => gzipSync(b)) },
  { weight: 1, arbitrary: fc.constant(Buffer.alloc(0)) },
  {
    weight: 2,
    arbitrary: fc
      .tuple(
        fc.oneof(
          fc.constantFrom(LIMIT - 1, LIMIT, LIMIT + 1),
          fc.integer({ min: LIMIT + 2, max: LIMIT + 48 * 1024 })
        ),
        fc.integer({ min: 0, max: 255 })
      )
      .map(([size, byte]) => Buffer.alloc(size, byte)),
  }
)

type SignatureKind =
  | { kind: 'valid'; skew: number; noise: string[] }
  | { kind: 'wrong_secret'; secret: string; skew: number }
  | { kind: 'stale'; skew: number }
  | { kind: 'other_bytes'; flip: number }
  | { kind: 'uppercase' }
  | { kind: 'missing' }
  | { kind: 'garbage'; value: string }
  | { kind: 'duplicated'; other: string; validFirst: boolean }

const signatureArb: fc.Arbitrary<SignatureKind> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('valid' as const),
      skew: fc.integer({ min: -(TOLERANCE - 10), max: TOLERANCE - 10 }),
      noise: fc.array(
        fc.oneof(
          fc.stringMatching(/^v1=[0-9a-f]{64}$/),
          fc.stringMatching(/^v[2-9]=[A-Za-z0-9+/=]{1,40}$/)
        ),
        { maxLength: 3 }
      ),
    }),
  },
  {
    weight: 2,
    arbitrary: fc
      .record({
        kind: fc.constant('wrong_secret' as const),
        secret: fc.oneof(
          fc.constantFrom('whsec_other', 'whsec_current_secre', 'whsec_current_secret_', ''),
          fc.string({ maxLength: 30 })
        ),
        skew: fc.integer({ min: -60, max: 60 }),
      })
      .filter((s) => s.secret !== SECRET),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('stale' as const),
      skew: fc.oneof(
        fc.integer({ min: TOLERANCE + 10, max: 1_000_000_000 }),
        fc.integer({ min: -1_000_000_000, max: -(TOLERANCE + 10) })
      ),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('other_bytes' as const), flip: fc.nat() }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'uppercase' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'missing' as const }) },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('garbage' as const),
      value: fc.oneof(
        headerValue(),
        fc
          .tuple(fc.stringMatching(/^\d{0,16}$/), fc.stringMatching(/^[0-9a-fA-F]{0,66}$/))
          .map(([t, v]) => `t=${t},v1=${v}`),
        fc
          .integer({ min: 4000, max: 6000 })
          .map((n) => `t=1,v1=${'a'.repeat(64)},v2=${'b'.repeat(n)}`)
      ),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('duplicated' as const),
      other: headerValue(),
      validFirst: fc.boolean(),
    }),
  }
)

const deliveryIdArb = fc.oneof(
  { weight: 8, arbitrary: fc.constant<'fresh' | 'missing' | 'duplicated'>('fresh') },
  { weight: 1, arbitrary: fc.constant<'fresh' | 'missing' | 'duplicated'>('missing') },
  { weight: 1, arbitrary: fc.constant<'fresh' | 'missing' | 'duplicated'>('duplicated') },
  {
    weight: 2,
    arbitrary: fc.oneof(
      headerValue(300),
      fc.constantFrom(
        'bad id',
        'dlv/1+2==',
        `!"#$%&'()*+,-./:;<=>?@[\\]^_\`{|}~`,
        'x'.repeat(255),
        'x'.repeat(256),
        'dlv_ü'
      )
    ),
  }
)

const caseArb = fc.record({
  body: bodyArb,
  signature: signatureArb,
  deliveryId: deliveryIdArb,
  contentType: fc.option(
    fc.oneof(
      fc.constantFrom(
        'application/json',
        'application/json; charset=utf-8',
        'application/json; charset=latin1',
        'application/json; charset=garbage',
        'text/plain',
        'application/x-www-form-urlencoded',
        'multipart/form-data; boundary=xyz',
        'application/octet-stream'
      ),
      headerValue(40)
    ),
    { freq: 5 }
  ),
  contentEncoding: fc.option(
    fc.oneof(fc.constantFrom('gzip', 'identity', 'deflate', 'br', 'gzip, gzip'), headerValue(20)),
    { freq: 2 }
  ),
  eventType: fc.option(headerValue(300)),
  extra: fc.array(fc.tuple(fc.stringMatching(/^x-[a-z0-9-]{1,20}$/), headerValue()), {
    maxLength: 3,
  }),
  chunks: fc.option(fc.array(fc.nat(), { minLength: 1, maxLength: 6 }), { freq: 3 }),
})

/** An oracle that does not trust the code under test: some (t, v1) pair is a real HMAC. */
function genuinelySigned(header: string | undefined, body: Buffer, now: number) {
  if (!header) return false
  const parts = header.split(',').map((p) => {
    const eq = p.indexOf('=')
    return [p.slice(0, eq).trim(), p.slice(eq + 1).trim()]
  })
  const v1s = parts.filter(([k]) => k === 'v1')
  return parts
    .filter(([k, v]) => k === 't' && /^\d+$/.test(v))
    .some(([, t]) => {
      if (Math.abs(now - Number(t)) > TOLERANCE + 5) return false
      return [t, String(Number(t))].some((text) => {
        const mac = createHmac('sha256', SECRET).update(`${text}.`).update(body).digest('hex')
        return v1s.some(([, v]) => v === mac)
      })
    })
}

/** Splits a body into chunks at the generated cut points (sent with chunked encoding). */
function split(body: Buffer, cuts: number[]) {
  const points = [...new Set(cuts.map((c) => (body.length ? c % body.length : 0)))].sort(
    (a, b) => a - b
  )
  const chunks: Buffer[] = []
  let start = 0
  for (const point of [...points, body.length]) {
    if (point > start) chunks.push(body.subarray(start, point))
    start = Math.max(start, point)
  }
  return chunks
}

/** The Svc-Delivery-Id rule: visible ASCII, 1 to 255 characters (docs/spec-gaps.md). */
const DELIVERY_ID = /^[\x21-\x7e]{1,255}$/

/** A header value as the server reads it: Node trims surrounding spaces and tabs. */
const seen = (value: string) => value.replace(/^[ \t]+|[ \t]+$/g, '')

async function inboxSize() {
  const [row] = await WebhookDelivery.query().count('* as total')
  return Number(row.$extras.total)
}

test.group(`Fuzz | webhook route over HTTP (${TEST_DB})`, () => {
  test('never 5xx, never 2xx or stored without a genuine signature, always takes a signed one', async ({
    assert,
    cleanup,
  }) => {
    const unhandled: unknown[] = []
    const onUnhandled = (reason: unknown) => void unhandled.push(reason)
    process.on('unhandledRejection', onUnhandled)
    cleanup(async () => void process.off('unhandledRejection', onUnhandled))
    const app = await startHttpApp(cleanup)
    const accepted = new Set<string>()
    const tally = { accepted: 0, rejected: 0, mustAccept: 0, tooLarge: 0 }

    await fc.assert(
      fc.asyncProperty(caseArb, async (c) => {
        const now = nowSeconds()
        const body = c.body
        const sig = c.signature
        const id = `dlv_${randomUUID()}`
        const headers: string[] = []

        if (c.deliveryId === 'fresh') headers.push('svc-delivery-id', id)
        else if (c.deliveryId === 'duplicated')
          headers.push('svc-delivery-id', id, 'svc-delivery-id', id)
        else if (c.deliveryId !== 'missing') headers.push('svc-delivery-id', c.deliveryId)

        const valid = (t: number) => signPayload(SECRET, t, body)
        if (sig.kind === 'valid') {
          headers.push('svc-signature', [valid(now + sig.skew), ...sig.noise].join(','))
        } else if (sig.kind === 'wrong_secret') {
          headers.push('svc-signature', signPayload(sig.secret, now + sig.skew, body))
        } else if (sig.kind === 'stale') {
          headers.push('svc-signature', valid(Math.max(0, now + sig.skew)))
        } else if (sig.kind === 'other_bytes') {
          const other = body.length > 0 ? Buffer.from(body) : Buffer.from([0])
          if (body.length > 0) other[sig.flip % body.length] ^= 0x01
          headers.push('svc-signature', signPayload(SECRET, now, other))
        } else if (sig.kind === 'uppercase') {
          headers.push(
            'svc-signature',
            valid(now).replace(/v1=(\w+)/, (_, v) => `v1=${v.toUpperCase()}`)
          )
        } else if (sig.kind === 'garbage') {
          headers.push('svc-signature', sig.value)
        } else if (sig.kind === 'duplicated') {
          const pair = sig.validFirst ? [valid(now), sig.other] : [sig.other, valid(now)]
          headers.push('svc-signature', pair[0], 'svc-signature', pair[1])
        }
        if (c.contentType !== null) headers.push('content-type', c.contentType)
        if (c.contentEncoding !== null) headers.push('content-encoding', c.contentEncoding)
        if (c.eventType !== null) headers.push('svc-event-type', c.eventType)
        for (const [name, value] of c.extra) headers.push(name, value)

        const response = await request(`${app.url}/webhooks/payouts`, {
          method: 'POST',
          headers,
          body: c.chunks ? Readable.from(split(body, c.chunks)) : body,
        })
        const text = await response.body.text()
        const status = response.statusCode

        // What the server saw: Node joins repeated custom headers with ', '.
        const seenSignature = headers
          .flatMap((v, i) => (i % 2 === 0 && v === 'svc-signature' ? [headers[i + 1]] : []))
          .join(', ')
        const mayAccept = body.length <= LIMIT && genuinelySigned(seenSignature, body, nowSeconds())
        const wellFormedId =
          c.deliveryId === 'fresh' ||
          (c.deliveryId !== 'missing' &&
            c.deliveryId !== 'duplicated' &&
            DELIVERY_ID.test(seen(c.deliveryId)))
        const mustAccept = sig.kind === 'valid' && wellFormedId && body.length <= LIMIT

        assert.isBelow(status, 500, `5xx: ${text}`)
        assert.isAtLeast(status, 200)
        if (status < 300) {
          assert.isTrue(mayAccept, `accepted without a genuine signature (${sig.kind})`)
          assert.include(text, '"received":true')
        } else {
          assert.equal(text.includes('"received"'), false)
        }
        if (mustAccept) assert.equal(status, 200, `a genuinely signed delivery refused: ${text}`)
        if (body.length > LIMIT) assert.equal(status, 413)

        // The inbox holds exactly the accepted deliveries, byte for byte.
        if (status < 300) {
          const seenId = headers.flatMap((v, i) =>
            i % 2 === 0 && v === 'svc-delivery-id' ? [seen(headers[i + 1])] : []
          )
          accepted.add(seenId.join(', '))
        }
        const row = await WebhookDelivery.findBy('deliveryId', id)
        if (status < 300 && c.deliveryId === 'fresh') assert.isTrue(row!.body.equals(body))
        else assert.isNull(row, `stored under ${id} though answered ${status} (${sig.kind})`)
        assert.equal(await inboxSize(), accepted.size)

        tally[status < 300 ? 'accepted' : 'rejected']++
        if (mustAccept) tally.mustAccept++
        if (status === 413) tally.tooLarge++
      }),
      // Shrinking over HTTP is slow: bound the whole run, shrinking included.
      {
        seed: SEED,
        numRuns: 150,
        plugins: [fc.interruptAfterTimeLimit(40_000, { failOnInterrupt: true })],
      }
    )

    // The run exercised both sides of the property.
    assert.isAbove(tally.mustAccept, 20)
    assert.equal(tally.accepted, tally.mustAccept)
    assert.isAbove(tally.rejected, 50)
    assert.isAbove(tally.tooLarge, 2)
    await app.payouts.drainInbox()
    assert.equal(await inboxSize(), accepted.size)
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(unhandled, [], 'an unhandled rejection fired')
  }).timeout(60_000)
})
