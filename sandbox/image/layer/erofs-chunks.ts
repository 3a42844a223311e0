// How a sparse file of a tar is laid out in an EROFS layer: as a CHUNK_BASED
// inode whose chunks that hold no data are holes (nothing stored; they read as
// zeros), so a file of a few KiB of data and gigabytes of hole (lastlog after
// `useradd` of a large uid, a preallocated database) takes a few KiB in the
// layer instead of its size in zeros.
//
// A chunk that holds any data is stored whole (the zeros of the holes inside
// it included), and the block map has one 4-byte entry per chunk. The chunk
// size is the power of two from 4 KiB up that stores the fewest bytes, map
// included: small chunks store fewer zeros, large ones a shorter map.
import type { SparseMap } from './tar-sparse.js'

const BLOCK = 4096
const BLOCK_BITS = 12
/** EROFS's chunk format has 5 bits for the chunk size above the block size */
const MAX_CHUNK_BITS = BLOCK_BITS + 31

export interface ChunkPlan {
  /** log2 of the chunk size */
  bits: number
  /** chunks of the file (block map entries) */
  count: number
  /** indexes of the chunks that hold data, ascending */
  stored: number[]
  /** bytes those chunks take in the image (whole blocks) */
  storedBytes: number
  /** bytes of the block map */
  mapBytes: number
}

/** Blocks from chunk `i` (of size 2^bits) to the end of a file of `size` bytes, at most a chunk's. */
function chunkBytes(i: number, bits: number, size: number): number {
  const start = i * 2 ** bits
  return Math.ceil(Math.min(2 ** bits, size - start) / BLOCK) * BLOCK
}

/** The chunks of size 2^bits that a (sorted, disjoint) data map touches. */
function touched(map: SparseMap, bits: number): number[] {
  const c = 2 ** bits
  const out: number[] = []
  for (let k = 0; k < map.length; k += 2) {
    const off = map[k]!
    const len = map[k + 1]!
    if (len === 0) continue
    const first = Math.floor(off / c)
    const last = Math.floor((off + len - 1) / c)
    for (let i = Math.max(first, out.length > 0 ? out[out.length - 1]! + 1 : 0); i <= last; i++) out.push(i)
  }
  return out
}

/**
 * The layout of a sparse file of `size` bytes with data `map` that stores
 * the fewest bytes, or null when no chunk would be a hole (the file is then
 * stored flat, zeros and all). `maxMapBytes` bounds the block map, which is
 * kept in memory until the layer's metadata is written.
 */
export function planChunks(map: SparseMap, size: number, maxMapBytes: number): ChunkPlan | null {
  let best: ChunkPlan | null = null
  for (let bits = BLOCK_BITS; bits <= MAX_CHUNK_BITS; bits++) {
    const count = Math.ceil(size / 2 ** bits)
    const mapBytes = count * 4
    if (mapBytes > maxMapBytes) continue
    // a chunk count bounded by the map budget keeps this list bounded too
    const stored = touched(map, bits)
    if (stored.length === count) continue
    let storedBytes = 0
    for (const i of stored) storedBytes += chunkBytes(i, bits, size)
    if (best === null || storedBytes + mapBytes < best.storedBytes + best.mapBytes) best = { bits, count, stored, storedBytes, mapBytes }
    if (count <= 1) break
  }
  // flat is no larger (holes of less than a block, or data in every chunk): no map to keep
  if (best && best.storedBytes + best.mapBytes >= Math.ceil(size / BLOCK) * BLOCK) return null
  return best
}

/** Data bytes of a sparse map. */
export function dataBytes(map: SparseMap): number {
  let n = 0
  for (let k = 1; k < map.length; k += 2) n += map[k]!
  return n
}
