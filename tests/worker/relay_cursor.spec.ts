import { test } from '@japa/runner'
import { RelayCursor } from '../../src/service/relay_cursor.ts'

/** How long a gap is waited for in these tests (ms, on the clock the tests pass in). */
const WAIT = 100

/** A cursor begun at `ids` at time 0. */
function begun(ids: number[]) {
  const cursor = new RelayCursor(WAIT)
  cursor.begin(ids, 0)
  return cursor
}

/** A read that saw nothing new, started (and returned) at `at`. */
function idle(at: number, found: number[] = []) {
  return { fresh: [], seenAt: at, found, startedAt: at }
}

/**
 * The relay's cursor without a database: an id missing below the frontier (a gap) is waited
 * for until `gapWaitMs` after it was found missing, taken when it appears, then given up;
 * nothing moves until a read is committed.
 */
test.group('Relay | cursor', () => {
  test('it begins at the newest id, the ids missing among the newest as gaps', ({ assert }) => {
    const cursor = new RelayCursor(WAIT)
    assert.isFalse(cursor.started)
    assert.isNull(cursor.frontier)
    assert.throws(() => cursor.step(idle(0)), /before begin/)
    assert.equal(cursor.begin([10, 11, 14, 15, 18], 0), 18)
    assert.isTrue(cursor.started)
    assert.equal(cursor.frontier, 18)
    assert.deepEqual(cursor.pendingGaps(), [
      [12, 13],
      [16, 17],
    ])
    assert.equal(new RelayCursor(WAIT).begin([], 0), 0, 'an empty log begins at 0')
  })

  test('a missing id is waited for until its deadline, then skipped', ({ assert }) => {
    const cursor = begun([1, 2, 5])
    assert.deepEqual(cursor.pendingGaps(), [[3, 4]])
    const waiting = cursor.step(idle(WAIT - 1))
    assert.deepEqual(waiting.expired, [], 'not given up before its deadline')
    assert.deepEqual(
      waiting.gaps.map((gap) => [gap.from, gap.to]),
      [[3, 4]]
    )
    cursor.commit(waiting)
    assert.deepEqual(cursor.pendingGaps(), [[3, 4]], 'still waited for')
    const expired = cursor.step(idle(WAIT))
    assert.deepEqual(
      expired.expired.map((gap) => [gap.from, gap.to]),
      [[3, 4]],
      'given up by a read that started at its deadline'
    )
    assert.deepEqual(cursor.pendingGaps(), [[3, 4]], 'given up once that read is committed')
    cursor.commit(expired)
    assert.deepEqual(cursor.pendingGaps(), [])
    assert.equal(cursor.frontier, 5, 'the frontier stays when nothing new was read')
  })

  test('an id that appears is taken out of its gap, even in the read at the deadline', ({
    assert,
  }) => {
    const cursor = begun([2, 8])
    const split = cursor.step(idle(10, [5]))
    assert.deepEqual(
      split.gaps.map((gap) => [gap.from, gap.to]),
      [
        [3, 4],
        [6, 7],
      ],
      'the gap splits around the id that appeared'
    )
    cursor.commit(split)
    // The read that starts at the deadline still finds 3: it is taken, the rest given up.
    const last = cursor.step(idle(WAIT, [3, 7]))
    assert.deepEqual(
      last.expired.map((gap) => [gap.from, gap.to]),
      [
        [4, 4],
        [6, 6],
      ]
    )
    assert.deepEqual(last.gaps, [])
  })

  test('a gap among new ids is waited for from the read that found it', ({ assert }) => {
    const cursor = begun([1])
    const read = cursor.step({ fresh: [2, 5, 6, 9], seenAt: 50, found: [], startedAt: 50 })
    assert.equal(read.frontier, 9)
    assert.deepEqual(read.gaps, [
      { from: 3, to: 4, since: 50 },
      { from: 7, to: 8, since: 50 },
    ])
    cursor.commit(read)
    assert.deepEqual(cursor.step(idle(50 + WAIT - 1)).expired, [], 'its wait starts at 50')
    assert.lengthOf(cursor.step(idle(50 + WAIT)).expired, 2)
  })

  test('nothing moves until a read is committed', ({ assert }) => {
    const cursor = begun([1, 4])
    const read = cursor.step({ fresh: [5, 7], seenAt: 0, found: [2], startedAt: 0 })
    assert.equal(read.frontier, 7)
    assert.equal(cursor.frontier, 4, 'the frontier waits for the commit')
    assert.deepEqual(cursor.pendingGaps(), [[2, 3]], 'the gaps wait for the commit')
    // The read failed halfway: the next one reads from the same place, the same gaps.
    const again = cursor.step(idle(0, [2]))
    assert.deepEqual(
      again.gaps.map((gap) => [gap.from, gap.to]),
      [[3, 3]]
    )
    cursor.commit(read)
    assert.equal(cursor.frontier, 7)
    assert.deepEqual(cursor.pendingGaps(), [
      [3, 3],
      [6, 6],
    ])
  })
})
