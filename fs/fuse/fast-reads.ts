// The mount's table of read-ahead chunks that libfuse's own threads serve
// (native/fuse/fuse-native.c, change 2). A READ wholly inside a registered
// chunk is copied out and answered by the thread that received it, without
// the round trip into this event loop that every READ otherwise makes; the
// rest still reaches the JavaScript operations.
//
// Contract with the addon: a registered Buffer stays alive and unchanged
// until its slot is taken back (take() returns only once no thread copies
// from it); registration carries the read-ahead's freshness limit, which the
// addon enforces; the progress callback runs (coalesced) after a chunk served
// its first bytes natively and once what it served natively completes it, so
// read-ahead can fetch further ahead and let it go.

import type { FuseInstance } from './native.js'
import { fuseBinding } from './native.js'

/** What read-ahead needs of the table (a fake in unit tests). */
export interface NativeChunkTable {
  /**
   * Registers `data` (the file's bytes from offset `start`) for READs of
   * handle `fh` for `ttlMs`; a slot, or -1 (table full or off). onProgress
   * runs after the slot served its first bytes and once it served `need`.
   */
  put(fh: number, start: number, data: Buffer, ttlMs: number, need: number, onProgress: () => void): number
  /** JavaScript served more of the chunk: the completion notice now comes at `need` bytes served natively. */
  setNeed(slot: number, need: number): void
  /** Takes a slot back and returns the bytes it served; its buffer may be reused once this returns. */
  take(slot: number): number
  /** Bytes a slot served so far. */
  served(slot: number): number
}

interface FastReadBinding {
  strata_ra_listen(ft: Buffer, cb: () => void): number
  strata_ra_stop(ft: Buffer): void
  strata_ra_put(ft: Buffer, slot: number, fh: number, start: number, data: Buffer, ttlMs: number, need: number): boolean
  strata_ra_need(ft: Buffer, slot: number, need: number): void
  strata_ra_take(ft: Buffer, slot: number): number
  strata_ra_served(ft: Buffer, slot: number): number
  strata_ra_stats(ft: Buffer): [number, number]
}

export interface FastReadStats {
  /** READs answered by libfuse threads from registered chunks */
  hits: number
  bytes: number
  /** chunks registered now */
  slots: number
}

export class FastReads implements NativeChunkTable {
  readonly #free: number[] = []
  readonly #owners = new Map<number, () => void>()
  #on = true

  private constructor(
    private readonly binding: FastReadBinding,
    private readonly ft: Buffer,
  ) {
    const n = binding.strata_ra_listen(ft, () => this.#progress())
    for (let s = n - 1; s >= 0; s--) this.#free.push(s)
  }

  /** The table of a mounted fuse-native instance; null when this addon build or instance lacks it. */
  static open(fuse: FuseInstance): FastReads | null {
    const b = fuseBinding() as Partial<FastReadBinding> | null
    const ft = fuse._thread
    if (!b || typeof b.strata_ra_listen !== 'function' || !Buffer.isBuffer(ft)) return null
    return new FastReads(b as FastReadBinding, ft)
  }

  put(fh: number, start: number, data: Buffer, ttlMs: number, need: number, onProgress: () => void): number {
    if (!this.#on || data.length === 0 || ttlMs <= 0) return -1
    const slot = this.#free.pop()
    if (slot === undefined) return -1
    if (!this.binding.strata_ra_put(this.ft, slot, fh, start, data, ttlMs, need)) {
      this.#free.push(slot)
      return -1
    }
    this.#owners.set(slot, onProgress)
    return slot
  }

  take(slot: number): number {
    if (!this.#owners.delete(slot)) return 0
    const served = this.binding.strata_ra_take(this.ft, slot)
    this.#free.push(slot)
    return served
  }

  setNeed(slot: number, need: number): void {
    if (this.#owners.has(slot)) this.binding.strata_ra_need(this.ft, slot, need)
  }

  served(slot: number): number {
    return this.#owners.has(slot) ? this.binding.strata_ra_served(this.ft, slot) : 0
  }

  stats(): FastReadStats {
    const [hits, bytes] = this.binding.strata_ra_stats(this.ft)
    return { hits, bytes, slots: this.#owners.size }
  }

  /** Nothing is served natively any more; slots still held read as served 0 and take back nothing. Idempotent. */
  close(): void {
    if (!this.#on) return
    this.#on = false
    this.binding.strata_ra_stop(this.ft)
    for (const slot of this.#owners.keys()) this.#free.push(slot)
    this.#owners.clear()
  }

  #progress(): void {
    for (const cb of [...this.#owners.values()]) cb()
  }
}
