// What a client knows about one open file beyond the inode meta returned
// (3FS fuse RcInode::DynamicAttr): write/sync counters, the truncate version
// writes are tagged with, the length hint {max(offset+len), truncateVer} to
// send with the next sync, local mtime, the write buffer and its lock.

import type { StrataError } from '../../common/errors.js'
import type { Inode, VersionedLength } from '../../meta/protocol.js'
import { WriteBuffer } from './write-buffer.js'

/** 3FS VersionedLength::mergeHint: unknown wins (a failed write poisons the hint), else the longer one. */
export function mergeHint(a: VersionedLength | null, b: VersionedLength | null): VersionedLength | null {
  if (!a || !b) return null
  return a.length >= b.length ? a : b
}

/** Whether length a is behind b in meta's order: by truncate version, then by length. */
function isOlder(a: VersionedLength, b: VersionedLength): boolean {
  return a.truncateVer < b.truncateVer || (a.truncateVer === b.truncateVer && a.length < b.length)
}

/** A promise-chain mutex (3FS wbMtx). */
export class Mutex {
  private tail: Promise<void> = Promise.resolve()
  private held = 0

  get locked(): boolean {
    return this.held > 0
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    const prev = this.tail
    let release!: () => void
    this.tail = new Promise<void>((r) => (release = r))
    this.held++
    try {
      await prev
      return await fn()
    } finally {
      this.held--
      release()
    }
  }

  /** Runs fn only if nobody holds or waits for the lock (periodic sync's try_lock). */
  async tryRun<T>(fn: () => Promise<T>): Promise<{ ran: true; value: T } | { ran: false }> {
    if (this.held > 0) return { ran: false }
    return { ran: true, value: await this.run(fn) }
  }
}

export type SyncKind = 'periodic' | 'getattr' | 'fsync' | 'force'

export class InodeState {
  inode: Inode
  readonly id: bigint
  /** successful or failed write flushes so far */
  written = 0
  /** `written` as of the last sync meta acknowledged */
  synced = 0
  /** `written` as of the last exact-length sync (fsync, close, truncate) */
  fsynced = 0
  truncateVer: number
  hint: VersionedLength | null
  /** µs of the last local write */
  mtime: number | undefined
  readonly wb: WriteBuffer
  readonly lock = new Mutex()
  /** open handles sharing this state */
  refs = 0
  /** flushes of full write buffers still on their way to storage (write-behind), with their ranges */
  readonly behind = new Map<Promise<void>, { off: number; end: number }>()
  /** the first failure of a write-behind flush; the next write, flush, fsync or close reports it */
  behindError: StrataError | null = null

  /** the newest (truncateVer, length) adopted: later replies are taken no further back than this */
  private floor: VersionedLength | null = null

  constructor(inode: Inode, writeBufferSize: number) {
    this.inode = inode
    if (inode.file) this.floor = { length: inode.file.length, truncateVer: inode.file.truncateVer }
    this.id = inode.id
    this.truncateVer = inode.file?.truncateVer ?? 0
    this.hint = { length: 0, truncateVer: this.truncateVer }
    // flushes in whole chunks: each is one update of every replica (see WriteBuffer)
    this.wb = new WriteBuffer(writeBufferSize, inode.file?.layout.chunkSize ?? 0)
  }

  /** The truncate version writes starting now belong to (3FS beginWrite without dynamic stripes). */
  beginWrite(): number {
    return this.truncateVer
  }

  /** Records a finished flush: `bytes` < 0 means it failed and the hint is no longer trustworthy. */
  finishWrite(truncateVer: number, offset: number, bytes: number, nowUs = Date.now() * 1000): void {
    const h = bytes >= 0 ? { length: bytes ? offset + bytes : 0, truncateVer } : null
    this.written++
    this.hint = mergeHint(this.hint, h)
    this.mtime = nowUs
  }

  /** Is there anything a sync of this kind would send? */
  needsSync(kind: SyncKind): boolean {
    if (kind === 'force') return true
    const base = kind === 'fsync' ? this.fsynced : this.synced
    return base < this.written
  }

  /**
   * Adopts an inode meta returned after a sync/close/truncate that covered
   * writes up to `syncVer`; `exact` marks an exact-length sync.
   */
  update(inode: Inode, syncVer = 0, exact = false): void {
    if (inode.type !== 'File' || !inode.file) {
      this.inode = inode
      return
    }
    const file = inode.file
    this.inode = inode
    if (this.floor) this.raiseLength(this.floor)
    this.synced = Math.max(this.synced, syncVer)
    if (this.written === this.synced) this.hint = { length: 0, truncateVer: 0 }
    if (exact) this.fsynced = Math.max(this.fsynced, syncVer)
    this.truncateVer = Math.max(this.truncateVer, file.truncateVer)
  }

  /**
   * Takes `v` as the least the length can be: a file's (truncateVer, length)
   * only moves forward at meta, so a reply meta computed before one this
   * client has already seen (an open's reply overtaken by another handle's
   * close or sync) carries a stale length, and taking it would put the next
   * append over bytes this client wrote and synced.
   */
  raiseLength(v: VersionedLength): void {
    const f = this.inode.file
    if (!f) return
    if (isOlder(f, v)) this.inode = { ...this.inode, file: { ...f, length: v.length, truncateVer: v.truncateVer } }
    this.floor = { length: this.inode.file!.length, truncateVer: this.inode.file!.truncateVer }
    this.truncateVer = Math.max(this.truncateVer, v.truncateVer)
  }

  /** The newest (truncateVer, length) seen for this file. */
  get lengthSeen(): VersionedLength | null {
    return this.floor
  }

  clearHint(): void {
    this.hint = null
  }

  /** Best local idea of the file length: meta's, or further if we wrote beyond it under the current truncate version. */
  knownLength(): number {
    const metaLen = this.inode.file?.length ?? 0
    const hinted = this.hint && this.hint.truncateVer >= (this.inode.file?.truncateVer ?? 0) ? this.hint.length : 0
    let buffered = this.wb.empty ? 0 : this.wb.end
    for (const r of this.behind.values()) buffered = Math.max(buffered, r.end)
    return Math.max(metaLen, hinted, buffered)
  }

  /** Does [off, end) overlap a flush still in flight? */
  overlapsBehind(off: number, end: number): boolean {
    for (const r of this.behind.values()) if (off < r.end && r.off < end) return true
    return false
  }

  get dirty(): boolean {
    return !this.wb.empty || this.behind.size > 0 || this.synced < this.written
  }
}
