// The per-inode write buffer of 3FS's FUSE client (io_bufs.write_buf_size,
// 1 MiB): contiguous writes are coalesced and reach storage as one flush when
// the buffer fills, when a write is not contiguous with it, and on fsync,
// close, read and periodic sync. Pure logic: the flush is a callback.

import { StrataError } from '../../common/errors.js'

export const DEFAULT_WRITE_BUFFER_SIZE = 1024 * 1024

export type FlushFn = (offset: number, data: Buffer) => Promise<void>

export class WriteBuffer {
  readonly capacity: number
  private buf: Buffer | null = null
  /** memory of flushed-behind buffers, back for reuse (a fresh 1 MiB costs page faults) */
  private spare: Buffer[] = []
  /** file offset of the first buffered byte */
  off = 0
  len = 0

  constructor(capacity = DEFAULT_WRITE_BUFFER_SIZE) {
    if (!Number.isSafeInteger(capacity) || capacity < 0) throw new StrataError('INVALID_ARGUMENT', `write buffer size must be a non-negative integer, got ${capacity}`)
    this.capacity = capacity
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

  /** Copies as much of `data` as fits; the buffer must be empty or contiguous with `offset`. */
  append(offset: number, data: Uint8Array): number {
    if (!this.contiguous(offset)) throw new StrataError('INTERNAL', `append at ${offset} is not contiguous with buffer [${this.off}, ${this.end})`)
    if (this.len === 0) this.off = offset
    const n = Math.min(data.length, this.capacity - this.len)
    if (n === 0) return 0
    this.buf ??= this.spare.pop() ?? Buffer.allocUnsafe(this.capacity)
    this.buf.set(n === data.length ? data : data.subarray(0, n), this.len)
    this.len += n
    return n
  }

  get full(): boolean {
    return this.capacity > 0 && this.len === this.capacity
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
 *    storage straight from the caller's memory (the same flushes, minus a copy).
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
    const left = data.length - done
    if (wb.empty && left >= wb.capacity) {
      const run = left - (left % wb.capacity)
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
