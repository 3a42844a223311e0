// Recycled buffers for large transient data: chunk reads on storage nodes,
// large RPC frames received on accepted connections, the FUSE daemon's
// read-ahead chunks, and (aligned, from the native addon) the bounce buffers
// of O_DIRECT chunk writes. A freshly
// allocated 1 MiB Buffer costs the process a page fault per 4 KiB page the
// first time it is filled (and an munmap with a TLB flush when it is freed);
// on the benchmark VM that measured ~0.5 ms of CPU per MiB, as much as moving
// the bytes over loopback, and the external memory drives V8 into major GCs.
// A buffer goes back only when its one holder says it is done with it
// (storage read replies: the RPC server's AFTER_REPLY; request frames: the
// handler settled, for methods that declare they keep nothing; read-ahead:
// its chunk was let go and its fetch settled), so nothing can see a buffer
// being reused.

const MIN_POOLED = 64 * 1024
const MAX_POOLED = 16 * 1024 * 1024

export class BufferPool {
  /** free buffers per size class */
  private readonly free = new Map<number, ArrayBuffer[]>()
  /**
   * Buffers handed out and not yet released: guards against a double release.
   * Weak, so a buffer whose reader never releases it is simply collected.
   */
  private readonly out = new WeakSet<ArrayBuffer>()
  private freeBytes = 0
  hits = 0
  misses = 0

  /**
   * @param maxFreeBytes memory kept for reuse at most; beyond it released buffers go to the GC
   * @param alloc makes the memory of a size class (aligned memory for O_DIRECT, say)
   */
  constructor(
    readonly maxFreeBytes = 64 * 1024 * 1024,
    private readonly alloc: ((size: number) => ArrayBuffer) | null = null,
  ) {}

  /**
   * A Buffer of exactly `length` bytes, uninitialized. Sizes outside the
   * pooled range are one-off allocations; release() ignores them.
   */
  take(length: number): Buffer {
    if (length < MIN_POOLED || length > MAX_POOLED) return this.alloc ? Buffer.from(this.alloc(length), 0, length) : Buffer.allocUnsafe(length)
    const size = sizeClass(length)
    let ab = this.free.get(size)?.pop()
    if (ab) {
      this.freeBytes -= size
      this.hits++
    } else {
      ab = this.alloc ? this.alloc(size) : new ArrayBuffer(size)
      this.misses++
    }
    this.out.add(ab)
    return Buffer.from(ab, 0, length)
  }

  /**
   * Gives a buffer from take() back. The caller must not touch it (or any
   * view of it) afterwards; anything not from take() is ignored.
   */
  release(buf: Buffer): void {
    const ab = buf.buffer
    if (!(ab instanceof ArrayBuffer) || !this.out.delete(ab)) return
    const size = ab.byteLength
    if (this.freeBytes + size > this.maxFreeBytes) return
    let list = this.free.get(size)
    if (!list) this.free.set(size, (list = []))
    list.push(ab)
    this.freeBytes += size
  }

  stats(): { hits: number; misses: number; freeBytes: number } {
    return { hits: this.hits, misses: this.misses, freeBytes: this.freeBytes }
  }
}

/** Quarter steps between powers of two, so a 1 MiB chunk plus its envelope takes 1.25 MiB, not 2. */
function sizeClass(n: number): number {
  if (n <= MIN_POOLED) return MIN_POOLED
  let p = MIN_POOLED
  while (p * 2 <= n) p *= 2
  const step = p / 4
  return Math.ceil(n / step) * step
}
