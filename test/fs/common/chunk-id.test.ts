import test, { type ExecutionContext } from 'ava'
import {
  chunkIdOf,
  compareChunkId,
  fileChunkRange,
  formatChunkId,
  formatChunkIdHex,
  parseChunkId,
  parseChunkIdString,
} from '../../../fs/common/chunk-id.js'
import { StrataError } from '../../../fs/common/errors.js'

function invalidArg(t: ExecutionContext, fn: () => unknown, message?: string): void {
  t.throws(fn, { instanceOf: StrataError, code: 'INVALID_ARGUMENT' }, message)
}

test('byte layout: 00 00 | inode BE | track BE | chunk index BE', (t) => {
  const id = chunkIdOf(0x0102030405060708n, 0x0a0b0c0d)
  t.is(id.toString('hex'), '0000' + '0102030405060708' + '0000' + '0a0b0c0d')
  t.is(id.length, 16)
  const tracked = chunkIdOf(0x1000n, 3, 0x0102)
  t.is(tracked.toString('hex'), '0000' + '0000000000001000' + '0102' + '00000003')
})

test('extremes of every field', (t) => {
  t.is(chunkIdOf(0n, 0).toString('hex'), '0'.repeat(32))
  t.is(chunkIdOf((1n << 64n) - 1n, 0xffffffff, 0xffff).toString('hex'), '0000' + 'f'.repeat(28))
})

test('parseChunkId inverts chunkIdOf', (t) => {
  for (const [ino, idx, track] of [
    [0n, 0, 0],
    [0x1000n, 1, 0],
    [0x01ff_ffff_ffff_ffffn, 0xffffffff, 0],
    [(1n << 64n) - 1n, 12345, 0xffff],
  ] as const) {
    t.deepEqual(parseChunkId(chunkIdOf(ino, idx, track)), { tenant: 0, inode: ino, track, chunkIndex: idx })
  }
})

test('parseChunkId reports a non-zero tenant byte as is', (t) => {
  const b = chunkIdOf(5n, 6)
  b[0] = 7
  t.is(parseChunkId(b).tenant, 7)
})

test('meta formatting: 0x<16 hex>-<track>-<chunk>', (t) => {
  t.is(formatChunkId(chunkIdOf(0x1000n, 3)), '0x0000000000001000-0-3')
  t.is(formatChunkId(chunkIdOf(0xabcdefn, 4294967295, 2)), '0x0000000000abcdef-2-4294967295')
})

test('storage formatting: upper-case hex in 4-byte groups', (t) => {
  t.is(formatChunkIdHex(chunkIdOf(0x1000n, 3)), '00000000-00000000-10000000-00000003')
  t.is(formatChunkIdHex(chunkIdOf(0xabcdef0123456789n, 0xfedcba98)), '0000ABCD-EF012345-67890000-FEDCBA98')
})

test('parseChunkIdString accepts both renderings and bare hex', (t) => {
  const id = chunkIdOf(0xabcdef0123456789n, 0xfedcba98, 1)
  t.deepEqual(parseChunkIdString(formatChunkId(id)), id)
  t.deepEqual(parseChunkIdString(formatChunkIdHex(id)), id)
  t.deepEqual(parseChunkIdString(id.toString('hex')), id)
  t.deepEqual(parseChunkIdString(id.toString('hex').toUpperCase()), id)
  // dashes anywhere, as 3FS's storage parser allows
  t.deepEqual(parseChunkIdString('0000-abcdef0123456789-0001-fedcba98'), id)
  // meta form without the 0x prefix, short inode hex, 0X prefix
  t.deepEqual(parseChunkIdString('1000-0-3'), chunkIdOf(0x1000n, 3))
  t.deepEqual(parseChunkIdString('0X1000-0-3'), chunkIdOf(0x1000n, 3))
  t.deepEqual(parseChunkIdString('  0x1000-0-3 '), chunkIdOf(0x1000n, 3))
})

test('parseChunkIdString rejects garbage', (t) => {
  for (const s of ['', 'xyz', '0x1000-0', '0x1000-0-3-4', '0x1000-70000-1', '0x1000-0-4294967296', '00'.repeat(15), '00'.repeat(17), '0x' + '1'.repeat(17) + '-0-0']) {
    invalidArg(t, () => parseChunkIdString(s), s)
  }
})

test('input validation', (t) => {
  invalidArg(t, () => chunkIdOf(0n, 2 ** 32))
  invalidArg(t, () => chunkIdOf(0n, -1))
  invalidArg(t, () => chunkIdOf(0n, 1.5))
  invalidArg(t, () => chunkIdOf(-1n, 0))
  invalidArg(t, () => chunkIdOf(1n << 64n, 0))
  invalidArg(t, () => chunkIdOf(0n, 0, 0x10000))
  invalidArg(t, () => chunkIdOf(5 as unknown as bigint, 0))
  invalidArg(t, () => parseChunkId(Buffer.alloc(15)))
  invalidArg(t, () => formatChunkId(Buffer.alloc(17)))
  invalidArg(t, () => formatChunkIdHex('x' as unknown as Buffer))
})

test('fileChunkRange covers exactly the track-0 chunks of one inode', (t) => {
  const { begin, end } = fileChunkRange(0x1000n)
  t.deepEqual(begin, chunkIdOf(0x1000n, 0))
  t.deepEqual(end, chunkIdOf(0x1000n, 0, 1))
  const inside = [chunkIdOf(0x1000n, 0), chunkIdOf(0x1000n, 1), chunkIdOf(0x1000n, 0xffffffff)]
  for (const id of inside) t.true(compareChunkId(begin, id) <= 0 && compareChunkId(id, end) < 0)
  const outside = [chunkIdOf(0xfffn, 0xffffffff, 0xffff), chunkIdOf(0x1001n, 0), chunkIdOf(0x1000n, 0, 1)]
  for (const id of outside) t.false(compareChunkId(begin, id) <= 0 && compareChunkId(id, end) < 0)
  t.deepEqual(fileChunkRange(0x1000n, 7).begin, chunkIdOf(0x1000n, 7))
  invalidArg(t, () => fileChunkRange((1n << 64n) - 1n))
})

test('byte order equals (inode, track, chunk) order', (t) => {
  const tuples: [bigint, number, number][] = [
    [0n, 0, 0],
    [0n, 0, 1],
    [0n, 0, 256],
    [0n, 0, 0xffffffff],
    [0n, 1, 0],
    [1n, 0, 0],
    [0xffn, 0, 0],
    [0x100n, 0, 0],
    [0x0100_0000_0000_0000n, 0, 0],
    [(1n << 64n) - 1n, 0, 0],
  ]
  const ids = tuples.map(([i, tr, c]) => chunkIdOf(i, c, tr))
  const shuffled = [...ids].reverse()
  shuffled.sort(compareChunkId)
  t.deepEqual(shuffled, ids)
  t.is(compareChunkId(ids[0]!, chunkIdOf(0n, 0)), 0)
})
