// Offset → chunk → chain mapping of the file client, read-result rules, and
// open-flag/path parsing. Pure functions, no cluster.

import test from 'ava'
import { chunkIdOf, parseChunkId } from '../../../../fs/common/chunk-id.js'
import type { Layout } from '../../../../fs/common/layout.js'
import type { RoutingInfo } from '../../../../fs/common/types.js'
import {
  chunkCount,
  lastChunkOf,
  normalizePath,
  plainPath,
  baseName,
  dirName,
  joinPath,
  parseOpenFlags,
  pathAt,
  planPieces,
  readOutcome,
  stripeChainIds,
  assembleRead,
  type ChunkPiece,
} from '../../../../fs/client/index.js'
import { isStrataError } from '../../../../fs/common/errors.js'
import type { ChunkReadResult } from '../../../../fs/client/index.js'

function routing(tables: Record<number, Record<number, number[]>>): RoutingInfo {
  const chainTables: RoutingInfo['chainTables'] = {}
  for (const [id, versions] of Object.entries(tables)) {
    chainTables[id] = {}
    for (const [v, chains] of Object.entries(versions)) {
      chainTables[id]![v] = { chainTableId: Number(id), chainTableVersion: Number(v), chains, desc: '' }
    }
  }
  return { routingInfoVersion: 7, bootstrapping: false, nodes: {}, chainTables, chains: {}, targets: {} }
}

const KiB = 1024

test('stripe chains: the worked example of ref §2.5 (table of 8, stripe 4, base 7, seed 1)', (t) => {
  const ri = routing({ 1: { 1: [101, 102, 103, 104, 105, 106, 107, 108] } })
  const layout: Layout = { tableId: 1, tableVersion: 1, chunkSize: 64 * KiB, stripeSize: 4, chains: { type: 'ChainRange', baseIndex: 7, shuffle: 1, seed: 1n } }
  const stripe = stripeChainIds(layout, ri)
  t.deepEqual(stripe, [101, 102, 108, 107])
  // chunk i → stripe[i % 4]: chunk 4 lands on 101 again
  const pieces = planPieces(42n, layout, stripe, 0, 5 * 64 * KiB)
  t.deepEqual(
    pieces.map((p) => p.chainId),
    [101, 102, 108, 107, 101],
  )
  t.deepEqual(
    pieces.map((p) => p.chunkIndex),
    [0, 1, 2, 3, 4],
  )
  // version 0 means latest; an unknown table is a retryable routing error
  t.deepEqual(stripeChainIds({ ...layout, chains: { type: 'ChainList', chainIndexes: [1, 2] }, stripeSize: 2, tableVersion: 1 }, ri), [101, 102])
  const e = t.throws(() => stripeChainIds({ ...layout, tableId: 9 }, ri))
  t.true(isStrataError(e, 'ROUTING_ERROR'))
  // raw chain ids when tableId = tableVersion = 0
  t.deepEqual(stripeChainIds({ tableId: 0, tableVersion: 0, chunkSize: 4096, stripeSize: 2, chains: { type: 'ChainList', chainIndexes: [7, 9] } }, ri), [7, 9])
})

test('pieces: split on chunk boundaries, buffer offsets, chunk ids', (t) => {
  const layout: Layout = { tableId: 1, tableVersion: 1, chunkSize: 64 * KiB, stripeSize: 2, chains: { type: 'ChainRange', baseIndex: 1, shuffle: 0, seed: 0n } }
  const stripe = [11, 12]
  const off = 64 * KiB - 100
  const pieces = planPieces(0x1234n, layout, stripe, off, 200 + 64 * KiB)
  t.is(pieces.length, 3)
  t.deepEqual(
    pieces.map((p) => [p.chunkIndex, p.chainId, p.offsetInChunk, p.length, p.fileOffset, p.bufOffset]),
    [
      [0, 11, 64 * KiB - 100, 100, off, 0],
      [1, 12, 0, 64 * KiB, 64 * KiB, 100],
      [2, 11, 0, 100, 128 * KiB, 100 + 64 * KiB],
    ],
  )
  t.deepEqual(pieces[2]!.chunkId, chunkIdOf(0x1234n, 2))
  t.deepEqual(parseChunkId(pieces[1]!.chunkId), { tenant: 0, inode: 0x1234n, track: 0, chunkIndex: 1 })
  // sum of lengths is the request
  t.is(
    pieces.reduce((n, p) => n + p.length, 0),
    200 + 64 * KiB,
  )
  t.deepEqual(planPieces(1n, layout, stripe, 5, 0), [])
  // random ranges: pieces tile the range exactly and never cross a chunk
  for (let i = 0; i < 200; i++) {
    const o = Math.floor(Math.random() * 10 * 64 * KiB)
    const l = 1 + Math.floor(Math.random() * 3 * 64 * KiB)
    const ps = planPieces(5n, layout, stripe, o, l)
    let pos = o
    for (const p of ps) {
      t.is(p.fileOffset, pos)
      t.is(p.bufOffset, pos - o)
      t.is(p.chunkIndex, Math.floor(pos / (64 * KiB)))
      t.true(p.offsetInChunk + p.length <= 64 * KiB)
      t.is(p.chainId, stripe[p.chunkIndex % 2])
      pos += p.length
    }
    t.is(pos, o + l)
  }
})

test('chunk counts and the last chunk of a truncated file', (t) => {
  t.is(chunkCount(0, 4096), 0)
  t.is(chunkCount(1, 4096), 1)
  t.is(chunkCount(4096, 4096), 1)
  t.is(chunkCount(4097, 4096), 2)
  t.is(lastChunkOf(0, 4096), null)
  t.deepEqual(lastChunkOf(100, 65536), { index: 0, length: 100 })
  t.deepEqual(lastChunkOf(65536, 65536), { index: 0, length: 65536 })
  t.deepEqual(lastChunkOf(200_000, 65536), { index: 3, length: 200_000 - 3 * 65536 })
})

function pcs(lens: number[]): Pick<ChunkPiece, 'bufOffset' | 'length'>[] {
  let o = 0
  return lens.map((l) => {
    const p = { bufOffset: o, length: l }
    o += l
    return p
  })
}

test('read outcome: trailing shortfall is EOF, earlier shortfalls are holes (3FS PioV)', (t) => {
  // everything there
  t.deepEqual(readOutcome(pcs([10, 10]), [10, 10]), { bytes: 20, hole: false, zeroRanges: [] })
  // the last chunk is short: EOF inside it
  t.deepEqual(readOutcome(pcs([10, 10]), [10, 4]), { bytes: 14, hole: false, zeroRanges: [] })
  // a missing chunk in the middle is a hole
  t.deepEqual(readOutcome(pcs([10, 10, 10]), [10, 0, 3]), { bytes: 23, hole: true, zeroRanges: [[10, 20]] })
  // a short chunk followed by data: the rest of the short chunk is zero
  t.deepEqual(readOutcome(pcs([10, 10, 10]), [4, 0, 10]), { bytes: 30, hole: true, zeroRanges: [[4, 20]] })
  // nothing at all: 0 bytes (past EOF)
  t.deepEqual(readOutcome(pcs([10, 10]), [0, 0]), { bytes: 0, hole: false, zeroRanges: [] })
  // only a leading hole then data
  t.deepEqual(readOutcome(pcs([10, 10]), [0, 1]), { bytes: 11, hole: true, zeroRanges: [[0, 10]] })
})

test('assembleRead copies data, zero-fills holes, honours FORBID_READ_HOLES and reports chunk errors', async (t) => {
  const pieces = planPieces(1n, { tableId: 1, tableVersion: 1, chunkSize: 8, stripeSize: 1, chains: { type: 'ChainList', chainIndexes: [1] } }, [1], 4, 16)
  // pieces: [4,8) of chunk 0 (4 bytes), chunk 1 (8 bytes), [0,4) of chunk 2
  t.deepEqual(
    pieces.map((p) => p.length),
    [4, 8, 4],
  )
  const ok = (data: Buffer): ChunkReadResult => ({ ok: true, data, found: data.length > 0, commitVer: 1, updateVer: 1, commitChainVer: 1, targetId: 1 })
  const target = Buffer.alloc(20, 0xee)
  const n = assembleRead(pieces, [ok(Buffer.from('abcd')), ok(Buffer.alloc(0)), ok(Buffer.from('xy'))], target, 2, true)
  t.is(n, 14)
  t.deepEqual(target.subarray(2, 16), Buffer.concat([Buffer.from('abcd'), Buffer.alloc(8), Buffer.from('xy')]))
  t.is(target[0], 0xee)
  t.is(target[16], 0xee)
  const forbidden = assembleRead(pieces, [ok(Buffer.from('abcd')), ok(Buffer.alloc(0)), ok(Buffer.from('xy'))], Buffer.alloc(16), 0, false)
  t.true(isStrataError(forbidden, 'IO_ERROR'))
  // no hole: fine even when forbidden
  t.is(assembleRead(pieces, [ok(Buffer.from('abcd')), ok(Buffer.from('12345678')), ok(Buffer.from('x'))], Buffer.alloc(16), 0, false), 13)
  const failed = assembleRead(pieces, [ok(Buffer.from('abcd')), { ok: false, error: new (await import('../../../../fs/common/errors.js')).StrataError('CHAIN_UNAVAILABLE') }, ok(Buffer.from('x'))], Buffer.alloc(16), 0, true)
  t.true(isStrataError(failed, 'CHAIN_UNAVAILABLE'))
})

test('open flags and paths', (t) => {
  t.deepEqual(parseOpenFlags('r'), { access: 'r' })
  t.deepEqual(parseOpenFlags('w'), { access: 'w', create: true, trunc: true })
  t.deepEqual(parseOpenFlags('wx'), { access: 'w', create: true, trunc: true, excl: true })
  t.deepEqual(parseOpenFlags('a+'), { access: 'rw', create: true, append: true })
  t.deepEqual(parseOpenFlags(0o1 | 0o100 | 0o1000), { access: 'w', create: true, trunc: true })
  t.deepEqual(parseOpenFlags(2 | 128 | 64), { access: 'rw', create: true, excl: true })
  t.deepEqual(parseOpenFlags({ access: 'rw', trunc: true }), { access: 'rw', trunc: true })
  t.throws(() => parseOpenFlags('q'))
  // what ends a path is kept: a trailing slash needs a directory, a last '.' cannot be removed
  t.is(normalizePath('/a//b/./c/'), '/a/b/c/')
  t.is(normalizePath('/a//b/./c'), '/a/b/c')
  t.is(normalizePath('/a/b/.'), '/a/b/.')
  t.is(normalizePath('/a/b/./'), '/a/b/.')
  t.is(normalizePath('/a/b/../'), '/a/b/..')
  t.is(normalizePath('/.'), '/')
  t.is(normalizePath('//'), '/')
  t.is(plainPath('/a/b/.'), '/a/b')
  t.is(plainPath('/a/b/'), '/a/b')
  t.is(plainPath('/./'), '/')
  t.is(baseName('/a/b/'), 'b')
  t.is(dirName('/a/b/.'), '/a')
  t.is(joinPath('/a/', 'c'), '/a/c')
  t.deepEqual(pathAt('/d/'), { parent: 0n, path: '/d/' })
  t.deepEqual(pathAt('/d/.'), { parent: 0n, path: '/d/.' })
  t.is(normalizePath('x/y', '/base'), '/base/x/y')
  t.is(normalizePath('/a/../b'), '/a/../b')
  t.is(normalizePath('/'), '/')
  t.deepEqual(pathAt('/'), { parent: 0n })
  t.deepEqual(pathAt('//d/f'), { parent: 0n, path: '/d/f' })
  t.throws(() => normalizePath(''))
})
