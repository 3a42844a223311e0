// The data path of a file: file ranges → chunk IOs on chains (computed here,
// from the layout and routing info) → StorageClient. Reads of many pieces go
// out as one batchRead (one RPC per storage node); writes of the pieces of a
// range run in parallel across chains. Truncation is the client-driven 3FS
// flow: remove the chunks past the new end on every chain of the stripe, then
// cut (or extend) the new last chunk.

import { StrataError, toStrataError } from '../../common/errors.js'
import { chunkIdOf } from '../../common/chunk-id.js'
import type { Layout } from '../../common/layout.js'
import type { ChainId } from '../../common/types.js'
import type { Inode } from '../../meta/protocol.js'
import type { QueryLastChunkRsp } from '../../storage/protocol.js'
import type { ChunkReadResult, StorageClient } from '../storage-client.js'
import type { ReadMode } from '../target-selection.js'
import { chunkCount, lastChunkOf, planPieces, readOutcome, stripeChainIds, type ChunkPiece, type ReadOutcome } from './pieces.js'

export interface FileReadOptions {
  /** zero-fill holes before the last data (default); false: a hole makes the read fail */
  allowHoles?: boolean
  allowReadUncommitted?: boolean
  mode?: ReadMode
  /** the read yields at least this many bytes (zeros past the data), e.g. up to a known file length */
  minBytes?: number
  signal?: AbortSignal
  /** readPieces: called with each piece's index and result as soon as it is final (StorageClient ReadOptions.onResult) */
  onResult?: (index: number, result: ChunkReadResult) => void
}

export interface WriteOptions {
  signal?: AbortSignal
}

/** Writes in flight per writeRange call; the storage client also caps RPCs per node. */
const WRITE_CONCURRENCY = 64

export function fileLayout(inode: Inode): Layout {
  if (inode.type !== 'File' || !inode.file) {
    throw new StrataError(inode.type === 'Directory' ? 'META_IS_DIRECTORY' : 'META_INVALID_ARGUMENT', `inode 0x${inode.id.toString(16)} is not a file`)
  }
  return inode.file.layout
}

export class FileIo {
  constructor(readonly storage: StorageClient) {}

  /** Chain ids of the file's stripe; refreshes routing info once if the table is not known yet. */
  async stripe(layout: Layout): Promise<ChainId[]> {
    const ri = await this.storage.mgmtd.routing()
    try {
      return stripeChainIds(layout, ri)
    } catch (e) {
      if (!(e instanceof StrataError) || e.code !== 'ROUTING_ERROR') throw e
      return stripeChainIds(layout, await this.storage.mgmtd.refresh())
    }
  }

  async plan(inode: Inode, offset: number, length: number): Promise<ChunkPiece[]> {
    const layout = fileLayout(inode)
    return planPieces(inode.id, layout, await this.stripe(layout), offset, length)
  }

  // --- writes

  /** Writes `data` at `offset` of the file; resolves when every chunk piece is committed on its chain. */
  async writeRange(inode: Inode, offset: number, data: Buffer, opts: WriteOptions = {}): Promise<void> {
    if (data.length === 0) return
    const pieces = await this.plan(inode, offset, data.length)
    const errs = await this.writePieces(pieces, pieces.map((p) => data.subarray(p.bufOffset, p.bufOffset + p.length)), fileLayout(inode).chunkSize, opts)
    const first = errs.find((e) => e)
    if (first) throw first
  }

  /** Writes pieces (sources[i] for pieces[i]); returns per-piece errors (undefined: written). Never throws. */
  async writePieces(pieces: readonly ChunkPiece[], sources: readonly Buffer[], chunkSize: number, opts: WriteOptions = {}): Promise<Array<StrataError | undefined>> {
    const errs: Array<StrataError | undefined> = new Array(pieces.length)
    let next = 0
    const worker = async () => {
      for (;;) {
        const i = next++
        if (i >= pieces.length) return
        const p = pieces[i]!
        try {
          const r = await this.storage.write(p.chainId, p.chunkId, p.offsetInChunk, sources[i]!, chunkSize, opts.signal ? { signal: opts.signal } : {})
          if (r.lengthInfo !== p.length) errs[i] = new StrataError('IO_ERROR', `short chunk write: ${r.lengthInfo} of ${p.length} bytes`)
        } catch (e) {
          errs[i] = toStrataError(e)
        }
      }
    }
    await Promise.all(Array.from({ length: Math.min(WRITE_CONCURRENCY, pieces.length) }, worker))
    return errs
  }

  // --- reads

  /** One batchRead for all pieces (any files); results line up with pieces. */
  readPieces(pieces: readonly ChunkPiece[], opts: FileReadOptions = {}, into?: ReadonlyArray<Buffer | readonly Buffer[] | undefined>): Promise<ChunkReadResult[]> {
    if (pieces.length === 0) return Promise.resolve([])
    return this.storage.batchRead(
      pieces.map((p, i) => {
        const dest = into?.[i]
        return { chainId: p.chainId, chunkId: p.chunkId, offset: p.offsetInChunk, length: p.length, ...(dest ? { into: dest } : {}) }
      }),
      {
        ...(opts.mode ? { mode: opts.mode } : {}),
        ...(opts.allowReadUncommitted ? { allowReadUncommitted: true } : {}),
        ...(opts.signal ? { signal: opts.signal } : {}),
        ...(opts.onResult ? { onResult: opts.onResult } : {}),
      },
    )
  }

  /**
   * Reads [offset, offset+length) of the file into target[targetOffset…].
   * Holes read as zeros; the result stops at the end of the last data found
   * (or at minBytes). Throws the first chunk error, or IO_ERROR for a hole
   * when holes are forbidden.
   */
  async readInto(inode: Inode, offset: number, length: number, target: Uint8Array, targetOffset = 0, opts: FileReadOptions = {}): Promise<number> {
    if (length === 0) return 0
    if (targetOffset + length > target.length) throw new StrataError('INVALID_ARGUMENT', `read of ${length} bytes does not fit the buffer at ${targetOffset}`)
    const pieces = await this.plan(inode, offset, length)
    const results = await this.readPieces(pieces, opts, placesIn(pieces, target, targetOffset))
    const r = assembleRead(pieces, results, target, targetOffset, opts.allowHoles ?? true)
    if (r instanceof StrataError) throw r
    const min = Math.min(length, Math.max(0, opts.minBytes ?? 0))
    if (min > r) {
      target.fill(0, targetOffset + r, targetOffset + min)
      return min
    }
    return r
  }

  // --- truncate

  /**
   * 3FS truncateImpl minus the meta sync: removes every chunk with index ≥
   * ceil(length/chunkSize) on every chain of the stripe, then sets the
   * length of the new last chunk (creating it when the file grows). The
   * caller then reports `sync(truncated)` to meta.
   */
  async truncateChunks(inode: Inode, length: number, opts: WriteOptions = {}): Promise<{ removed: number }> {
    const layout = fileLayout(inode)
    const stripe = await this.stripe(layout)
    const from = chunkCount(length, layout.chunkSize)
    const begin = chunkIdOf(inode.id, from)
    const end = chunkIdOf(inode.id, 0, 1)
    const chains = [...new Set(stripe)]
    const rs = await Promise.all(chains.map((c) => this.storage.removeChunks(c, { begin, end }, opts.signal ? { signal: opts.signal } : {})))
    const last = lastChunkOf(length, layout.chunkSize)
    if (last) {
      const chain = stripe[last.index % layout.stripeSize]!
      await this.storage.truncate(chain, chunkIdOf(inode.id, last.index), last.length, layout.chunkSize, false, opts.signal ? { signal: opts.signal } : {})
    }
    return { removed: rs.reduce((n, r) => n + r.numChunksRemoved, 0) }
  }

  /**
   * Last chunk on every chain of the stripe (what meta's length query does):
   * length = max(lastChunkIndex·chunkSize + lastChunkLen).
   */
  async queryChunks(inode: Inode): Promise<{ length: number; chains: Array<{ chainId: ChainId; rsp: QueryLastChunkRsp; length: number }> }> {
    const layout = fileLayout(inode)
    const stripe = [...new Set(await this.stripe(layout))]
    const begin = chunkIdOf(inode.id, 0)
    const end = chunkIdOf(inode.id, 0, 1)
    const chains = await Promise.all(
      stripe.map(async (chainId) => {
        const rsp = await this.storage.queryLastChunk(chainId, { begin, end })
        const length = rsp.lastChunkId ? rsp.lastChunkId.readUInt32BE(12) * layout.chunkSize + rsp.lastChunkLen : 0
        return { chainId, rsp, length }
      }),
    )
    return { length: chains.reduce((m, c) => Math.max(m, c.length), 0), chains }
  }
}

/** Where each piece's data belongs inside target, for reads received in place (ReadRequest.into). */
export function placesIn(pieces: readonly ChunkPiece[], target: Uint8Array, targetOffset: number): Buffer[] {
  const buf = Buffer.isBuffer(target) ? target : Buffer.from(target.buffer, target.byteOffset, target.byteLength)
  return pieces.map((p) => buf.subarray(targetOffset + p.bufOffset, targetOffset + p.bufOffset + p.length))
}

/**
 * Copies what each piece returned into target, zero-fills holes, and returns
 * the byte count of the read (3FS PioV rules, see readOutcome), or the error
 * that fails it.
 */
export function assembleRead(
  pieces: readonly ChunkPiece[],
  results: readonly ChunkReadResult[],
  target: Uint8Array,
  targetOffset: number,
  allowHoles: boolean,
): number | StrataError {
  const got: number[] = []
  for (let i = 0; i < pieces.length; i++) {
    const r = results[i]
    if (!r) return new StrataError('INTERNAL', 'missing chunk read result')
    if (!r.ok) return r.error
    const p = pieces[i]!
    const n = Math.min(r.data.length, p.length)
    const at = targetOffset + p.bufOffset
    // data received in place (placesIn) is already where it belongs
    const inPlace = r.data.buffer === target.buffer && r.data.byteOffset === target.byteOffset + at
    if (n > 0 && !inPlace) target.set(n === r.data.length ? r.data : r.data.subarray(0, n), at)
    got.push(n)
  }
  const out: ReadOutcome = readOutcome(pieces, got)
  if (out.hole && !allowHoles) return new StrataError('IO_ERROR', 'the read range crosses a hole (FORBID_READ_HOLES)')
  for (const [s, e] of out.zeroRanges) target.fill(0, targetOffset + s, targetOffset + e)
  return out.bytes
}
