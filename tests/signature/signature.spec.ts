import { createHmac } from 'node:crypto'
import { test } from '@japa/runner'
import { parseSignatureHeader, signPayload, verifySignature } from '../../src/signature/main.ts'

const secret = 'whsec_test_secret_value'
const body = Buffer.from('\uFEFF{"type":"payout.created","data":{}}', 'utf8')

function independentDigest(key: string, t: number, raw: Buffer) {
  return createHmac('sha256', key)
    .update(Buffer.concat([Buffer.from(`${t}.`), raw]))
    .digest('hex')
}

test.group('Signature | HTTP delivery: Svc-Signature', () => {
  test('signs t.rawbody with HMAC-SHA256 over the raw bytes', ({ assert }) => {
    const header = signPayload(secret, 1700000000, body)
    assert.equal(header, `t=1700000000,v1=${independentDigest(secret, 1700000000, body)}`)
  })

  test('accepts a valid signature and rejects a tampered body', ({ assert }) => {
    const now = 1700000000
    const header = signPayload(secret, now, body)
    assert.isTrue(verifySignature({ header, rawBody: body, secrets: [secret], nowSeconds: now }).ok)
    const tampered = Buffer.from(body)
    tampered[tampered.length - 2] = 0x20
    assert.deepEqual(
      verifySignature({ header, rawBody: tampered, secrets: [secret], nowSeconds: now }),
      { ok: false, reason: 'no_matching_signature' }
    )
  })

  test('any of several v1 values may match, and a previous secret is tried second', ({
    assert,
  }) => {
    const now = 1700000000
    const other = 'a'.repeat(64)
    const good = independentDigest('whsec_old', now, body)
    const result = verifySignature({
      header: `t=${now},v1=${other},v1=${good},v2=zzz`,
      rawBody: body,
      secrets: [secret, 'whsec_old'],
      nowSeconds: now,
    })
    assert.deepEqual(result, { ok: true, timestamp: now, secretIndex: 1 })
  })

  test('rejects timestamps more than 5 minutes in the past or the future', ({ assert }) => {
    const now = 1700000000
    for (const t of [now - 301, now + 301]) {
      const header = signPayload(secret, t, body)
      assert.deepEqual(
        verifySignature({ header, rawBody: body, secrets: [secret], nowSeconds: now }),
        { ok: false, reason: 'timestamp_out_of_tolerance' }
      )
    }
    for (const t of [now - 300, now + 300]) {
      const header = signPayload(secret, t, body)
      assert.isTrue(
        verifySignature({ header, rawBody: body, secrets: [secret], nowSeconds: now }).ok
      )
    }
  })

  test('parses strictly: {$self}')
    .with([
      '',
      'v1=' + 'a'.repeat(64),
      't=1',
      't=abc,v1=' + 'a'.repeat(64),
      't=1,t=2,v1=' + 'a'.repeat(64),
      't=1,v1=' + 'a'.repeat(63),
      't=1,v1=' + 'A'.repeat(64),
      't=1,v1=' + 'a'.repeat(64) + ',foo=bar',
      't=1,v1=' + 'a'.repeat(64) + ',,',
      't=1;v1=' + 'a'.repeat(64),
    ])
    .run(({ assert }, header) => {
      assert.isNull(parseSignatureHeader(header))
    })

  test('ignores other schemes such as v2', ({ assert }) => {
    assert.deepEqual(parseSignatureHeader(`t=5,v2=${'b'.repeat(64)},v1=${'a'.repeat(64)}`), {
      timestamp: 5,
      v1: ['a'.repeat(64)],
    })
  })
})
