// The per-inode write buffer of 3FS's FUSE client (io_bufs.write_buf_size,
// 1 MiB): contiguous writes are coalesced and reach storage as one flush when
// the buffer fills, when a write is not contiguous with it, and on fsync,
// close, read and periodic sync. Pure logic: the flush is a callback.
//
// Unlike 3FS's, the buffer also flushes at the file's chunk boundaries and
// grows to a whole chunk: every flush is one update of every replica of a
// chunk (a data sync and metadata transactions each), so a 4 MiB chunk
// filled by 1 MiB flushes cost four updates, the last three appends that wait
// for each other under the chunk's lock. Measured with `dd bs=1M` of 1 GiB
// through FUSE on a `cluster up` cluster: 149-152 MB/s at 8 ms CPU per MiB
// with 1 MiB flushes, 264-326 MB/s at 4-6 ms with whole-chunk ones.

import { StrataError } from '../../common/errors.js'

export const DEFAULT_WRITE_BUFFER_SIZE = 1024 * 1024
/** A buffer grows to its file's chunk size up to this much; larger chunks take several flushes. */
export const MAX_CHUNK_WRITE_BUFFER = 16 * 1024 * 1024
/**
 * The largest write buffer a client takes: one per file being written, so a
 * mount writing many files at once holds that many (and a Buffer cannot
 * exceed 4 GiB at all: a larger setting made every write fail with EIO).
 */
export const MAX_WRITE_BUFFER_SIZE = 64 * 1024 * 1024
/** Memory taken by a buffer's first bytes; it grows to the capacity once a file writes more (small files stay small). */
const FIRST_ALLOCATION = 1024 * 1024

export type FlushFn = (offset: number, data: Buffer) => Promise<void>

export class WriteBuffer {
  /** the most bytes one flush of the buffer holds */
  readonly capacity: number
  /** flushes end at multiples of this, a whole number of the file's chunks (0: anywhere) */
  readonly align: number
  private buf: Buffer | null = null
  /** memory of flushed-behind buffers, back for reuse (a fresh 1 MiB costs page faults) */
  private spare: Buffer[] = []
  /** file offset of the first buffered byte */
  off = 0
  len = 0

  /**
   * `size` is the configured buffer size (0: write through). With a chunk
   * size, the capacity is raised to it (up to MAX_CHUNK_WRITE_BUFFER) and a
   * flush ends at the boundaries of as many whole chunks as the capacity
   * holds (one 4 MiB chunk; sixteen 64 KiB ones for a 1 MiB buffer).
   */
  constructor(size = DEFAULT_WRITE_BUFFER_SIZE, chunkSize = 0) {
    if (!Number.isSafeInteger(size) || size < 0 || size > MAX_WRITE_BUFFER_SIZE) {
      throw new StrataError('INVALID_ARGUMENT', `write buffer size must be an integer from 0 to ${MAX_WRITE_BUFFER_SIZE} (64M), got ${size}`)
    }
    if (!Number.isSafeInteger(chunkSize) || chunkSize < 0) throw new StrataError('INVALID_ARGUMENT', `chunk size must be a non-negative integer, got ${chunkSize}`)
    this.capacity = size > 0 && chunkSize > 0 ? Math.max(size, Math.min(chunkSize, MAX_CHUNK_WRITE_BUFFER)) : size
    this.align = size > 0 && chunkSize > 0 ? chunkSize * Math.max(1, Math.floor(this.capacity / chunkSize)) : 0
  }

  /** Bytes from `offset` to the next chunk boundary (Infinity without alignment). */
  private toBoundary(offset: number): number {
    return this.align > 0 ? this.align - (offset % this.align) : Infinity
  }

  get empty(): boolean {
    return this.len === 0
  }

  /** End offset of the buffered range (meaningful when not empty). */
  get end(): number {
    return this.off + this.len
  }

  /** True if a write at `offset` extends the buffered range (or the buffer is empty). */
  contiguous(offset: number): boolean {
    return this.len === 0 || offset === this.off + this.len
  }

  /** Copies as much of `data` as fits before the buffer fills; the buffer must be empty or contiguous with `offset`. */
  append(offset: number, data: Uint8Array): number {
    if (!this.contiguous(offset)) throw new StrataError('INTERNAL', `append at ${offset} is not contiguous with buffer [${this.off}, ${this.end})`)
    if (this.len === 0) this.off = offset
    const n = Math.min(data.length, this.capacity - this.len, this.toBoundary(this.off + this.len))
    if (n <= 0) return 0
    this.reserve(this.len + n)
    this.buf!.set(n === data.length ? data : data.subarray(0, n), this.len)
    this.len += n
    return n
  }

  /** Makes the memory hold at least `need` bytes, keeping what is buffered. */
  private reserve(need: number): void {
    if (this.buf && this.buf.length >= need) return
    const grown = this.spare.pop() ?? Buffer.allocUnsafe(need <= FIRST_ALLOCATION && !this.buf ? Math.min(this.capacity, FIRST_ALLOCATION) : this.capacity)
    if (this.buf && this.len > 0) this.buf.copy(grown, 0, 0, this.len)
    this.buf = grown
  }

  /** Holds as much as one flush may: the capacity, or up to a chunk boundary. */
  get full(): boolean {
    return this.len > 0 && (this.len === this.capacity || this.toBoundary(this.off + this.len) === this.align)
  }

  /**
   * Length of the run of a `left`-byte write at `offset` that goes straight
   * to storage while the buffer is empty, 0 when it should be buffered: up to
   * the last chunk boundary it reaches if that is at least a chunk (or a
   * capacity) away, else whole capacities (no alignment, or chunks larger
   * than the buffer).
   */
  directRun(offset: number, left: number): number {
    if (!this.empty || this.capacity === 0) return 0
    if (this.align > 0) {
      const end = offset + left
      const run = end - (end % this.align) - offset
      if (run >= Math.min(this.capacity, this.align)) return run
      if (this.capacity >= this.align) return 0
    }
    return left >= this.capacity ? left - (left % this.capacity) : 0
  }

  /** A view of the buffered bytes (valid until the next append or clear). */
  view(): Buffer {
    return this.buf ? this.buf.subarray(0, this.len) : Buffer.alloc(0)
  }

  clear(): void {
    this.len = 0
  }

  /**
   * Hands the buffered bytes over (for a flush that outlives this call) and
   * empties the buffer; the next append takes other memory.
   */
  detach(): Buffer {
    const v = this.view()
    this.buf = null
    this.len = 0
    return v
  }

  /** Takes back memory given out by detach() once its flush is done. */
  recycle(data: Buffer): void {
    if (this.spare.length < 4 && data.buffer.byteLength === this.capacity && data.byteOffset === 0) this.spare.push(Buffer.from(data.buffer, 0, this.capacity))
  }

  /** Drops the memory too (after close). */
  release(): void {
    this.len = 0
    this.buf = null
    this.spare = []
  }
}

/**
 * One write through the buffer, 3FS hf3fs_write style:
 *  - a non-contiguous write first flushes what is buffered;
 *  - bytes are appended, and every time the buffer fills it is flushed;
 *  - while the buffer is empty, whole buffer-sized runs of a large write go to
 *    storage straight from the caller's memory (the same flushes, minus a
 *    copy); with a chunk size, runs that end at a boundary (WriteBuffer.directRun).
 * A zero capacity means write-through (every write is flushed at once).
 * A failed flush empties the buffer (its bytes are lost, as in 3FS) and throws.
 * With `flushBehind`, a buffer that fills is handed to it instead (it owns the
 * memory from then on, see detach) and writing goes on into fresh memory;
 * flushBehind decides when to wait. With `flushDirect`, the runs that go
 * straight from the caller's memory (and every write when the capacity is
 * zero) are handed to it instead of `flush`; it may return before they are
 * stored (the caller then waits for them, see FileSystem.write).
 */
export async function bufferedWrite(wb: WriteBuffer, offset: number, data: Buffer, flush: FlushFn, flushBehind?: FlushFn, flushDirect?: FlushFn): Promise<void> {
  if (data.length === 0) return
  const doFlush = async (off: number, bytes: Buffer) => {
    try {
      await flush(off, bytes)
    } finally {
      wb.clear()
    }
  }
  if (!wb.contiguous(offset)) await doFlush(wb.off, wb.view())
  if (wb.capacity === 0) {
    await (flushDirect ?? flush)(offset, data)
    return
  }
  let done = 0
  while (done < data.length) {
    const run = wb.directRun(offset + done, data.length - done)
    if (run > 0) {
      await (flushDirect ?? flush)(offset + done, data.subarray(done, done + run))
      done += run
      continue
    }
    done += wb.append(offset + done, data.subarray(done))
    if (wb.full) {
      if (flushBehind) {
        const off = wb.off
        await flushBehind(off, wb.detach())
      } else await doFlush(wb.off, wb.view())
    }
  }
}
