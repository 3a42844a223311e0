// 16-byte chunk ids, laid out as 3FS lays them out:
//   [tenant u8 = 0][reserved u8 = 0][inode u64 BE][track u16 BE][chunkIndex u32 BE]
// Big-endian everywhere so that plain byte order is numeric order: storage
// targets keep chunks in a byte-ordered KV, and "all chunks of a file" or
// "chunks from index k on" must be contiguous key ranges.

import { StrataError } from './errors.js'

export const CHUNK_ID_LENGTH = 16
export const MAX_CHUNK_INDEX = 0xffffffff
export const MAX_TRACK = 0xffff
const U64_MAX = (1n << 64n) - 1n

export interface ParsedChunkId {
  tenant: number
  inode: bigint
  track: number
  chunkIndex: number
}

function invalid(msg: string): StrataError {
  return new StrataError('INVALID_ARGUMENT', msg)
}

function checkInode(inode: bigint): void {
  if (typeof inode !== 'bigint' || inode < 0n || inode > U64_MAX) {
    throw invalid(`inode id must be a u64 bigint, got ${String(inode)}`)
  }
}

function checkU(name: string, v: number, max: number): void {
  if (!Number.isInteger(v) || v < 0 || v > max) throw invalid(`${name} must be an integer in [0, ${max}], got ${v}`)
}

/** The id of chunk `chunkIndex` of inode `inode` (track 0 unless multi-track). */
export function chunkIdOf(inode: bigint, chunkIndex: number, track = 0): Buffer {
  checkInode(inode)
  checkU('chunkIndex', chunkIndex, MAX_CHUNK_INDEX)
  checkU('track', track, MAX_TRACK)
  const b = Buffer.alloc(CHUNK_ID_LENGTH)
  b.writeBigUInt64BE(inode, 2)
  b.writeUInt16BE(track, 10)
  b.writeUInt32BE(chunkIndex, 12)
  return b
}

export function isChunkId(b: unknown): b is Buffer {
  return Buffer.isBuffer(b) && b.length === CHUNK_ID_LENGTH
}

function checkChunkId(b: unknown): asserts b is Buffer {
  if (!isChunkId(b)) {
    const got = Buffer.isBuffer(b) ? `${b.length} bytes` : typeof b
    throw invalid(`chunk id must be a ${CHUNK_ID_LENGTH}-byte Buffer, got ${got}`)
  }
}

export function parseChunkId(b: Buffer): ParsedChunkId {
  checkChunkId(b)
  return {
    tenant: b[0]!,
    inode: b.readBigUInt64BE(2),
    track: b.readUInt16BE(10),
    chunkIndex: b.readUInt32BE(12),
  }
}

/** Meta-server rendering: `0x<inode as 16 hex digits>-<track>-<chunkIndex>` (decimal track and index). */
export function formatChunkId(b: Buffer): string {
  const { inode, track, chunkIndex } = parseChunkId(b)
  return `0x${inode.toString(16).padStart(16, '0')}-${track}-${chunkIndex}`
}

/** Storage rendering: upper-case hex, a dash after every 4 bytes. */
export function formatChunkIdHex(b: Buffer): string {
  checkChunkId(b)
  const hex = b.toString('hex').toUpperCase()
  return `${hex.slice(0, 8)}-${hex.slice(8, 16)}-${hex.slice(16, 24)}-${hex.slice(24, 32)}`
}

const META_FORM = /^(?:0x)?([0-9a-fA-F]{1,16})-(\d{1,5})-(\d{1,10})$/

/**
 * Accepts what either formatter prints, plus bare 32-digit hex. Like 3FS's
 * storage parser, dashes inside the hex form may sit anywhere. A string with a
 * `0x` prefix, or one whose digits do not add up to 16 bytes, is read as the
 * meta form.
 */
export function parseChunkIdString(s: string): Buffer {
  if (typeof s !== 'string') throw invalid('chunk id string expected')
  const t = s.trim()
  if (!/^0x/i.test(t)) {
    const hex = t.replace(/-/g, '')
    if (hex.length === 32 && /^[0-9a-fA-F]+$/.test(hex)) return Buffer.from(hex, 'hex')
  }
  const m = META_FORM.exec(t.replace(/^0X/, '0x'))
  if (m) {
    const track = Number(m[2])
    const chunk = Number(m[3])
    return chunkIdOf(BigInt(`0x${m[1]}`), chunk, track)
  }
  throw invalid(`not a chunk id: ${JSON.stringify(s)}`)
}

/** `[ChunkId(ino, 0, fromChunk), ChunkId(ino, 1, 0))`: all track-0 chunks of the file from `fromChunk` on. */
export function fileChunkRange(inode: bigint, fromChunk = 0): { begin: Buffer; end: Buffer } {
  checkInode(inode)
  // 3FS refuses all-ones: it is the "no inode" sentinel of its ChunkId.
  if (inode === U64_MAX) throw invalid('inode id 0xffffffffffffffff has no chunks')
  return { begin: chunkIdOf(inode, fromChunk, 0), end: chunkIdOf(inode, 0, 1) }
}

/** Byte order, which is also (inode, track, chunkIndex) order. */
export function compareChunkId(a: Buffer, b: Buffer): number {
  return Buffer.compare(a, b)
}
