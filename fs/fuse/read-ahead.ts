// Chunk read-ahead for sequential readers of the FUSE mount.
//
// The kernel sends a sequential reader's data in READs of at most maxRead
// (1 MiB; 128 KiB before the addon's change 5), so a 4 MiB chunk read
// sequentially arrives as several requests, and each used to become its own
// storage RPC for a piece of the chunk (a piece costs the storage node a
// CRC32C pass, the client another). For a handle read sequentially, the
// whole chunk is read once instead (a whole-chunk read returns the checksum
// stored at write time) and the following requests are served from it.
// Where a run begins, the reader's chunk is fetched in pieces that double
// with the run (twice the run so far, at least 512 KiB) up to the chunk's
// end: a file-backed EROFS layer (a sandbox's rootfs) is read in runs of a
// few hundred KiB to a few MiB, and fetching the whole rest of a 4 MiB
// chunk for each made a cold sandbox start read twice the bytes it used.
// Chunks ahead of the reader are fetched while it reads, up to `windowChunks`
// of them; the window opens one chunk per chunk streamed, as the kernel's own
// readahead does, so a short sequential run does not pull in megabytes. One
// chunk ahead was not enough: a whole-chunk fetch (storage pread, CRC, 1 MiB
// over the transport) takes longer than serving a chunk's 8 requests from
// memory, so a single reader stalled on every fetch (~230 MB/s here).
//
// Freshness is what the kernel's own readahead gives: data fetched a little
// before it is asked for. A chunk is let go once all of it was served (the
// kernel asks for each page once), and used for at most `maxAgeMs`; the
// mount drops an inode's chunks whenever it opens the inode for writing or
// truncates it (handles whose inode has a writer here bypass read-ahead).
// Memory is bounded by one budget for the whole mount; without room a read
// goes straight to storage.
//
// A fetched chunk is also registered in the mount's native table when there
// is one (fast-reads.ts): READs it wholly covers are then answered by
// libfuse's threads without reaching this code, and what they served counts
// toward the chunk being done; their progress (a chunk's first and last
// bytes served) opens the window further as a request here would.

import { isStrataError } from '../common/errors.js'
import type { NativeChunkTable } from './fast-reads.js'

/** Reads [pos, pos + len) of the file into a Buffer (handed to `release` once its entry is gone); shorter at the end of the file. */
export type ChunkFetch = (pos: number, len: number) => Promise<Buffer>

export interface ReadAheadOptions {
  /** how long fetched data may be served, ms */
  maxAgeMs: number
  /** bytes of fetched chunks the whole mount may hold */
  budgetBytes: number
  /** chunks above this size are not read ahead (their buffers would be too big) */
  maxChunkSize: number
  /** how many chunks past the one being read a streaming reader may have fetched (≥ 1) */
  windowChunks: number
}

export const READ_AHEAD_DEFAULTS: ReadAheadOptions = { maxAgeMs: 1000, budgetBytes: 64 * 1024 * 1024, maxChunkSize: 8 * 1024 * 1024, windowChunks: 4 }

/** The mount-wide memory budget of read-ahead. */
export class ReadAheadBudget {
  used = 0
  constructor(readonly max: number) {}
  take(n: number): boolean {
    if (this.used + n > this.max) return false
    this.used += n
    return true
  }
  give(n: number): void {
    this.used = Math.max(0, this.used - n)
  }
}

interface Entry {
  /** the chunk it is a piece of */
  chunk: number
  /** file offset of data[0] */
  start: number
  /** bytes asked for: data shorter than this is the end of the file */
  want: number
  data: Promise<Buffer>
  at: number
  /** bytes taken from the budget */
  reserved: number
  /** bytes handed out here; the kernel asks for each page once, so a wholly served entry is done */
  served: number
  /** the data's length once fetched */
  length: number
  /** its slot in the native table, or -1 */
  slot: number
}

/** Chunks a handle keeps besides its window: the one being served and one behind it that may still be asked for. */
const KEEP_BEHIND = 2

/**
 * Contiguous bytes a handle must have read before read-ahead starts. The
 * kernel reads a file-backed EROFS layer (a sandbox's rootfs) through this
 * mount in short runs scattered over the file: reading whole chunks for them
 * would fetch far more than they use (a cold sandbox start read 5× the bytes).
 */
const MIN_RUN = 256 * 1024

/** The smallest piece of a chunk fetched where a run begins; pieces are multiples of 128 KiB (libfuse 2's READ size, and a divisor of every larger one the kernel sends). */
const MIN_PIECE = 512 * 1024
const PIECE_ALIGN = 128 * 1024

/**
 * Recent request ranges a handle remembers. The kernel has up to
 * max_background (12 by default) async READs of one reader in flight, handed
 * to the daemon by several libfuse threads in any order: a run is the
 * contiguous range those requests cover, whatever order they arrived in.
 */
const MAX_RANGES = 16

/** What the kernel may have in flight for one reader past the chunks read ahead (two readahead windows of 1 MiB; 12 × 128 KiB before change 5). */
const KERNEL_SPAN = 2 * 1024 * 1024

export interface ReadAheadStats {
  /** requests served from fetched chunks (wholly or their first part) */
  hits: number
  /** chunk pieces fetched (whole chunks, or pieces of one where a run begins) */
  fetches: number
  /** requests (or their remainders) passed to storage (random, short runs, over budget, end of fetched data) */
  direct: number
}

/** Read-ahead state of one open file handle. */
export class ReadAhead {
  /** fetched pieces by their start offset (a chunk has one, or a few where a run began in it) */
  readonly #chunks = new Map<number, Entry>()
  /** disjoint ranges recently requested; a streaming reader's merge into one growing range */
  #ranges: Array<[number, number]> = []
  /** the furthest chunk fetched ahead: chunks up to it are not fetched ahead again once served */
  #ahead = -1
  /** bytes asked for by the pieces held */
  #held = 0
  #closed = false

  constructor(
    readonly chunkSize: number,
    readonly fetch: ChunkFetch,
    readonly budget: ReadAheadBudget,
    readonly opts: ReadAheadOptions,
    readonly stats: ReadAheadStats,
    /** the file's length as this client knows it: chunks past it are not fetched ahead (the kernel does not read past it) */
    readonly knownLength: () => number = () => Number.MAX_SAFE_INTEGER,
    /**
     * Takes back a fetched buffer once its entry is gone (a recycling pool).
     * Called only after the fetch settled, so nothing still writes into it;
     * readers copy out of it in the same task their await resumes in, and a
     * reused buffer is only written when new data arrives on a socket, in a
     * later task.
     */
    readonly release: (b: Buffer) => void = () => undefined,
    /** the mount's native table and this handle's FUSE file handle, when libfuse threads may serve fetched chunks */
    readonly native: { table: NativeChunkTable; fh: number } | null = null,
  ) {}

  /**
   * Serves the start of [pos, pos + dst.length) into dst from fetched chunks
   * once the handle reads sequentially, and returns how many bytes it
   * served: all of them, a prefix, or 0. The caller reads the rest from
   * storage (a short answer to the kernel would mean the end of the file).
   */
  async read(pos: number, dst: Buffer): Promise<number> {
    const end = pos + dst.length
    const cs = this.chunkSize
    // the run this request belongs to: [runStart, runEnd) requested contiguously
    let [runStart, runEnd] = this.#cover(pos, end)
    let run = runEnd - runStart
    if (this.#closed || dst.length === 0 || cs > this.opts.maxChunkSize) return this.#direct()
    let done = 0
    while (pos + done < end) {
      const at = pos + done
      const c = Math.floor(at / cs)
      let e = this.#covering(at)
      if (!e) {
        // not fetched yet: only for a reader that streams
        if (run < MIN_RUN) break
        e = this.#startPiece(c, at, run)
        if (!e) break
      }
      let data: Buffer
      try {
        data = await e.data
      } catch (err) {
        // A fetch the storage client gave up on after retrying for its whole budget (chain
        // unavailable, nodes down) fails the request: the direct read would wait that long
        // again (a `cat` blocked two minutes, not one). Other failures are left to the direct
        // read, which reports its own error.
        if (isStrataError(err) && err.retryable) throw err
        break
      }
      const from = at - e.start
      const n = Math.max(0, Math.min(data.length - from, end - at))
      data.copy(dst, done, from, from + n)
      done += n
      e.served += n
      if (this.#servedOf(e) >= data.length) {
        ;[runStart, runEnd] = this.#done(e)
        run = runEnd - runStart
      } else if (e.slot >= 0) this.native?.table.setNeed(e.slot, data.length - e.served)
      // short data is the end of the file as it was when fetched: the caller
      // asks storage for anything beyond, so a file that grew since is read whole
      if (n === 0 || data.length < e.want) break
    }
    if (done === 0) return this.#direct()
    if (done < dst.length) this.stats.direct++
    this.stats.hits++
    this.#extend(Math.floor((end - 1) / cs), run)
    return done
  }

  /**
   * A reader that consumed a whole chunk's worth gets the chunks after `cur`
   * (the chunk it reads) fetched while it reads it: one per chunk streamed,
   * up to the window.
   */
  #extend(cur: number, run: number): void {
    const cs = this.chunkSize
    const ahead = Math.min(Math.max(1, this.opts.windowChunks), Math.floor(run / cs))
    const last = Math.min(cur + ahead, Math.ceil(this.knownLength() / cs) - 1)
    // (a reader that moved elsewhere starts a window of its own)
    const from = this.#ahead >= cur && this.#ahead <= last ? this.#ahead : cur
    for (let next = from + 1; next <= last; next++) {
      if (!this.#hasChunk(next)) {
        const e = this.#start(next, next * cs, cs)
        if (!e) break
        void e.data.catch(() => undefined)
      }
      this.#ahead = next
    }
  }

  /** Bytes of an entry served, here and by libfuse threads. */
  #servedOf(e: Entry): number {
    return e.served + (e.slot >= 0 && this.native ? this.native.table.served(e.slot) : 0)
  }

  /**
   * libfuse threads served bytes of a piece: the reader's run covers them
   * (the kernel asked for them, in whatever order), a wholly served piece
   * goes and its whole range joins the run, and the window opens past its
   * chunk as a request here would open it. The run this code sees has gaps
   * where threads served bytes it never learned the position of (a piece
   * reports only its count) until the piece is wholly served: a stream that
   * threads serve opens the window one piece later than one served here.
   * (Counting chunks that threads served one after another as streamed,
   * whether or not they were read through, made a cold sandbox start fetch
   * whole chunks past its short runs.)
   */
  #nativeProgress(e: Entry): void {
    if (this.#closed || this.#chunks.get(e.start) !== e || e.slot < 0 || !this.native) return
    const byThreads = this.native.table.served(e.slot)
    if (byThreads === 0) return
    let [runStart, runEnd] = this.#cover(e.start, e.start + Math.min(e.length, byThreads + e.served))
    if (e.served + byThreads >= e.length) [runStart, runEnd] = this.#done(e)
    this.#extend(e.chunk, runEnd - runStart)
  }

  /** Records [pos, end) among the recent requests; returns the contiguous range now containing it. */
  #cover(pos: number, end: number): [number, number] {
    let lo = pos
    let hi = end
    const kept: Array<[number, number]> = []
    for (const r of this.#ranges) {
      if (r[1] < lo || r[0] > hi) kept.push(r)
      else {
        lo = Math.min(lo, r[0])
        hi = Math.max(hi, r[1])
      }
    }
    kept.push([lo, hi])
    if (kept.length > MAX_RANGES) {
      // the ranges furthest from this request go first
      const dist = (r: [number, number]) => (r[1] < pos ? pos - r[1] : r[0] - end)
      kept.sort((x, y) => dist(x) - dist(y))
      kept.length = MAX_RANGES
    }
    this.#ranges = kept
    return [lo, hi]
  }

  /** Forgets every fetched chunk (the file may have changed). */
  clear(): void {
    for (const e of this.#chunks.values()) this.#let(e)
    this.#chunks.clear()
    this.#held = 0
    this.#ahead = -1
  }

  close(): void {
    this.#closed = true
    this.clear()
  }

  #direct(): 0 {
    this.stats.direct++
    return 0
  }

  /** The fresh piece whose asked-for range holds `at` (a stale one is dropped on the way). */
  #covering(at: number): Entry | undefined {
    for (const e of this.#chunks.values()) {
      if (at < e.start || at >= e.start + e.want) continue
      if (performance.now() - e.at > this.opts.maxAgeMs) this.#drop(e)
      else return e
    }
    return undefined
  }

  #hasChunk(c: number): boolean {
    for (const e of this.#chunks.values()) if (e.chunk === c) return true
    return false
  }

  /**
   * Starts the piece of chunk c that `at` needs, for a run of `run` bytes:
   * from the reader's position (what the run asked for before it was asked
   * already, and the kernel asks for each page once), twice the run long, to
   * the chunk's end once the run is a chunk long (or the rest would be
   * shorter than the piece), never into a piece fetched already.
   */
  #startPiece(c: number, at: number, run: number): Entry | undefined {
    const cs = this.chunkSize
    const chunkEnd = (c + 1) * cs
    let to = chunkEnd
    if (run < cs) {
      const piece = Math.ceil(Math.max(MIN_PIECE, 2 * run) / PIECE_ALIGN) * PIECE_ALIGN
      if (chunkEnd - (at + piece) >= piece) to = at + piece
    }
    for (const e of this.#chunks.values()) if (e.start > at) to = Math.min(to, e.start)
    return this.#start(c, at, to - at)
  }

  /**
   * A piece wholly served goes; all of it was asked for, so the run it is in
   * covers it whole (its middle may have been served by libfuse threads this
   * code never saw the positions of). Returns that run.
   */
  #done(e: Entry): [number, number] {
    this.#drop(e)
    return this.#cover(e.start, e.start + e.length)
  }

  #drop(e: Entry): void {
    if (this.#chunks.get(e.start) !== e) return
    this.#chunks.delete(e.start)
    this.#held -= e.want
    this.#let(e)
  }

  /** An entry is gone: out of the native table at once, its budget back now, its buffer once the fetch has settled. */
  #let(e: Entry): void {
    if (e.slot >= 0) {
      this.native?.table.take(e.slot)
      e.slot = -1
    }
    this.budget.give(e.reserved)
    e.data.then(this.release, () => undefined)
  }

  /** Starts fetching [from, from + len) of chunk `c`; undefined when the budget has no room. */
  #start(c: number, from: number, len: number): Entry | undefined {
    if (this.#closed) return undefined
    const old = this.#chunks.get(from)
    if (old) this.#drop(old)
    // past the handle's cap (in bytes: pieces are small), the piece furthest behind goes first
    const cap = (Math.max(1, this.opts.windowChunks) + KEEP_BEHIND + Math.ceil(KERNEL_SPAN / this.chunkSize)) * this.chunkSize
    while (this.#chunks.size > 0 && this.#held + len > cap) this.#drop(this.#chunks.get(Math.min(...this.#chunks.keys()))!)
    if (!this.budget.take(len)) return undefined
    const entry: Entry = { chunk: c, start: from, want: len, data: this.fetch(from, len), at: performance.now(), reserved: len, served: 0, length: 0, slot: -1 }
    this.stats.fetches++
    this.#chunks.set(from, entry)
    this.#held += len
    entry.data.then(
      (b) => {
        entry.length = b.length
        if (this.#chunks.get(from) !== entry) return
        // the budget holds what the data really is (short at the end of the file)
        if (b.length < entry.reserved) {
          this.budget.give(entry.reserved - b.length)
          entry.reserved = b.length
        }
        // libfuse threads may serve it for what is left of its freshness
        const ttl = this.opts.maxAgeMs - (performance.now() - entry.at)
        if (this.native && !this.#closed && b.length > 0 && ttl > 0 && entry.served < b.length) {
          entry.slot = this.native.table.put(this.native.fh, entry.start, b, ttl, b.length - entry.served, () => this.#nativeProgress(entry))
        }
      },
      () => this.#drop(entry),
    )
    return entry
  }
}
