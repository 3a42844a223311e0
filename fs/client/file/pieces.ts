// Offsets of a file → chunk IOs, computed on the client from the inode's
// layout and the chain table in routing info (3FS §2.5; meta is not on the
// data path). Plus the read-result rules of 3FS's PioV: how per-chunk results
// add up to one read's byte count, where holes are zero-filled, and when a
// trailing shortfall means end of file.

import { StrataError } from '../../common/errors.js'
import { chunkIdOf, MAX_CHUNK_INDEX } from '../../common/chunk-id.js'
import { layoutChainIndexes, mapRange, resolveChainRef, validateLayout, type Layout } from '../../common/layout.js'
import type { ChainId, RoutingInfo } from '../../common/types.js'
import { latestChainTable } from '../../common/types.js'

/** One chunk-sized (or smaller) piece of a file range. */
export interface ChunkPiece {
  chunkIndex: number
  chainId: ChainId
  chunkId: Buffer
  offsetInChunk: number
  length: number
  /** offset in the file */
  fileOffset: number
  /** offset relative to the start of the range (= in the caller's buffer) */
  bufOffset: number
}

/**
 * The chain table a layout refers to, from routing info; version 0 means the
 * latest. Undefined when routing info does not (yet) know it.
 */
export function chainTableOf(ri: RoutingInfo, tableId: number, tableVersion: number): readonly number[] | undefined {
  if (tableVersion === 0) return latestChainTable(ri, tableId)?.chains
  return ri.chainTables[String(tableId)]?.[String(tableVersion)]?.chains
}

/**
 * Chain ids of the layout's stripe, slot by slot (chunk i lives on slot
 * i % stripeSize). Throws ROUTING_ERROR (retryable: a newer routing info may
 * know the table) when a chain cannot be resolved.
 */
export function stripeChainIds(layout: Layout, ri: RoutingInfo): ChainId[] {
  validateLayout(layout)
  const lookup = (id: number, ver: number) => chainTableOf(ri, id, ver)
  return layoutChainIndexes(layout).map((index) => {
    const c = resolveChainRef({ tableId: layout.tableId, tableVersion: layout.tableVersion, index }, lookup)
    if (c === undefined) {
      throw new StrataError(
        'ROUTING_ERROR',
        `chain table ${layout.tableId} version ${layout.tableVersion} index ${index} not found in routing info v${ri.routingInfoVersion}`,
      )
    }
    return c
  })
}

/** Splits [offset, offset+length) of inode `inode` into chunk pieces with their chain ids. */
export function planPieces(inode: bigint, layout: Layout, stripe: readonly ChainId[], offset: number, length: number): ChunkPiece[] {
  if (stripe.length !== layout.stripeSize) throw new StrataError('INVALID_ARGUMENT', `stripe has ${stripe.length} chains, layout says ${layout.stripeSize}`)
  return mapRange(layout, offset, length).map((p) => ({
    chunkIndex: p.chunkIndex,
    chainId: stripe[p.chunkIndex % layout.stripeSize]!,
    chunkId: chunkIdOf(inode, p.chunkIndex),
    offsetInChunk: p.offsetInChunk,
    length: p.length,
    fileOffset: p.fileOffset,
    bufOffset: p.fileOffset - offset,
  }))
}

/** ceil(length / chunkSize): the number of chunks a file of this length has. */
export function chunkCount(length: number, chunkSize: number): number {
  if (!Number.isSafeInteger(length) || length < 0) throw new StrataError('INVALID_ARGUMENT', `bad length ${length}`)
  return Math.ceil(length / chunkSize)
}

/**
 * The largest length a file of this chunk size may have: 2^32 − 1 chunks
 * (the chunk index is a u32, and a truncate names the first chunk past the
 * end, so index 2^32 − 1 must stay addressable), and no more than a
 * JavaScript number holds exactly (FUSE's 64-bit sizes and offsets arrive as
 * doubles: 2^53 + 1 is 2^53 here).
 */
export function maxFileSize(chunkSize: number): number {
  return Math.min(Number.MAX_SAFE_INTEGER, chunkSize * MAX_CHUNK_INDEX)
}

/**
 * META_FILE_TOO_LARGE (EFBIG) for a length or write end past maxFileSize, as
 * a local filesystem answers truncate and pwrite past its limit.
 */
export function checkFileSize(end: number, chunkSize: number, what: string): void {
  const max = maxFileSize(chunkSize)
  if (end > max) throw new StrataError('META_FILE_TOO_LARGE', `${what} ${end} is past the maximum file size ${max} (chunk size ${chunkSize})`)
}

/** The last chunk of a file truncated to `length`: its index and length, or null for length 0. */
export function lastChunkOf(length: number, chunkSize: number): { index: number; length: number } | null {
  const n = chunkCount(length, chunkSize)
  if (n === 0) return null
  const index = n - 1
  if (index > MAX_CHUNK_INDEX) throw new StrataError('META_FILE_TOO_LARGE', `length ${length} needs chunk ${index} > ${MAX_CHUNK_INDEX}`)
  return { index, length: length - index * chunkSize }
}

export interface ReadOutcome {
  /**
   * Bytes of the range the read yields: everything up to the end of the last
   * byte any piece returned. Shortfalls before that are holes (zeros); a
   * shortfall after it is end of file.
   */
  bytes: number
  /** some piece before the end came back short: the range crosses a hole */
  hole: boolean
  /** [start, end) ranges of the caller's buffer that must read as zeros (within `bytes`) */
  zeroRanges: Array<[number, number]>
}

/**
 * 3FS PioV concatenation for one read: `got[i]` is how many bytes piece i
 * returned (0 for a missing chunk). The storage server never returns the
 * back of a chunk without its front, so data always starts at a piece's
 * beginning.
 */
export function readOutcome(pieces: readonly Pick<ChunkPiece, 'bufOffset' | 'length'>[], got: readonly number[]): ReadOutcome {
  let bytes = 0
  for (let i = 0; i < pieces.length; i++) {
    const g = Math.min(got[i] ?? 0, pieces[i]!.length)
    if (g > 0) bytes = Math.max(bytes, pieces[i]!.bufOffset + g)
  }
  const zeroRanges: Array<[number, number]> = []
  let hole = false
  for (let i = 0; i < pieces.length; i++) {
    const p = pieces[i]!
    const g = Math.min(got[i] ?? 0, p.length)
    const start = p.bufOffset + g
    const end = Math.min(p.bufOffset + p.length, bytes)
    if (start < end) {
      hole = true
      const last = zeroRanges[zeroRanges.length - 1]
      if (last && last[1] === start) last[1] = end
      else zeroRanges.push([start, end])
    }
  }
  return { bytes, hole, zeroRanges }
}
