import test, { type ExecutionContext } from 'ava'
import { chunkIdOf } from '../../../fs/common/chunk-id.js'
import { StrataError } from '../../../fs/common/errors.js'
import {
  ALLOC_COUNTER_UNSET,
  allocateChainRange,
  chainRefForChunk,
  chunkIndexOf,
  initialAllocCounter,
  layoutChainIndexes,
  mapRange,
  resolveChainId,
  resolveChainRef,
  validateLayout,
  type Layout,
} from '../../../fs/common/layout.js'
import { isSafeSeed, shufflePermutation } from '../../../fs/common/shuffle.js'

function invalidArg(t: ExecutionContext, fn: () => unknown, message?: string): void {
  t.throws(fn, { instanceOf: StrataError, code: 'INVALID_ARGUMENT' }, message)
}

function rangeLayout(baseIndex: number, stripeSize: number, seed: bigint, shuffle: 0 | 1 = 1, chunkSize = 1 << 20): Layout {
  return { tableId: 1, tableVersion: 1, chunkSize, stripeSize, chains: { type: 'ChainRange', baseIndex, shuffle, seed } }
}

const TABLE8 = [101, 102, 103, 104, 105, 106, 107, 108]

test('3fs.md worked example: 8 chains, stripe 4, base 7, seed 1', (t) => {
  const layout = rangeLayout(7, 4, 1n)
  t.deepEqual(layoutChainIndexes(layout), [9, 10, 8, 7])
  const chains = [0, 1, 2, 3, 4, 5, 6, 7, 8].map((i) => resolveChainId(TABLE8, chainRefForChunk(layout, i).index))
  t.deepEqual(chains, [101, 102, 108, 107, 101, 102, 108, 107, 101])
})

test('ChainRange stripes are base + the reference permutation', (t) => {
  t.deepEqual(layoutChainIndexes(rangeLayout(1, 16, 42n)), [11, 10, 1, 4, 5, 14, 13, 12, 8, 15, 9, 6, 7, 0, 3, 2].map((p) => p + 1))
  t.deepEqual(layoutChainIndexes(rangeLayout(101, 16, 3n)), [9, 1, 6, 10, 3, 15, 14, 0, 13, 12, 7, 11, 2, 5, 4, 8].map((p) => p + 101))
  const wide = layoutChainIndexes(rangeLayout(1, 200, 42n))
  t.deepEqual(wide.slice(0, 20), [69, 78, 49, 68, 50, 109, 185, 155, 19, 102, 180, 173, 22, 59, 3, 191, 5, 26, 99, 44].map((p) => p + 1))
})

test('shuffle 0 keeps the range in order; ChainList is taken verbatim; Empty has no chains', (t) => {
  t.deepEqual(layoutChainIndexes(rangeLayout(5, 4, 1n, 0)), [5, 6, 7, 8])
  const list: Layout = { tableId: 1, tableVersion: 2, chunkSize: 4096, stripeSize: 3, chains: { type: 'ChainList', chainIndexes: [3, 1, 2] } }
  const got = layoutChainIndexes(list)
  t.deepEqual(got, [3, 1, 2])
  got[0] = 99
  t.deepEqual(layoutChainIndexes(list), [3, 1, 2], 'callers get a copy')
  t.deepEqual(layoutChainIndexes({ tableId: 1, tableVersion: 0, chunkSize: 4096, stripeSize: 3, chains: { type: 'Empty' } }), [])
})

test('base index arithmetic wraps at 2^32 like a u32', (t) => {
  t.deepEqual(layoutChainIndexes(rangeLayout(0xfffffffe, 4, 0n, 0)), [0xfffffffe, 0xffffffff, 0, 1])
})

test('resolveChainId wraps around the table', (t) => {
  t.is(resolveChainId(TABLE8, 1), 101)
  t.is(resolveChainId(TABLE8, 8), 108)
  t.is(resolveChainId(TABLE8, 9), 101)
  t.is(resolveChainId(TABLE8, 10), 102)
  t.is(resolveChainId(TABLE8, 17), 101)
  t.is(resolveChainId(TABLE8, 0), undefined)
  t.is(resolveChainId([], 1), undefined)
  // a stripe starting at the last chain of the table continues at its start
  const layout = rangeLayout(8, 4, 0n, 0)
  t.deepEqual(
    [0, 1, 2, 3].map((i) => resolveChainId(TABLE8, chainRefForChunk(layout, i).index)),
    [108, 101, 102, 103],
  )
})

test('resolveChainRef: table lookup, latest version, raw chain ids', (t) => {
  const tables: Record<string, number[]> = { '1:1': [11, 12], '1:2': [21, 22, 23] }
  const lookup = (id: number, ver: number): number[] | undefined => tables[`${id}:${ver === 0 ? 2 : ver}`]
  t.is(resolveChainRef({ tableId: 1, tableVersion: 1, index: 3 }, lookup), 11)
  t.is(resolveChainRef({ tableId: 1, tableVersion: 0, index: 3 }, lookup), 23)
  t.is(resolveChainRef({ tableId: 1, tableVersion: 9, index: 1 }, lookup), undefined)
  t.is(resolveChainRef({ tableId: 0, tableVersion: 0, index: 777 }, lookup), 777)
})

test('chainRefForChunk carries table id/version and the stripe slot; tracks offset by 7', (t) => {
  const layout: Layout = { ...rangeLayout(1, 16, 1n), tableId: 3, tableVersion: 5 }
  const stripe = layoutChainIndexes(layout)
  for (const i of [0, 1, 15, 16, 17, 1000, 0xffffffff]) {
    t.deepEqual(chainRefForChunk(layout, i), { tableId: 3, tableVersion: 5, index: stripe[i % 16]! })
  }
  t.is(chainRefForChunk(layout, 2, 1).index, stripe[9])
  invalidArg(t, () => chainRefForChunk({ ...layout, chains: { type: 'Empty' } }, 0))
  invalidArg(t, () => chainRefForChunk(layout, -1))
})

test('chunkIndexOf: floor division, and "file too large" past 2^32 chunks', (t) => {
  t.is(chunkIndexOf(0, 4096), 0)
  t.is(chunkIndexOf(4095, 4096), 0)
  t.is(chunkIndexOf(4096, 4096), 1)
  t.is(chunkIndexOf(2 ** 32 * 4096 - 1, 4096), 0xffffffff)
  const e = t.throws(() => chunkIndexOf(2 ** 32 * 4096, 4096), { instanceOf: StrataError, code: 'INVALID_ARGUMENT' })
  t.regex(e!.message, /file too large/)
  invalidArg(t, () => chunkIndexOf(0, 0))
  invalidArg(t, () => chunkIndexOf(-1, 4096))
  invalidArg(t, () => chunkIndexOf(0.5, 4096))
})

test('mapRange splits on chunk boundaries and tags each piece with its chain slot', (t) => {
  const layout = rangeLayout(7, 4, 1n, 1, 1024)
  t.deepEqual(mapRange(layout, 1000, 2100), [
    { chunkIndex: 0, chainIndex: 9, offsetInChunk: 1000, length: 24, fileOffset: 1000 },
    { chunkIndex: 1, chainIndex: 10, offsetInChunk: 0, length: 1024, fileOffset: 1024 },
    { chunkIndex: 2, chainIndex: 8, offsetInChunk: 0, length: 1024, fileOffset: 2048 },
    { chunkIndex: 3, chainIndex: 7, offsetInChunk: 0, length: 28, fileOffset: 3072 },
  ])
  t.deepEqual(mapRange(layout, 4096 + 5, 10), [{ chunkIndex: 4, chainIndex: 9, offsetInChunk: 5, length: 10, fileOffset: 4101 }])
  t.deepEqual(mapRange(layout, 1024, 1024), [{ chunkIndex: 1, chainIndex: 10, offsetInChunk: 0, length: 1024, fileOffset: 1024 }])
  t.deepEqual(mapRange(layout, 1023, 2), [
    { chunkIndex: 0, chainIndex: 9, offsetInChunk: 1023, length: 1, fileOffset: 1023 },
    { chunkIndex: 1, chainIndex: 10, offsetInChunk: 0, length: 1, fileOffset: 1024 },
  ])
  t.deepEqual(mapRange(layout, 77, 0), [])
})

test('mapRange pieces tile the range exactly', (t) => {
  const layout = rangeLayout(3, 16, 2n, 1, 4096)
  const stripe = layoutChainIndexes(layout)
  for (const [off, len] of [
    [0, 1],
    [0, 4096 * 40],
    [123, 99_999],
    [4095, 4097],
    [4096 * 17 - 1, 2],
  ] as const) {
    const pieces = mapRange(layout, off, len)
    let pos = off
    for (const p of pieces) {
      t.is(p.fileOffset, pos)
      t.true(p.length > 0 && p.offsetInChunk + p.length <= 4096)
      t.is(p.chunkIndex * 4096 + p.offsetInChunk, p.fileOffset)
      t.is(p.chainIndex, stripe[p.chunkIndex % 16])
      pos += p.length
    }
    t.is(pos, off + len)
  }
})

test('mapRange rejects bad ranges and a range reaching past the last chunk', (t) => {
  const layout = rangeLayout(1, 1, 0n, 0, 4096)
  invalidArg(t, () => mapRange(layout, -1, 10))
  invalidArg(t, () => mapRange(layout, 0, -10))
  invalidArg(t, () => mapRange(layout, 2 ** 32 * 4096 - 1, 2))
  t.is(mapRange(layout, 2 ** 32 * 4096 - 1, 1).length, 1)
})

test('ChunkId of a mapped piece: 00 00 | ino BE | 00 00 | i BE', (t) => {
  const layout = rangeLayout(1, 4, 1n, 1, 1 << 20)
  const [p] = mapRange(layout, 5 * (1 << 20) + 7, 1)
  const id = chunkIdOf(0x0000_0000_0123_4567n, p!.chunkIndex)
  t.deepEqual([...id], [0, 0, 0, 0, 0, 0, 0x01, 0x23, 0x45, 0x67, 0, 0, 0, 0, 0, 5])
})

test('validateLayout accepts well-formed layouts', (t) => {
  t.notThrows(() => validateLayout(rangeLayout(1, 16, 1n)))
  t.notThrows(() => validateLayout({ tableId: 1, tableVersion: 1, chunkSize: 2 ** 31, stripeSize: 1, chains: { type: 'ChainRange', baseIndex: 1, shuffle: 0, seed: 0n } }))
  t.notThrows(() => validateLayout({ tableId: 0, tableVersion: 0, chunkSize: 512, stripeSize: 2, chains: { type: 'ChainList', chainIndexes: [900, 901] } }))
  t.notThrows(() => validateLayout({ tableId: 2, tableVersion: 3, chunkSize: 512, stripeSize: 2, chains: { type: 'ChainList', chainIndexes: [1, 2] } }))
  t.notThrows(() => validateLayout({ tableId: 1, tableVersion: 0, chunkSize: 512, stripeSize: 2, chains: { type: 'Empty' } }, true))
})

test('validateLayout rejects each invalid shape', (t) => {
  const good = rangeLayout(1, 4, 1n)
  const cases: [string, Layout, boolean?][] = [
    ['chunkSize 0', { ...good, chunkSize: 0 }],
    ['chunkSize not a power of two', { ...good, chunkSize: 3 * 1024 }],
    ['chunkSize too big', { ...good, chunkSize: 2 ** 32 }],
    ['stripe 0', { ...good, stripeSize: 0 }],
    ['ChainRange table 0', { ...good, tableId: 0 }],
    ['ChainRange version 0', { ...good, tableVersion: 0 }],
    ['ChainRange base 0', { ...good, chains: { type: 'ChainRange', baseIndex: 0, shuffle: 1, seed: 1n } }],
    ['unknown shuffle', { ...good, chains: { type: 'ChainRange', baseIndex: 1, shuffle: 2 as 1, seed: 1n } }],
    ['seed out of range', { ...good, chains: { type: 'ChainRange', baseIndex: 1, shuffle: 1, seed: 1n << 64n } }],
    ['ChainList size mismatch', { ...good, chains: { type: 'ChainList', chainIndexes: [1, 2, 3] } }],
    ['ChainList zero index', { ...good, chains: { type: 'ChainList', chainIndexes: [1, 0, 3, 4] } }],
    ['ChainList table without version', { ...good, tableVersion: 0, chains: { type: 'ChainList', chainIndexes: [1, 2, 3, 4] } }],
    ['ChainList version without table', { ...good, tableId: 0, tableVersion: 2, chains: { type: 'ChainList', chainIndexes: [1, 2, 3, 4] } }],
    ['Empty not allowed', { ...good, chains: { type: 'Empty' } }],
    ['Empty with table 0', { ...good, tableId: 0, chains: { type: 'Empty' } }, true],
    ['unknown chains type', { ...good, chains: { type: 'Bogus' } as unknown as Layout['chains'] }],
  ]
  for (const [name, layout, allowEmpty] of cases) invalidArg(t, () => validateLayout(layout, allowEmpty ?? false), name)
})

test('allocateChainRange: base = counter % count + 1, counter advances by stripe mod count', (t) => {
  const common = { tableId: 1, tableVersion: 4, chunkSize: 1 << 20, stripeSize: 4, chainCount: 10, seed: 1n }
  const a = allocateChainRange({ ...common, counter: 0 })
  t.deepEqual(a.layout, { tableId: 1, tableVersion: 4, chunkSize: 1 << 20, stripeSize: 4, chains: { type: 'ChainRange', baseIndex: 1, shuffle: 1, seed: 1n } })
  t.is(a.nextCounter, 4)
  const b = allocateChainRange({ ...common, counter: a.nextCounter })
  t.is(b.layout.chains.type === 'ChainRange' && b.layout.chains.baseIndex, 5)
  t.is(b.nextCounter, 8)
  const c = allocateChainRange({ ...common, counter: b.nextCounter })
  t.is(c.layout.chains.type === 'ChainRange' && c.layout.chains.baseIndex, 9)
  t.is(c.nextCounter, 2)
  // base 9 of 10 with stripe 4 wraps: indexes 9, 10, 11, 12 -> chains 9, 10, 1, 2
  t.deepEqual(
    layoutChainIndexes(c.layout)
      .map((i) => resolveChainId([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], i))
      .sort((x, y) => x! - y!),
    [1, 2, 9, 10],
  )
})

test('allocateChainRange: random start is a multiple of the stripe; unset marker honoured', (t) => {
  const common = { tableId: 1, tableVersion: 1, chunkSize: 4096, stripeSize: 4, chainCount: 10, seed: 2n }
  const r = allocateChainRange({ ...common, randomBelow: (b) => { t.is(b, 10); return 7 } })
  t.is(r.layout.chains.type === 'ChainRange' && r.layout.chains.baseIndex, 5)
  t.is(r.nextCounter, 8)
  const u = allocateChainRange({ ...common, counter: ALLOC_COUNTER_UNSET, randomBelow: () => 3 })
  t.is(u.layout.chains.type === 'ChainRange' && u.layout.chains.baseIndex, 1)
  t.is(initialAllocCounter(200, 16, () => 199), 192)
  for (let i = 0; i < 50; i++) t.is(initialAllocCounter(100, 7) % 7, 0)
})

test('allocateChainRange: picks a safe seed from the rng, skipping unsafe ones', (t) => {
  const seeds = [6853942027173882469n, 472380080658457497n, 42n]
  let i = 0
  const r = allocateChainRange({ tableId: 1, tableVersion: 1, chunkSize: 4096, stripeSize: 200, chainCount: 200, counter: 0, rng: () => seeds[i++]! })
  t.is(r.layout.chains.type === 'ChainRange' && r.layout.chains.seed, 42n)
  const d = allocateChainRange({ tableId: 1, tableVersion: 1, chunkSize: 4096, stripeSize: 16, chainCount: 64, counter: 0 })
  t.true(d.layout.chains.type === 'ChainRange' && isSafeSeed(d.layout.chains.seed, 16))
  const stripe = layoutChainIndexes(d.layout)
  t.deepEqual([...stripe].sort((a, b) => a - b), Array.from({ length: 16 }, (_, k) => k + 1))
  t.deepEqual(stripe, shufflePermutation((d.layout.chains as { seed: bigint }).seed, 16).map((p) => p + 1))
})

test('allocateChainRange: refusals', (t) => {
  const common = { tableId: 1, tableVersion: 1, chunkSize: 4096, stripeSize: 4, chainCount: 10, counter: 0, seed: 1n }
  invalidArg(t, () => allocateChainRange({ ...common, chainCount: 3 }), 'fewer chains than stripe')
  invalidArg(t, () => allocateChainRange({ ...common, chainCount: 0 }), 'no chains')
  invalidArg(t, () => allocateChainRange({ ...common, tableId: 0 }), 'table 0')
  invalidArg(t, () => allocateChainRange({ ...common, tableVersion: 0 }), 'version 0')
  invalidArg(t, () => allocateChainRange({ ...common, chunkSize: 1000 }), 'chunk size')
  invalidArg(t, () => allocateChainRange({ ...common, stripeSize: 200, chainCount: 200, seed: 472380080658457497n }), 'unsafe fixed seed')
  invalidArg(t, () => allocateChainRange({ ...common, seed: undefined, rng: () => 472380080658457497n, stripeSize: 200, chainCount: 200 }), 'no safe seed found')
})
