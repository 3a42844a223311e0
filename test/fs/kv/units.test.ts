// Engine-independent pieces of fs/kv checked against brute force: the range
// set, the commit-log write-set codec and conflict test, key helpers.

import test from 'ava'
import { keyAfter, makeVersionstamp, parseVersionstamp, prefixEnd } from '../../../fs/kv/index.js'
import { RangeSet } from '../../../fs/kv/range-set.js'
import { ReadConflicts, decodeWriteSet, encodeWriteSet, writeSetTime } from '../../../fs/kv/write-set.js'

// a tiny deterministic PRNG so failures reproduce
function rng(seed: number): () => number {
  let s = seed >>> 0
  return () => {
    s = (s + 0x6d2b79f5) >>> 0
    let t = s
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const ALPHABET = ['\u0000', 'a', 'b', 'c', '\u00ff']
function randKey(r: () => number): string {
  const n = 1 + Math.floor(r() * 3)
  let s = ''
  for (let i = 0; i < n; i++) s += ALPHABET[Math.floor(r() * ALPHABET.length)]
  return s
}

test('RangeSet agrees with a naive list of ranges', (t) => {
  const r = rng(7)
  for (let round = 0; round < 200; round++) {
    const set = new RangeSet()
    const naive: Array<[string, string]> = []
    for (let i = 0; i < 8; i++) {
      const a = randKey(r)
      const b = randKey(r)
      set.add(a, b)
      if (a < b) naive.push([a, b])
    }
    // coalesced, sorted, disjoint and non-adjacent
    const ranges = [...set]
    for (let i = 0; i < ranges.length; i++) {
      t.true(ranges[i]![0] < ranges[i]![1])
      if (i > 0) t.true(ranges[i - 1]![1] < ranges[i]![0])
    }
    for (let q = 0; q < 30; q++) {
      const k = randKey(r)
      t.is(
        set.contains(k),
        naive.some(([a, b]) => a <= k && k < b),
        `contains ${JSON.stringify(k)}`,
      )
      const b = randKey(r)
      t.is(
        set.intersects(k, b),
        k < b && naive.some(([x, y]) => x < b && k < y),
        `intersects ${JSON.stringify([k, b])}`,
      )
    }
  }
})

test('write sets round-trip and ReadConflicts.hits agrees with brute force', (t) => {
  const r = rng(11)
  const B = (s: string) => Buffer.from(s, 'latin1')
  for (let round = 0; round < 300; round++) {
    const points = Array.from({ length: Math.floor(r() * 4) }, () => randKey(r))
    const ranges = Array.from({ length: Math.floor(r() * 3) }, () => [randKey(r), randKey(r)] as [string, string])
    const buf = encodeWriteSet(
      1234.5,
      points.map(B),
      ranges.map(([a, b]) => [B(a), B(b)] as [Buffer, Buffer]),
    )
    const dec = decodeWriteSet(buf)
    t.is(writeSetTime(buf), 1234.5)
    t.deepEqual(
      dec.points.map((p) => p.toString('latin1')),
      points,
    )
    t.deepEqual(
      dec.ranges.map(([a, b]) => [a.toString('latin1'), b.toString('latin1')]),
      ranges,
    )

    const readPoints = new Set(Array.from({ length: Math.floor(r() * 4) }, () => randKey(r)))
    const readRanges = new RangeSet()
    const naiveReads: Array<[string, string]> = []
    for (let i = Math.floor(r() * 3); i > 0; i--) {
      const a = randKey(r)
      const b = randKey(r)
      readRanges.add(a, b)
      if (a < b) naiveReads.push([a, b])
    }
    const inRead = (k: string) => readPoints.has(k) || naiveReads.some(([a, b]) => a <= k && k < b)
    const expected =
      points.some(inRead) ||
      ranges.some(([a, b]) => a < b && ([...readPoints].some((k) => a <= k && k < b) || naiveReads.some(([x, y]) => x < b && a < y)))
    t.is(new ReadConflicts(readPoints, readRanges).hits(buf), expected)
  }
})

test('key helpers: keyAfter, prefixEnd, versionstamps', (t) => {
  t.deepEqual(keyAfter(Buffer.from('ab')), Buffer.from('ab\u0000', 'latin1'))
  t.deepEqual(prefixEnd(Buffer.from('DENT')), Buffer.from('DENU'))
  t.deepEqual(prefixEnd(Buffer.from([0x01, 0xff, 0xff])), Buffer.from([0x02]))
  t.throws(() => prefixEnd(Buffer.from([0xff])))
  t.throws(() => prefixEnd(Buffer.alloc(0)))
  const s = makeVersionstamp(0x0102030405, 7)
  t.is(s.toString('hex'), '00000001020304050007')
  t.deepEqual(parseVersionstamp(s), { commitVersion: 0x0102030405n, index: 7 })
  t.true(Buffer.compare(makeVersionstamp(5, 65535), makeVersionstamp(6, 0)) < 0)
})
