// Chunk-id ranges for queryLastChunk/removeChunks: [begin, end) in byte order
// of the 16-byte ids (see common/chunk-id.ts), processed by the server at most
// maxNumChunkIdsToProcess chunks per request.

import { StrataError } from '../common/errors.js'
import { isChunkId } from '../common/chunk-id.js'
import type { ChunkIdRange } from '../storage/protocol.js'

/** Server-side cap on chunks per request that still fits 3FS's u32 field. */
export const MAX_CHUNKS_PER_REQUEST = 0xfffffffe

export interface ChunkRangeInput {
  begin: Buffer
  /** exclusive */
  end: Buffer
  maxNumChunkIdsToProcess?: number
}

export function normalizeRange(r: ChunkRangeInput, defaultMax: number): ChunkIdRange {
  if (!r || !isChunkId(r.begin) || !isChunkId(r.end)) throw new StrataError('INVALID_ARGUMENT', 'chunk range bounds must be 16-byte chunk ids')
  if (Buffer.compare(r.begin, r.end) > 0) throw new StrataError('INVALID_ARGUMENT', 'chunk range begin is after end')
  const max = r.maxNumChunkIdsToProcess ?? defaultMax
  if (!Number.isInteger(max) || max < 1 || max > MAX_CHUNKS_PER_REQUEST) {
    throw new StrataError('INVALID_ARGUMENT', `maxNumChunkIdsToProcess must be in [1, ${MAX_CHUNKS_PER_REQUEST}], got ${max}`)
  }
  return { begin: r.begin, end: r.end, maxNumChunkIdsToProcess: max }
}

export interface RangeStep {
  numChunksRemoved: number
  moreChunksInRange: boolean
}

export interface DrainResult {
  numChunksRemoved: number
  /** requests it took */
  steps: number
}

/**
 * Repeats a bounded range operation until the server reports nothing left.
 * Each step removes what it processed, so re-sending the same range makes
 * progress; a step that reports "more" yet removed nothing twice in a row
 * means the server is not making progress and we stop rather than spin.
 */
export async function drainRange(step: () => Promise<RangeStep>, maxSteps = Infinity): Promise<DrainResult> {
  let total = 0
  let steps = 0
  let idle = 0
  for (;;) {
    const r = await step()
    steps++
    total += r.numChunksRemoved
    if (!r.moreChunksInRange) return { numChunksRemoved: total, steps }
    idle = r.numChunksRemoved === 0 ? idle + 1 : 0
    if (idle >= 2) throw new StrataError('INTERNAL', `removeChunks made no progress after ${steps} requests`)
    if (steps >= maxSteps) throw new StrataError('INTERNAL', `removeChunks did not finish within ${maxSteps} requests`)
  }
}
