// USRBIO-shaped batch I/O (3FS src/lib/api/hf3fs_usrbio.h, UsrbIo.md, fuse
// IoRing) as an in-process TS client library:
//
//   const iov = createIov(64 << 20)                          // the data region
//   const ior = createIor({ entries: 1024, forRead: true, ioDepth: 64 })
//   const fd = regFd(fileHandle)                             // or await regFd(path, fs)
//   const idx = prepIo(ior, iov, true, bufOff, fd, fileOff, len, userdata)  // ≥ 0, or -EAGAIN when full
//   submitIos(ior)
//   const cqes = await waitForIos(ior, 64, 1, 1000)          // [{ index, result: bytes | -errno, userdata }]
//
// Semantics kept from 3FS:
//  - an Ior is read-only or write-only; `entries` requests may be outstanding
//    (prepared and not yet reaped by waitForIos); prepIo is single-producer;
//  - ioDepth > 0: exactly ioDepth requests form a batch, and a batch only
//    starts when that many are queued; ioDepth = 0: everything queued goes
//    as soon as it is seen; ioDepth < 0: up to -ioDepth per batch, and a
//    smaller batch waits up to timeoutMs for more before it goes;
//  - batches run concurrently (up to maxJobs per ring, 3FS max_jobs_per_ioring);
//    each batch becomes one StorageClient.batchRead (one RPC per storage node)
//    or parallel chunk writes on every chain it touches (contiguous requests
//    of one file in a batch are merged into chunk-sized pieces, reads and
//    writes alike);
//  - reads land directly in the iov (the socket read writes there, across
//    the slots of merged requests); write data is sent straight from the iov;
//  - a read completes as soon as the chunk IOs it overlaps are in (3FS posts
//    a batch's completions together), so one slow node does not hold back
//    the rest of its batch and a consumer can refill the ring at once;
//  - flags: ALLOW_READ_UNCOMMITTED (relaxed read of pending updates),
//    FORBID_READ_HOLES (a hole in the range fails the read);
//  - holes read as zeros and a read is short only at the end of the file;
//    3FS counts a hole at the end of the range as end of file, here the
//    file length the client knows (inode length, local writes) decides, so
//    results match pread(2) on the same file;
//  - writes do not change the file length at once: they record length hints
//    that periodic sync or fsync of the FileSystem reports to meta.
// One addition: with ioDepth > 0, 3FS never runs a batch shorter than
// ioDepth, so a tail of fewer requests waits forever. Here such a tail runs
// once a consumer is blocked in waitForIos, nothing else of the ring is in
// flight, and no request was prepared for shortBatchAfterMs (default 1 s;
// Infinity keeps 3FS's behaviour).

import { constants as bufferConstants } from 'node:buffer'
import os from 'node:os'
import { randomUUID } from 'node:crypto'
import { StrataError, toStrataError } from '../../common/errors.js'
import type { ChunkReadResult } from '../storage-client.js'
import { assembleRead, fileLayout } from './file-io.js'
import type { FileHandle, FileSystem } from './file-system.js'
import type { OpenFlagsInput } from './flags.js'
import { maxFileSize, type ChunkPiece } from './pieces.js'

export const IOR_ALLOW_READ_UNCOMMITTED = 1
export const IOR_FORBID_READ_HOLES = 2
/** 3FS max_jobs_per_ioring */
export const DEFAULT_MAX_JOBS_PER_IOR = 32
/** 3FS ring indices are int32 */
export const MAX_IOR_ENTRIES = 2 ** 31 - 1
/** the longest delay setTimeout takes (a longer one fires at once) */
const MAX_TIMER_MS = 2 ** 31 - 1

const ERRNO = os.constants.errno
export const EAGAIN = ERRNO.EAGAIN
export const EINVAL = ERRNO.EINVAL
export const EBADF = ERRNO.EBADF
export const EACCES = ERRNO.EACCES
export const EIO = ERRNO.EIO
export const EFBIG = ERRNO.EFBIG

/** Positive errno of an error (by its catalogue errno name; EIO if unknown). */
export function errnoOf(e: unknown): number {
  const se = toStrataError(e)
  const n = (ERRNO as Record<string, number>)[se.errno]
  return typeof n === 'number' ? n : EIO
}

// --- Iov: the shared data region

export interface Iov {
  readonly id: string
  readonly buf: Buffer
  readonly size: number
  /** backed by a SharedArrayBuffer (usable from worker threads) */
  readonly shared: boolean
}

export function createIov(size: number, opts: { shared?: boolean } = {}): Iov {
  if (!Number.isSafeInteger(size) || size <= 0 || size > bufferConstants.MAX_LENGTH) {
    throw new StrataError('INVALID_ARGUMENT', `iov size must be an integer from 1 to ${bufferConstants.MAX_LENGTH} (the largest Buffer), got ${size}`)
  }
  const shared = !!opts.shared
  const buf = shared ? Buffer.from(new SharedArrayBuffer(size)) : Buffer.alloc(size)
  return { id: randomUUID(), buf, size, shared }
}

/** Wraps existing memory as an iov (3FS hf3fs_iovwrap). */
export function wrapIov(mem: Uint8Array): Iov {
  if (!(mem instanceof Uint8Array)) throw new StrataError('INVALID_ARGUMENT', 'wrapIov needs a Buffer or Uint8Array')
  const buf = Buffer.isBuffer(mem) ? mem : Buffer.from(mem.buffer, mem.byteOffset, mem.byteLength)
  return { id: randomUUID(), buf, size: buf.length, shared: buf.buffer instanceof SharedArrayBuffer }
}

// --- registered fds

export interface RegisteredFd {
  /** ≤ 0, as hf3fs_reg_fd returns */
  readonly fd: number
  readonly handle: FileHandle
  /** opened by regFd(path) and closed by deregFd */
  readonly owned: boolean
}

const registry = new Map<number, RegisteredFd>()
/** the registration of each handle: 3FS refuses an fd registered twice (weak: it must not keep handles either) */
const byHandle = new WeakMap<FileHandle, RegisteredFd>()
let nextFd = 0
/** registry size at which register() next drops the entries of closed handles */
let sweepAt = 1024

/** Registers an open file for batch I/O. */
export function regFd(handle: FileHandle): RegisteredFd
/** Opens `path` on `fs` (default read-only) and registers it; deregFd closes it. */
export function regFd(path: string, fs: FileSystem, flags?: OpenFlagsInput): Promise<RegisteredFd>
export function regFd(target: FileHandle | string, fs?: FileSystem, flags: OpenFlagsInput = 'r'): RegisteredFd | Promise<RegisteredFd> {
  if (typeof target === 'string') {
    // the path form returns a promise: its errors come through it
    if (!fs || typeof fs.open !== 'function') return Promise.reject(new StrataError('INVALID_ARGUMENT', 'regFd(path) needs the FileSystem to open it on'))
    return fs.open(target, flags).then((h) => register(h, true))
  }
  if (!target || typeof target !== 'object' || !('state' in target)) throw new StrataError('INVALID_ARGUMENT', 'regFd needs a FileHandle or a path')
  if (target.closed) throw new StrataError('META_BAD_FILE', 'cannot register a closed handle')
  const prev = byHandle.get(target)
  if (prev) throw new StrataError('INVALID_ARGUMENT', `${target.path}: handle ${target.fd} is already registered as fd ${prev.fd}`)
  return register(target, false)
}

function register(handle: FileHandle, owned: boolean): RegisteredFd {
  // A handle closed without deregFd (its FileSystem shut down, or the caller
  // forgot) can serve no more I/O, but its entry kept the handle and its
  // inode state for the life of the process: one per file ever registered.
  // Swept when the registry has doubled since the last sweep, so the cost
  // per registration stays constant.
  if (registry.size >= sweepAt) {
    for (const [fd, r] of registry) {
      if (!r.handle.closed) continue
      registry.delete(fd)
      byHandle.delete(r.handle)
    }
    sweepAt = Math.max(1024, 2 * registry.size)
  }
  const r: RegisteredFd = { fd: nextFd--, handle, owned }
  registry.set(r.fd, r)
  byHandle.set(handle, r)
  return r
}

/** Registrations held (diagnostics and tests): live ones, and at most as many of handles closed without deregFd. */
export function registeredFdCount(): number {
  return registry.size
}

export async function deregFd(fd: RegisteredFd | number): Promise<void> {
  const r = registry.get(typeof fd === 'number' ? fd : fd.fd)
  if (!r) return
  registry.delete(r.fd)
  byHandle.delete(r.handle)
  // closing waits for the fd's writes in flight (they are on the inode's behind list) and reports their length
  if (r.owned) await r.handle.close()
}

function lookupFd(fd: RegisteredFd | number): RegisteredFd | undefined {
  const r = registry.get(typeof fd === 'number' ? fd : fd.fd)
  if (r?.handle.closed) {
    // a registration ends with its handle (prepIo answers -EBADF, as for a never registered fd)
    registry.delete(r.fd)
    byHandle.delete(r.handle)
    return undefined
  }
  return r
}

// --- Ior: the request ring

export interface IorOptions {
  /** most requests outstanding at once (prepared and not yet reaped) */
  entries: number
  forRead: boolean
  /** >0: batches of exactly ioDepth; 0: as soon as seen; <0: up to -ioDepth per batch with timeout batching */
  ioDepth?: number
  /** ioDepth < 0: how long a short batch waits for more requests */
  timeoutMs?: number
  /** IOR_ALLOW_READ_UNCOMMITTED | IOR_FORBID_READ_HOLES */
  flags?: number
  /** batches of this ring running at once (default 32) */
  maxJobs?: number
  /**
   * ioDepth > 0: a tail shorter than ioDepth runs after the ring has been
   * idle this long with a consumer waiting (default 1000 ms; Infinity: never, as 3FS)
   */
  shortBatchAfterMs?: number
}

export interface Cqe {
  /** the index prepIo returned */
  index: number
  /** bytes read/written, or -errno */
  result: number
  userdata: unknown
}

interface Args {
  iov: Iov
  bufOff: number
  reg: RegisteredFd
  fileOff: number
  len: number
  userdata: unknown
}

/**
 * How many recent batch sizes a ring's stats keep. A ring lives as long as
 * the job that reads through it (weeks of batches); an entry per batch ever
 * started grew its memory without bound.
 */
export const IOR_BATCH_SIZES_KEPT = 1024

export interface IorStats {
  /** requests per started batch, in start order: the most recent ones (at least IOR_BATCH_SIZES_KEPT of them, at most twice that); `batches` counts all */
  batchSizes: number[]
  batches: number
  maxConcurrentBatches: number
  completed: number
}

export class Ior {
  readonly entries: number
  readonly forRead: boolean
  readonly ioDepth: number
  readonly timeoutMs: number
  readonly flags: number
  readonly maxJobs: number
  readonly shortBatchAfterMs: number
  readonly stats: IorStats = { batchSizes: [], batches: 0, maxConcurrentBatches: 0, completed: 0 }
  /** reaped slots, reused first; slots from `fresh` on were never used (a huge ring costs nothing up front) */
  private readonly freeSlots: number[] = []
  private fresh = 0
  private readonly args: Array<Args | undefined>
  /** prepared, not yet claimed by a batch (sqe ring) */
  private readonly queued: number[] = []
  /** finished, not yet reaped (cqe ring) */
  private readonly done: Cqe[] = []
  private processing = 0
  private running = 0
  private firstShortSeen: number | undefined
  private lastPrepAt = 0
  private batchTimer: NodeJS.Timeout | null = null
  private readonly waiters = new Set<() => void>()
  private isDestroyed = false

  constructor(o: IorOptions) {
    if (!o || !Number.isSafeInteger(o.entries) || o.entries <= 0 || o.entries > MAX_IOR_ENTRIES) {
      throw new StrataError('INVALID_ARGUMENT', `ior entries must be an integer from 1 to ${MAX_IOR_ENTRIES}, got ${o?.entries}`)
    }
    const ioDepth = o.ioDepth ?? 0
    // a batch of more than entries could never start; a cap beyond entries (ioDepth < 0) is merely never reached
    if (!Number.isSafeInteger(ioDepth) || ioDepth > o.entries) {
      throw new StrataError('INVALID_ARGUMENT', `ior ioDepth must be an integer <= entries (${o.entries}), got ${ioDepth}`)
    }
    const timeoutMs = o.timeoutMs ?? 0
    if (!(timeoutMs >= 0)) throw new StrataError('INVALID_ARGUMENT', `ior timeoutMs must be >= 0, got ${timeoutMs}`)
    const flags = o.flags ?? 0
    if (!Number.isInteger(flags) || (flags & ~(IOR_ALLOW_READ_UNCOMMITTED | IOR_FORBID_READ_HOLES)) !== 0) throw new StrataError('INVALID_ARGUMENT', `unknown ior flags ${flags}`)
    this.entries = o.entries
    this.forRead = !!o.forRead
    this.ioDepth = ioDepth
    this.timeoutMs = timeoutMs
    this.flags = flags
    this.maxJobs = o.maxJobs ?? DEFAULT_MAX_JOBS_PER_IOR
    // no batch could ever start
    if (!Number.isSafeInteger(this.maxJobs) || this.maxJobs <= 0) throw new StrataError('INVALID_ARGUMENT', `ior maxJobs must be a positive integer, got ${o.maxJobs}`)
    this.shortBatchAfterMs = o.shortBatchAfterMs ?? 1000
    if (!(this.shortBatchAfterMs >= 0)) throw new StrataError('INVALID_ARGUMENT', `ior shortBatchAfterMs must be >= 0, got ${this.shortBatchAfterMs}`)
    this.args = new Array(o.entries)
  }

  get destroyed(): boolean {
    return this.isDestroyed
  }

  /** requests prepared and not claimed by a batch yet */
  get queuedCount(): number {
    return this.queued.length
  }
  get inFlight(): number {
    return this.processing
  }
  get completedCount(): number {
    return this.done.length
  }

  /** @internal see prepIo */
  prep(iov: Iov, read: boolean, bufOff: number, fd: RegisteredFd | number, fileOff: number, len: number, userdata: unknown): number {
    if (this.destroyed) return -EINVAL
    if (read !== this.forRead || !iov || !(iov.buf instanceof Uint8Array)) return -EINVAL
    if (!Number.isSafeInteger(len) || len <= 0 || !Number.isSafeInteger(bufOff) || bufOff < 0 || bufOff + len > Math.min(iov.size, iov.buf.length)) return -EINVAL
    if (!Number.isSafeInteger(fileOff) || fileOff < 0) return -EINVAL
    const reg = lookupFd(fd)
    // a closed handle can do no IO (3FS keeps a dup of the fd open; a FileHandle has no such thing)
    if (!reg || reg.handle.closed) return -EBADF
    if ((read && !reg.handle.readable) || (!read && !reg.handle.writable)) return -EACCES
    const idx = this.freeSlots.pop() ?? (this.fresh < this.entries ? this.fresh++ : undefined)
    if (idx === undefined) return -EAGAIN
    this.args[idx] = { iov, bufOff, reg, fileOff, len, userdata }
    this.queued.push(idx)
    this.lastPrepAt = performance.now()
    return idx
  }

  /** @internal see submitIos */
  submit(): number {
    if (this.destroyed) return -EINVAL
    this.schedule(false)
    // a waiter re-checks whether it can make progress
    for (const w of [...this.waiters]) w()
    return 0
  }

  /**
   * Cuts batches off the queue per ioDepth (3FS IoRing::jobsToProc) and
   * starts them. `flushShort` also starts a short batch when ioDepth > 0.
   */
  private schedule(flushShort: boolean): void {
    if (this.destroyed) return
    while (this.queued.length > 0 && this.running < this.maxJobs) {
      let n: number
      if (this.ioDepth > 0) {
        n = this.ioDepth
        if (n > this.queued.length) {
          if (!flushShort) break
          n = this.queued.length
        }
      } else {
        n = this.queued.length
        if (this.ioDepth < 0) {
          const depth = -this.ioDepth
          if (n >= depth) n = depth
          else if (this.timeoutMs > 0) {
            const now = performance.now()
            if (this.firstShortSeen === undefined) this.firstShortSeen = now
            const waitMs = this.firstShortSeen + this.timeoutMs - now
            if (waitMs > 0) {
              this.armBatchTimer(waitMs)
              break
            }
          }
          this.firstShortSeen = undefined
        }
      }
      const batch = this.queued.splice(0, n)
      this.processing += n
      this.running++
      this.stats.batches++
      const sizes = this.stats.batchSizes
      sizes.push(n)
      // dropped in halves, so keeping the window costs O(1) per batch
      if (sizes.length >= 2 * IOR_BATCH_SIZES_KEPT) sizes.splice(0, sizes.length - IOR_BATCH_SIZES_KEPT)
      this.stats.maxConcurrentBatches = Math.max(this.stats.maxConcurrentBatches, this.running)
      void this.runBatch(batch)
    }
  }

  private armBatchTimer(ms: number): void {
    if (this.batchTimer) return
    // a longer wait comes back here and re-arms
    this.batchTimer = setTimeout(() => {
      this.batchTimer = null
      this.schedule(false)
    }, Math.min(MAX_TIMER_MS, Math.ceil(ms)))
  }

  private async runBatch(slots: number[]): Promise<void> {
    const items = slots.map((i) => this.args[i]!)
    const posted = new Array<boolean>(slots.length).fill(false)
    let wake = false
    // a read completes as soon as its data is in; completions of one moment reach waiters together
    const post = (i: number, result: number) => {
      if (posted[i]) return
      posted[i] = true
      this.processing--
      this.done.push({ index: slots[i]!, result, userdata: items[i]!.userdata })
      this.stats.completed++
      if (wake) return
      wake = true
      queueMicrotask(() => {
        wake = false
        for (const w of [...this.waiters]) w()
      })
    }
    let results: number[]
    try {
      results = this.forRead ? await readBatch(items, this.flags, post) : await writeBatch(items)
    } catch (e) {
      const err = -errnoOf(e)
      results = items.map(() => err)
    }
    this.running--
    results.forEach((r, i) => post(i, r))
    for (const w of [...this.waiters]) w()
    this.schedule(false)
  }

  /** @internal see waitForIos */
  async wait(maxResults: number, minResults: number, timeoutMs?: number | null): Promise<Cqe[]> {
    if (!Number.isInteger(maxResults) || maxResults <= 0) throw new StrataError('INVALID_ARGUMENT', `maxResults must be a positive integer, got ${maxResults}`)
    if (!Number.isInteger(minResults)) throw new StrataError('INVALID_ARGUMENT', `minResults must be an integer, got ${minResults}`)
    if (timeoutMs !== undefined && timeoutMs !== null && (typeof timeoutMs !== 'number' || Number.isNaN(timeoutMs))) {
      throw new StrataError('INVALID_ARGUMENT', `timeoutMs must be a number of milliseconds, got ${String(timeoutMs)}`)
    }
    if (this.destroyed) throw new StrataError('CLOSED', 'the ior was destroyed')
    const min = Math.min(Math.max(0, minResults), maxResults)
    // a timeout already past (≤ 0) reaps what is there, as 3FS does with an abs_timeout in the past
    const deadline = timeoutMs === undefined || timeoutMs === null ? Infinity : performance.now() + Math.max(0, timeoutMs)
    const out: Cqe[] = []
    for (;;) {
      while (out.length < maxResults && this.done.length > 0) {
        const c = this.done.shift()!
        this.args[c.index] = undefined
        this.freeSlots.push(c.index)
        out.push(c)
      }
      // freed cqe space and a waiting consumer: let the ring make progress (3FS posts the submit sem here)
      this.schedule(false)
      if (out.length >= min || out.length >= maxResults) return out
      if (this.destroyed) {
        // completions already taken off the ring are this waiter's: losing them would lose their results
        if (out.length > 0) return out
        throw new StrataError('CLOSED', 'the ior was destroyed while waiting')
      }
      const now = performance.now()
      if (now >= deadline) return out
      let wakeAt = deadline
      if (this.ioDepth > 0 && this.processing === 0 && this.queued.length > 0 && this.queued.length < this.ioDepth && Number.isFinite(this.shortBatchAfterMs)) {
        // a short tail nobody is adding to: run it rather than wait forever
        const due = this.lastPrepAt + this.shortBatchAfterMs
        if (now >= due) {
          this.schedule(true)
          continue
        }
        wakeAt = Math.min(wakeAt, due)
      }
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(t)
          this.waiters.delete(wake)
          resolve()
        }
        // a wait longer than a timer can take wakes early and goes round again
        const t = wakeAt === Infinity ? undefined : setTimeout(wake, Math.min(MAX_TIMER_MS, Math.max(1, Math.ceil(wakeAt - now))))
        this.waiters.add(wake)
      })
    }
  }

  destroy(): void {
    this.isDestroyed = true
    if (this.batchTimer) clearTimeout(this.batchTimer)
    for (const w of [...this.waiters]) w()
  }
}

export function createIor(o: IorOptions): Ior {
  return new Ior(o)
}

export function destroyIor(ior: Ior): void {
  if (ior instanceof Ior) ior.destroy()
}

/**
 * Queues one request; returns its index (≥ 0) or -errno: -EAGAIN when
 * `entries` requests are outstanding, -EINVAL for bad arguments or a read
 * on a write ring (and vice versa), a destroyed ring or no ring, -EBADF for
 * an unregistered fd or a closed handle, -EACCES when the file is not open
 * for that direction.
 */
export function prepIo(
  ior: Ior,
  iov: Iov,
  read: boolean,
  bufOff: number,
  fd: RegisteredFd | number,
  fileOff: number,
  len: number,
  userdata?: unknown,
): number {
  if (!(ior instanceof Ior)) return -EINVAL
  return ior.prep(iov, read, bufOff, fd, fileOff, len, userdata)
}

/** Lets the ring start batches of what is queued: 0, or -EINVAL for a destroyed (or no) ring. */
export function submitIos(ior: Ior): number {
  if (!(ior instanceof Ior)) return -EINVAL
  return ior.submit()
}

/**
 * Reaps up to maxResults completions, waiting until at least minResults are
 * there or timeoutMs passes (no timeout: wait as long as it takes; ≤ 0: no
 * wait). Rejects with INVALID_ARGUMENT for bad arguments, CLOSED on a
 * destroyed ring.
 */
export async function waitForIos(ior: Ior, maxResults: number, minResults = 1, timeoutMs?: number | null): Promise<Cqe[]> {
  if (!(ior instanceof Ior)) throw new StrataError('INVALID_ARGUMENT', 'waitForIos needs an Ior from createIor')
  return ior.wait(maxResults, minResults, timeoutMs)
}

// --- batch execution

/**
 * Reads one batch. Requests of one handle that are contiguous in the file
 * (in any order of the batch) are planned as one range, so 1 MiB requests
 * into 4 MiB chunks become whole-chunk IOs, each received in place across
 * the requests' iov slots (a scatter list): storage then sends a whole
 * chunk from the page cache with its stored checksum instead of reading and
 * checksumming four pieces. All IOs of the batch go out in one batchRead per
 * file system; each request still gets the result pread(2) of its own range
 * would give.
 */
/** Bytes of a request's range below the maximum file size (≤ 0: none). */
function roomIn(a: Args): number {
  return maxFileSize(fileLayout(a.reg.handle.state.inode).chunkSize) - a.fileOff
}

async function readBatch(batch: Args[], flags: number, post: (i: number, result: number) => void = () => {}): Promise<number[]> {
  const results = new Array<number>(batch.length).fill(0)
  // no file has bytes past the maximum size: a read there is at the end of the file, as pread(2) past EOF
  const answered = new Set<number>()
  const items = batch.map((a, i) => {
    if (a.reg.handle.closed) return a
    const room = roomIn(a)
    if (room <= 0) answered.add(i)
    return room < a.len ? { ...a, len: Math.max(0, room) } : a
  })
  const posted = new Array<boolean>(items.length).fill(false)
  const finish = (i: number, n: number) => {
    if (posted[i]) return
    posted[i] = true
    results[i] = n
    post(i, n)
  }
  const allowHoles = (flags & IOR_FORBID_READ_HOLES) === 0
  type Run = { idx: number[]; pieces: ChunkPiece[]; into: Array<Buffer | Buffer[]> }
  const groups = new Map<FileSystem, Run[]>()
  const runsByHandle = contiguousRuns(items, results, answered)
  results.forEach((n, i) => (n !== 0 || answered.has(i)) && finish(i, n))
  await Promise.all(
    [...runsByHandle].map(async ([h, runs]) => {
      try {
        const st = h.state
        if (!st.wb.empty) await st.lock.run(() => h.fs.flushLocked(st, false))
        // the writes in flight now (not those started later: a ring writing the file without pause must not starve its readers)
        else if (st.behind.size > 0) await Promise.allSettled([...st.behind.keys()])
        let g = groups.get(h.fs)
        if (!g) groups.set(h.fs, (g = []))
        for (const idx of runs) {
          const first = items[idx[0]!]!
          const last = items[idx[idx.length - 1]!]!
          const pieces = await h.fs.io.plan(st.inode, first.fileOff, last.fileOff + last.len - first.fileOff)
          g.push({ idx, pieces, into: pieces.map((p) => slotsOf(items, idx, p.fileOffset, p.length)) })
        }
      } catch (e) {
        for (const idx of runs) for (const i of idx) finish(i, -errnoOf(e))
      }
    }),
  )
  await Promise.all(
    [...groups].map(async ([fs, runs]) => {
      // a request completes as soon as the chunk IOs it overlaps are in
      const rs: Array<ChunkReadResult | undefined> = []
      const waiting: number[] = []
      const readers: number[][] = []
      let base = 0
      for (const run of runs) {
        for (const i of run.idx) {
          const a = items[i]!
          let n = 0
          run.pieces.forEach((p, k) => {
            if (p.fileOffset < a.fileOff + a.len && a.fileOff < p.fileOffset + p.length) {
              ;(readers[base + k] ??= []).push(i)
              n++
            }
          })
          waiting[i] = n
        }
        base += run.pieces.length
      }
      const runOf = new Map<number, { run: Run; base: number }>()
      base = 0
      for (const run of runs) {
        for (const i of run.idx) runOf.set(i, { run, base })
        base += run.pieces.length
      }
      const complete = (i: number) => {
        const { run, base: b } = runOf.get(i)!
        const a = items[i]!
        const [pieces, got] = requestShare(a, run.pieces, rs.slice(b, b + run.pieces.length) as ChunkReadResult[])
        let n = assembleRead(pieces, got, a.iov.buf, a.bufOff, allowHoles)
        if (typeof n === 'number') {
          // within the length the file is known to have, a trailing hole still reads as zeros
          const min = Math.min(a.len, Math.max(0, a.reg.handle.state.knownLength() - a.fileOff))
          if (min > n) {
            if (!allowHoles) n = new StrataError('IO_ERROR', 'the read range ends in a hole (FORBID_READ_HOLES)')
            else {
              a.iov.buf.fill(0, a.bufOff + n, a.bufOff + min)
              n = min
            }
          }
        }
        if (typeof n === 'number') fs.counters.bytesRead += n
        finish(i, typeof n === 'number' ? n : -errnoOf(n))
      }
      const completeSafely = (i: number) => {
        try {
          complete(i)
        } catch (e) {
          finish(i, -errnoOf(e))
        }
      }
      for (const run of runs) for (const i of run.idx) if (waiting[i] === 0) completeSafely(i)
      try {
        const all = await fs.io.readPieces(
          runs.flatMap((r) => r.pieces),
          {
            allowReadUncommitted: (flags & IOR_ALLOW_READ_UNCOMMITTED) !== 0,
            onResult: (k, r) => {
              rs[k] = r
              for (const i of readers[k] ?? []) if (--waiting[i]! === 0) completeSafely(i)
            },
          },
          runs.flatMap((r) => r.into),
        )
        // (a file system whose reads do not report one by one)
        all.forEach((r, k) => void (rs[k] ??= r))
        for (const run of runs) for (const i of run.idx) if (!posted[i]) completeSafely(i)
      } catch (e) {
        for (const r of runs) for (const i of r.idx) finish(i, -errnoOf(e))
      }
    }),
  )
  return results
}

/**
 * The batch's requests by handle, each handle's as runs of requests that are
 * contiguous in the file, sorted by offset. A closed handle's requests get
 * -EBADF in results and are left out, as are those in `answered`; an empty
 * request is a run of its own.
 */
function contiguousRuns(items: readonly Args[], results: number[], answered: ReadonlySet<number> = new Set()): Map<FileHandle, number[][]> {
  const byHandle = new Map<FileHandle, number[]>()
  items.forEach((a, i) => {
    if (answered.has(i)) return
    const h = a.reg.handle
    if (h.closed) return void (results[i] = -EBADF)
    let g = byHandle.get(h)
    if (!g) byHandle.set(h, (g = []))
    g.push(i)
  })
  const out = new Map<FileHandle, number[][]>()
  for (const [h, idx] of byHandle) {
    const runs: number[][] = []
    idx.sort((x, y) => items[x]!.fileOff - items[y]!.fileOff)
    let run: number[] = []
    let end = -1
    for (const i of idx) {
      const a = items[i]!
      if (run.length > 0 && (a.fileOff !== end || a.len === 0 || items[run[run.length - 1]!]!.len === 0)) {
        runs.push(run)
        run = []
      }
      run.push(i)
      end = a.fileOff + a.len
    }
    if (run.length > 0) runs.push(run)
    out.set(h, runs)
  }
  return out
}

/**
 * The iov memory that receives file range [off, off+len) of a run: one
 * Buffer when the requests' slots there are adjacent in memory, else the
 * list of slot pieces in file order.
 */
function slotsOf(items: readonly Args[], run: readonly number[], off: number, len: number): Buffer | Buffer[] {
  const parts: Buffer[] = []
  for (const i of run) {
    const a = items[i]!
    const from = Math.max(off, a.fileOff)
    const to = Math.min(off + len, a.fileOff + a.len)
    if (from >= to) continue
    const b = a.iov.buf.subarray(a.bufOff + from - a.fileOff, a.bufOff + to - a.fileOff)
    const prev = parts[parts.length - 1]
    if (prev && prev.buffer === b.buffer && prev.byteOffset + prev.length === b.byteOffset) {
      parts[parts.length - 1] = Buffer.from(prev.buffer, prev.byteOffset, prev.length + b.length)
    } else parts.push(b)
  }
  return parts.length === 1 ? parts[0]! : parts
}

/**
 * One request's part of its run's chunk IOs: the pieces of its own range and
 * what each returned, as if the request had been read alone (the data views
 * where its bytes are: in its slot when received in place, else in the
 * reply), ready for assembleRead.
 */
function requestShare(a: Args, runPieces: readonly ChunkPiece[], runResults: readonly ChunkReadResult[]): [ChunkPiece[], ChunkReadResult[]] {
  const pieces: ChunkPiece[] = []
  const got: ChunkReadResult[] = []
  const end = a.fileOff + a.len
  runPieces.forEach((p, k) => {
    const from = Math.max(p.fileOffset, a.fileOff)
    const to = Math.min(p.fileOffset + p.length, end)
    if (from >= to) return
    const skip = from - p.fileOffset
    pieces.push({ ...p, offsetInChunk: p.offsetInChunk + skip, length: to - from, fileOffset: from, bufOffset: from - a.fileOff })
    const r = runResults[k]!
    if (!r.ok) return void got.push(r)
    const have = Math.max(0, Math.min(to - from, (r.placed ?? r.data.length) - skip))
    const data =
      r.placed !== undefined
        ? a.iov.buf.subarray(a.bufOff + from - a.fileOff, a.bufOff + from - a.fileOff + have)
        : r.data.subarray(skip, skip + have)
    got.push({ ...r, data })
  })
  return [pieces, got]
}

/**
 * Writes one batch. Requests of one handle that are contiguous in the file
 * (in any order of the batch) go as one range, so 1 MiB requests into 4 MiB
 * chunks become whole-chunk writes: one replicated update per chunk instead
 * of four, and none arrives below bytes already written, which storage
 * would have to copy the chunk for (its copy-on-write of committed data).
 * Each request still gets its own result: an error in any chunk piece it
 * overlaps.
 */
async function writeBatch(batch: Args[]): Promise<number[]> {
  const results = new Array<number>(batch.length).fill(0)
  const answered = new Set<number>()
  // the maximum file size is the client's rule, as for write(): a request across it writes what fits, one at or past it is EFBIG
  const items = batch.map((a, i) => {
    const room = roomIn(a)
    if (room <= 0) {
      results[i] = -EFBIG
      answered.add(i)
    }
    return room < a.len ? { ...a, len: Math.max(0, room) } : a
  })
  const byHandle = contiguousRuns(items, results, answered)
  await Promise.all(
    [...byHandle].map(async ([h, runs]) => {
      // bytes write() left in the buffer were written before these: they go first, or their later flush would land over them
      const st = h.state
      try {
        if (!st.wb.empty) await st.lock.run(() => h.fs.flushLocked(st, false))
      } catch (e) {
        for (const run of runs) for (const i of run) results[i] = -errnoOf(e)
        return
      }
      await Promise.all(runs.map((run) => writeRun(items, run, results)))
    }),
  )
  return results
}

/**
 * Writes requests run[0..] (one handle, contiguous, sorted by file offset)
 * as one range. Until its length hints are recorded the run counts as a
 * write in flight on the inode (state.behind, as the write buffer's direct
 * flushes do), so a close, fsync or read of the file waits for it: a close
 * (deregFd of a path it opened) that did not would end the session without
 * the run's length, and the file would stay short of bytes on storage.
 */
function writeRun(items: Args[], run: number[], results: number[]): Promise<void> {
  const first = items[run[0]!]!
  const st = first.reg.handle.state
  const runOff = first.fileOff
  const runLen = run.reduce((n, i) => n + items[i]!.len, 0)
  const p: Promise<void> = writeRunNow(items, run, results, runLen)
    // waiters on the inode (drainBehind) take no failure from here: each request has its result
    .catch((e: unknown) => {
      for (const i of run) if (results[i]! >= 0) results[i] = -errnoOf(e)
    })
    .finally(() => st.behind.delete(p))
  st.behind.set(p, { off: runOff, end: runOff + runLen })
  return p
}

async function writeRunNow(items: Args[], run: number[], results: number[], runLen: number): Promise<void> {
  const first = items[run[0]!]!
  const h = first.reg.handle
  const st = h.state
  const tvs = run.map(() => st.beginWrite())
  const runOff = first.fileOff
  try {
    const pieces = await h.fs.io.plan(st.inode, runOff, runLen)
    const sources = pieces.map((p) => sourceOf(items, run, p.fileOffset, p.length))
    const errs = await h.fs.io.writePieces(pieces, sources, fileLayout(st.inode).chunkSize)
    for (const i of run) {
      const a = items[i]!
      const bad = pieces.findIndex((p, k) => errs[k] && p.fileOffset < a.fileOff + a.len && a.fileOff < p.fileOffset + p.length)
      results[i] = bad >= 0 ? -errnoOf(errs[bad]) : a.len
    }
  } catch (e) {
    const err = -errnoOf(e)
    for (const i of run) results[i] = err
  }
  // also when the handle was closed meanwhile: the state is the inode's, shared with other handles
  run.forEach((i, k) => {
    const a = items[i]!
    const res = results[i]!
    h.fs.noteWrite(st, tvs[k]!, a.fileOff, res >= 0 ? res : -1)
    if (res >= 0) h.fs.counters.bytesWritten += res
  })
}

/** The bytes of file range [off, off+len) from the run's iovs: a view when one request holds them all, else a copy. */
function sourceOf(items: Args[], run: number[], off: number, len: number): Buffer {
  const parts: Buffer[] = []
  for (const i of run) {
    const a = items[i]!
    const from = Math.max(off, a.fileOff)
    const to = Math.min(off + len, a.fileOff + a.len)
    if (from >= to) continue
    parts.push(a.iov.buf.subarray(a.bufOff + from - a.fileOff, a.bufOff + to - a.fileOff))
  }
  return parts.length === 1 ? parts[0]! : Buffer.concat(parts, len)
}
