// File layout: which chains hold which chunks of a file. Clients compute this
// locally from the inode, so every step (chunk index, stripe slot, seeded
// shuffle, chain-table wrap-around) must match 3FS exactly or a file written
// by one implementation would be read from the wrong chains by the other.

import { StrataError } from './errors.js'
import { MAX_CHUNK_INDEX } from './chunk-id.js'
import { findSafeSeed, isSafeSeed, randomU64, shufflePermutationShared } from './shuffle.js'

export type LayoutChains =
  /** Directories only: "allocate chains when a file is created here". */
  | { type: 'Empty' }
  /** Stripe = `stripeSize` consecutive table indexes from `baseIndex` (1-based), optionally shuffled. */
  | { type: 'ChainRange'; baseIndex: number; shuffle: 0 | 1; seed: bigint }
  /** Explicit table indexes; with tableId = tableVersion = 0 they are raw chain ids. */
  | { type: 'ChainList'; chainIndexes: number[] }

export interface Layout {
  tableId: number
  /** 0 = latest version of the table */
  tableVersion: number
  chunkSize: number
  stripeSize: number
  chains: LayoutChains
}

export const SHUFFLE_NONE = 0
export const SHUFFLE_MT19937 = 1

/** 3FS spreads extra tracks of a multi-track file over the stripe by this stride; tracks are unused so far. */
export const TRACK_OFFSET_FOR_CHAIN = 7

const U32_MAX = 0xffffffff
const U64_MAX = (1n << 64n) - 1n

function invalid(msg: string): StrataError {
  return new StrataError('INVALID_ARGUMENT', msg)
}

function isU32(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= U32_MAX
}

function isPowerOfTwo(v: number): boolean {
  return v > 0 && 2 ** Math.round(Math.log2(v)) === v
}

/**
 * Throws INVALID_ARGUMENT unless the layout is usable. An Empty layout is only
 * acceptable where a directory's default layout is meant (`allowEmpty`).
 */
export function validateLayout(layout: Layout, allowEmpty = false): void {
  if (layout === null || typeof layout !== 'object') throw invalid('layout must be an object')
  const { tableId, tableVersion, chunkSize, stripeSize, chains } = layout
  if (!isU32(tableId)) throw invalid(`layout tableId must be a u32, got ${tableId}`)
  if (!isU32(tableVersion)) throw invalid(`layout tableVersion must be a u32, got ${tableVersion}`)
  if (!isU32(chunkSize)) throw invalid(`layout chunkSize must be a u32, got ${chunkSize}`)
  if (chunkSize === 0) throw invalid('layout chunkSize is 0')
  if (!isPowerOfTwo(chunkSize)) throw invalid(`layout chunkSize ${chunkSize} is not a power of 2`)
  if (!isU32(stripeSize)) throw invalid(`layout stripeSize must be a u32, got ${stripeSize}`)
  if (stripeSize === 0) throw invalid('layout stripeSize is 0')
  if (chains === null || typeof chains !== 'object') throw invalid('layout chains must be an object')
  switch (chains.type) {
    case 'Empty':
      if (!allowEmpty) throw invalid('layout is empty')
      if (tableId === 0) throw invalid('layout refers to chain table 0')
      return
    case 'ChainRange':
      if (tableId === 0) throw invalid('layout refers to chain table 0')
      if (tableVersion === 0) throw invalid('a ChainRange layout needs a concrete chain table version, got 0')
      if (!isU32(chains.baseIndex)) throw invalid(`layout baseIndex must be a u32, got ${chains.baseIndex}`)
      if (chains.baseIndex === 0) throw invalid('layout baseIndex is 0 (chain indexes are 1-based)')
      if (chains.shuffle !== SHUFFLE_NONE && chains.shuffle !== SHUFFLE_MT19937) {
        throw invalid(`unknown layout shuffle ${String(chains.shuffle)}`)
      }
      if (typeof chains.seed !== 'bigint' || chains.seed < 0n || chains.seed > U64_MAX) {
        throw invalid(`layout seed must be a u64 bigint, got ${String(chains.seed)}`)
      }
      return
    case 'ChainList':
      // 3FS means "either both zero (raw chain ids) or neither"; its check is
      // written `a == 0 != b == 0`, which C++ groups differently and so lets
      // (0, v>=2) through. We enforce what it means.
      if ((tableId === 0) !== (tableVersion === 0)) {
        throw invalid(`layout chain table ${tableId} version ${tableVersion}: both or neither must be 0`)
      }
      if (!Array.isArray(chains.chainIndexes)) throw invalid('layout chainIndexes must be an array')
      if (chains.chainIndexes.length !== stripeSize) {
        throw invalid(`layout chain list size ${chains.chainIndexes.length} != stripeSize ${stripeSize}`)
      }
      for (const c of chains.chainIndexes) {
        if (!isU32(c)) throw invalid(`layout chain index must be a u32, got ${c}`)
        if (c === 0) throw invalid('layout chain list contains chain index 0')
      }
      return
    default:
      throw invalid(`unknown layout chains type ${String((chains as { type?: unknown }).type)}`)
  }
}

/**
 * The chunk sizes a NEW layout may name: a power of two in [4 KiB, 2 GiB].
 * 3FS's meta takes any non-zero power of two in a u32 (Layout::valid), but its
 * storage cannot hold chunks below 4 KiB (the chunk file store refuses them),
 * and here a chunk of a few bytes makes one storage write, one chunk record and
 * one chain lookup per few bytes of a file (a put of a megabyte into chunk size
 * 1 is a million writes) while the file's size limit, chunk size x (2^32-1),
 * falls to 4 GiB. Layouts already stored are only held to validateLayout, so a
 * file or directory written with a smaller chunk size stays usable.
 */
export const MIN_CHUNK_SIZE = 4096
/** the largest power of two a u32 holds */
export const MAX_CHUNK_SIZE = 2 ** 31

/** Throws INVALID_ARGUMENT unless `chunkSize` may be given to a new layout (see MIN_CHUNK_SIZE). */
export function checkChunkSize(chunkSize: number, what = 'chunk size'): void {
  if (typeof chunkSize !== 'number' || !Number.isInteger(chunkSize) || chunkSize < MIN_CHUNK_SIZE || chunkSize > MAX_CHUNK_SIZE || !isPowerOfTwo(chunkSize)) {
    throw invalid(`${what} must be a power of two from 4K to 2G (${MIN_CHUNK_SIZE} to ${MAX_CHUNK_SIZE}), got ${String(chunkSize)}`)
  }
}

/** validateLayout for a layout that a request gives (create, mkdirs, setAttr, init-cluster): also its chunk size's range. */
export function validateNewLayout(layout: Layout, allowEmpty = false): void {
  validateLayout(layout, allowEmpty)
  checkChunkSize(layout.chunkSize, 'layout chunkSize')
}

export function isEmptyLayout(layout: Layout): boolean {
  return layout.chains.type === 'Empty'
}

/**
 * The stripe's table indexes in slot order (length stripeSize; empty for an
 * Empty layout). ChainRange: `baseIndex + perm[j]` where perm is the seeded
 * shuffle of [0..stripe-1]; the addition wraps at 2^32 as 3FS's u32 does.
 */
export function layoutChainIndexes(layout: Layout): number[] {
  const c = layout.chains
  switch (c.type) {
    case 'Empty':
      return []
    case 'ChainList':
      return c.chainIndexes.slice()
    case 'ChainRange': {
      const n = layout.stripeSize
      if (c.shuffle === SHUFFLE_NONE) return Array.from({ length: n }, (_, i) => (c.baseIndex + i) >>> 0)
      if (c.shuffle !== SHUFFLE_MT19937) throw invalid(`unknown layout shuffle ${String(c.shuffle)}`)
      const perm = shufflePermutationShared(c.seed, n)
      return perm.map((p) => (c.baseIndex + p) >>> 0)
    }
    default:
      throw invalid(`unknown layout chains type ${String((c as { type?: unknown }).type)}`)
  }
}

/** `floor(offset / chunkSize)`; a file may not have more than 2^32 chunks. */
export function chunkIndexOf(offset: number, chunkSize: number): number {
  if (!Number.isSafeInteger(offset) || offset < 0) throw invalid(`offset must be a non-negative safe integer, got ${offset}`)
  if (!isU32(chunkSize) || chunkSize === 0) throw invalid(`chunkSize must be a non-zero u32, got ${chunkSize}`)
  const chunk = Math.floor(offset / chunkSize)
  if (chunk > MAX_CHUNK_INDEX) throw invalid(`file too large: offset ${offset} is in chunk ${chunk} > ${MAX_CHUNK_INDEX}`)
  return chunk
}

export interface ChainRef {
  tableId: number
  tableVersion: number
  /** 1-based index into the chain table (or a raw chain id when tableId = tableVersion = 0) */
  index: number
}

/** The chain slot of a chunk: `stripe[chunkIndex % stripeSize]`. */
export function chainRefForChunk(layout: Layout, chunkIndex: number, track = 0): ChainRef {
  if (!Number.isSafeInteger(chunkIndex) || chunkIndex < 0) throw invalid(`chunk index must be a non-negative integer, got ${chunkIndex}`)
  if (!Number.isInteger(track) || track < 0 || track > 0xffff) throw invalid(`track must be a u16, got ${track}`)
  const stripe = layoutChainIndexes(layout)
  if (layout.stripeSize === 0 || stripe.length === 0) throw invalid('layout has no chains')
  const slot = (chunkIndex + track * TRACK_OFFSET_FOR_CHAIN) % layout.stripeSize
  const index = stripe[slot]
  if (index === undefined) throw invalid(`layout stripe has ${stripe.length} chains, stripeSize is ${layout.stripeSize}`)
  return { tableId: layout.tableId, tableVersion: layout.tableVersion, index }
}

/**
 * Chain id for a 1-based table index, wrapping around the table so that a
 * range starting near the end continues at the beginning. Undefined for index
 * 0 or an empty table (3FS: not found).
 */
export function resolveChainId(tableChains: readonly number[], index: number): number | undefined {
  if (!Number.isSafeInteger(index) || index <= 0 || tableChains.length === 0) return undefined
  return tableChains[(index - 1) % tableChains.length]
}

/**
 * Full ChainRef resolution. `lookupTable(tableId, tableVersion)` returns the
 * table's chain list (version 0 meaning the latest) or undefined. A ref with
 * tableId = tableVersion = 0 names a chain id directly.
 */
export function resolveChainRef(
  ref: ChainRef,
  lookupTable: (tableId: number, tableVersion: number) => readonly number[] | undefined,
): number | undefined {
  if (ref.tableId === 0 && ref.tableVersion === 0) return ref.index
  const chains = lookupTable(ref.tableId, ref.tableVersion)
  return chains === undefined ? undefined : resolveChainId(chains, ref.index)
}

export interface RangePiece {
  chunkIndex: number
  /** table index of the chunk's chain (see resolveChainId) */
  chainIndex: number
  offsetInChunk: number
  length: number
  fileOffset: number
}

/** Splits `[offset, offset+length)` of a file on chunk boundaries. */
export function mapRange(layout: Layout, offset: number, length: number): RangePiece[] {
  if (!Number.isSafeInteger(offset) || offset < 0) throw invalid(`offset must be a non-negative safe integer, got ${offset}`)
  if (!Number.isSafeInteger(length) || length < 0) throw invalid(`length must be a non-negative safe integer, got ${length}`)
  if (!Number.isSafeInteger(offset + length)) throw invalid(`range end ${offset + length} is not a safe integer`)
  const { chunkSize } = layout
  if (length === 0) return []
  // Check the last byte first so an oversized request fails before any work.
  chunkIndexOf(offset + length - 1, chunkSize)
  const stripe = layoutChainIndexes(layout)
  if (layout.stripeSize === 0 || stripe.length !== layout.stripeSize) throw invalid('layout has no chains')
  const pieces: RangePiece[] = []
  let pos = offset
  const end = offset + length
  while (pos < end) {
    const chunkIndex = chunkIndexOf(pos, chunkSize)
    const chunkStart = chunkIndex * chunkSize
    const offsetInChunk = pos - chunkStart
    const len = Math.min(end, chunkStart + chunkSize) - pos
    pieces.push({ chunkIndex, chainIndex: stripe[chunkIndex % layout.stripeSize]!, offsetInChunk, length: len, fileOffset: pos })
    pos += len
  }
  return pieces
}

/** Marker for a directory's chain allocation counter that was never set (u32 -1 in 3FS). */
export const ALLOC_COUNTER_UNSET = 0xffffffff

/**
 * Where a fresh round-robin counter starts: a random multiple of the stripe
 * below the chain count, so that different meta servers (and restarts) do not
 * all start filling the table from index 1.
 */
export function initialAllocCounter(
  chainCount: number,
  stripeSize: number,
  randomBelow: (bound: number) => number = (b) => Math.floor(Math.random() * b),
): number {
  if (!isU32(chainCount) || chainCount === 0) throw invalid(`chainCount must be a non-zero u32, got ${chainCount}`)
  if (!isU32(stripeSize) || stripeSize === 0) throw invalid(`stripeSize must be a non-zero u32, got ${stripeSize}`)
  const r = randomBelow(chainCount)
  return Math.floor(r / stripeSize) * stripeSize
}

export interface AllocateChainRangeParams {
  tableId: number
  /** the table's latest version (the layout pins it) */
  tableVersion: number
  chunkSize: number
  stripeSize: number
  /** number of chains in that table version */
  chainCount: number
  /** round-robin counter; undefined or ALLOC_COUNTER_UNSET starts at a random multiple of the stripe */
  counter?: number
  /** fixed seed (tests); must be safe for stripeSize */
  seed?: bigint
  /** source of candidate seeds when `seed` is not given */
  rng?: () => bigint
  /** source for the initial counter */
  randomBelow?: (bound: number) => number
}

export interface AllocatedChainRange {
  layout: Layout
  /** store this back as the counter for the next file */
  nextCounter: number
}

/**
 * Turns a table+chunk+stripe choice into a concrete ChainRange layout, the way
 * 3FS's meta server does at file create: `baseIndex = counter % chainCount + 1`,
 * then the counter advances by one stripe (mod chainCount), and the stripe is
 * shuffled with a seed on which every libstdc++ shuffle agrees.
 */
export function allocateChainRange(p: AllocateChainRangeParams): AllocatedChainRange {
  const { tableId, tableVersion, chunkSize, stripeSize, chainCount } = p
  if (!isU32(tableId) || tableId === 0) throw invalid(`cannot allocate from chain table ${tableId}`)
  if (!isU32(tableVersion) || tableVersion === 0) throw invalid(`cannot allocate from chain table ${tableId} version ${tableVersion}`)
  if (!isU32(chainCount) || !isU32(stripeSize)) throw invalid('chainCount and stripeSize must be u32')
  if (stripeSize === 0) throw invalid('layout stripeSize is 0')
  if (chainCount === 0 || chainCount < stripeSize) {
    throw invalid(`try to allocate ${stripeSize} chains from table ${tableId}, found ${chainCount}`)
  }
  let counter = p.counter
  if (counter === undefined || counter === ALLOC_COUNTER_UNSET) {
    counter = initialAllocCounter(chainCount, stripeSize, p.randomBelow)
  } else if (!isU32(counter)) {
    throw invalid(`allocation counter must be a u32, got ${counter}`)
  }
  const baseIndex = (counter % chainCount) + 1
  // Mod chainCount keeps the counter small; the next base is unchanged by it.
  const nextCounter = (counter + stripeSize) % chainCount
  let seed = p.seed
  if (seed !== undefined) {
    if (typeof seed !== 'bigint' || seed < 0n || seed > U64_MAX) throw invalid(`layout seed must be a u64 bigint, got ${String(seed)}`)
    if (!isSafeSeed(seed, stripeSize)) throw invalid(`seed ${seed} shuffles a stripe of ${stripeSize} differently across libstdc++ versions`)
  } else {
    seed = findSafeSeed(stripeSize, p.rng ?? randomU64)
    if (seed === undefined) throw invalid('failed to find a safe shuffle seed')
  }
  const layout: Layout = {
    tableId,
    tableVersion,
    chunkSize,
    stripeSize,
    chains: { type: 'ChainRange', baseIndex, shuffle: SHUFFLE_MT19937, seed },
  }
  validateLayout(layout)
  return { layout, nextCounter }
}
