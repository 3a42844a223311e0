// Per-target chunk engine: chunk metadata in lmdb, chunk data in copy-on-write
// version files, CRAQ version algebra and commit as in 3FS ChunkReplica
// (3fs.md §3.1, §3.2, §8.3). Local only: the storage service drives it,
// forwarding and replying over RPC.
//
// Crash model. An update that changes data first records the chunk DIRTY
// (naming the file it is about to write), then writes and syncs that file,
// then records it CLEAN with the new content. The previous content is never
// overwritten (new file, or bytes appended past every live version's end), so
// a crash at any point leaves either the old record or a DIRTY one whose
// committed content is intact. A DIRTY chunk stays DIRTY across restarts until
// a syncing write, a forced commit or a removal replaces it, exactly the 3FS
// contract for torn writes.

import { promises as fsp } from 'node:fs'
import * as path from 'node:path'
import { open as openLmdb } from 'lmdb'
import type { Database, RootDatabase } from 'lmdb'
import { StrataError, toStrataError, type ErrorCode } from '../../common/errors.js'
import type { ChunkMeta, UpdateIO, UpdateType } from '../protocol.js'
import { crc32cCombine, crc32cOf, crc32cZeros } from './crc.js'
import { ChunkFiles, type ContentEdit, type EngineFaults, type MaterializeMode } from './files.js'
import { KeyedMutex, OpGate } from './locks.js'
import {
  recordToMeta,
  type ApplyUpdateOptions,
  type ChunkReadResult,
  type ChunkRecord,
  type CommitOptions,
  type CommitResult,
  type ContentRef,
  type EngineSpaceInfo,
  type LastChunkInfo,
  type LeasedRange,
  type ReadOptions,
  type RecoveryInfo,
  type UpdateResult,
  type WholeChunk,
} from './records.js'
import { nextVersions } from './versions.js'

export interface ChunkEngineOptions {
  /** Target directory; created if missing. */
  dir: string
  targetId: number
  /**
   * Sync data files (and their directory entries) and wait for metadata to be
   * flushed before a commit returns. Default true. With false, everything
   * survives a process crash but not a machine crash.
   */
  fsync?: boolean
  /**
   * Write chunk data of 64 KiB and more (4 KiB-aligned) with O_DIRECT, past
   * the page cache, as 3FS does. Default true; filesystems that refuse
   * O_DIRECT (some FUSE and network filesystems, tmpfs before Linux 6.6)
   * fall back to buffered writes by themselves.
   */
  directWrites?: boolean
}

/** Target-level records kept next to the chunk metadata. */
const TARGET_KEY = {
  targetId: 'targetId',
  chainId: 'chainId',
  everUptodate: 'everUptodate',
  format: 'format',
} as const

const FORMAT_VERSION = 1
const CHUNK_ID_LEN = 16
const UPDATE_TYPES: readonly UpdateType[] = ['WRITE', 'REMOVE', 'TRUNCATE', 'EXTEND']
const EMPTY = Buffer.alloc(0)
/** A read that loses a race with file reclamation is retried this many times before reporting it. */
/** decoded chunk records kept per target (~0.5 KiB each: at most ~8 MiB) */
const RECORD_CACHE_ENTRIES = 16_384
const READ_ATTEMPTS = 4

/** Thrown by a fault hook: the update stops where it is, as if the process died there. */
class SimulatedCrash extends Error {
  constructor(readonly original: unknown) {
    super('simulated crash')
  }
}

interface NormalizedUpdate {
  type: UpdateType
  offset: number
  length: number
  chunkSize: number
  data: Buffer | null
}

export class ChunkEngine {
  /** Test-only disk fault switches; see EngineFaults. */
  readonly faults: EngineFaults = { failWrites: null, beforeDataWrite: null, afterDataWrite: null }
  /** What the last open found; a restarting service consults it (3fs.md §3.5). */
  readonly recovery: RecoveryInfo = { chunks: 0, dirtyChunks: 0, uncommittedChunks: 0, orphanFilesRemoved: 0 }

  private readonly files: ChunkFiles
  /** Serializes this engine's own steps on one chunk (update vs commit vs maintenance). */
  private readonly opLocks = new KeyedMutex()
  /** The CRAQ chunk lock the service holds across update → forward → commit. */
  private readonly chunkLocks = new KeyedMutex()
  /** decoded records by chunk id (latin1 of its bytes), see load() */
  private readonly records = new Map<string, ChunkRecord>()
  private readonly gate: OpGate
  private used = 0
  private count = 0
  private closing: Promise<void> | null = null

  private constructor(
    readonly dir: string,
    readonly targetId: number,
    readonly durable: boolean,
    private readonly env: RootDatabase,
    private readonly chunks: Database<ChunkRecord, Buffer>,
    private readonly target: Database<unknown, string>,
    directWrites: boolean,
  ) {
    this.files = new ChunkFiles(path.join(dir, 'chunks'), durable, this.faults, directWrites)
    this.gate = new OpGate(`chunk engine of target ${targetId}`)
  }

  /** Chunk data writes by how they reached the disk: O_DIRECT or through the page cache. */
  get dataWrites(): { direct: number; buffered: number } {
    return { ...this.files.writeCounts }
  }

  /** O_DIRECT writes whose data had to be copied into aligned memory first (it arrived unaligned). */
  get directCopies(): number {
    return this.files.directCopies
  }

  static async open(opts: ChunkEngineOptions): Promise<ChunkEngine> {
    if (!opts || typeof opts.dir !== 'string' || opts.dir === '') {
      throw new StrataError('INVALID_ARGUMENT', 'ChunkEngine.open needs a dir')
    }
    if (!Number.isSafeInteger(opts.targetId) || opts.targetId < 0) {
      throw new StrataError('INVALID_ARGUMENT', `bad targetId ${String(opts.targetId)}`)
    }
    const durable = opts.fsync ?? true
    await fsp.mkdir(opts.dir, { recursive: true })
    let env: RootDatabase
    try {
      // Non-durable mode never fsyncs lmdb; a process crash still keeps every
      // committed transaction because they live in the page cache.
      env = openLmdb({ path: path.join(opts.dir, 'meta'), noSync: !durable, compression: false })
    } catch (e) {
      throw toStrataError(e, 'IO_ERROR')
    }
    try {
      const chunks = env.openDB<ChunkRecord, Buffer>({ name: 'chunks', keyEncoding: 'binary' })
      const target = env.openDB<unknown, string>({ name: 'target' })
      const engine = new ChunkEngine(opts.dir, opts.targetId, durable, env, chunks, target, opts.directWrites ?? true)
      await engine.checkIdentity()
      await engine.files.init()
      await engine.recover()
      return engine
    } catch (e) {
      await env.close().catch(() => undefined)
      throw toStrataError(e, 'IO_ERROR')
    }
  }

  /** Waits for admitted operations, then closes the metadata store. Idempotent. */
  close(): Promise<void> {
    if (!this.closing) {
      this.closing = (async () => {
        await this.gate.close()
        this.files.closeAll()
        await this.env.close()
      })()
    }
    return this.closing
  }

  get isClosed(): boolean {
    return this.gate.isClosed
  }

  // ------------------------------------------------------------------ locking

  /**
   * Runs `fn` holding the CRAQ lock of one chunk. All updates of a chunk must
   * be serialized by the caller through this (the service holds it across the
   * local update, the forward and the commit). The engine's own methods do not
   * take it, so calling them inside `fn` cannot deadlock; they serialize their
   * internal steps separately.
   */
  withChunkLock<T>(chunkId: Buffer, fn: () => Promise<T> | T): Promise<T> {
    return this.chunkLocks.run(chunkIdOf(chunkId).toString('hex'), fn)
  }

  isChunkLocked(chunkId: Buffer): boolean {
    return this.chunkLocks.isLocked(chunkIdOf(chunkId).toString('hex'))
  }

  // ------------------------------------------------------------------ update

  /**
   * Applies one CRAQ update locally (3FS ChunkReplica::update). On success the
   * chunk is CLEAN with `updateVer` advanced and `commitVer` unchanged (for a
   * syncing write: `updateVer = w`, `commitVer = w - 1`); `commit` finishes it.
   * Errors leave the persisted record exactly as it was, except that a crash
   * (real or simulated by a fault hook) in the middle leaves it DIRTY.
   *
   * Errors: CHUNK_INVALID_RANGE, CHUNK_SIZE_MISMATCH, CHUNK_NOT_CLEAN,
   * CHUNK_VERSION_FENCED, CHECKSUM_MISMATCH, CHUNK_COMMITTED_UPDATE and
   * CHUNK_STALE_UPDATE (both mean "already have it": CRAQ treats them as
   * success; `detail` carries the chunk's versions and checksum),
   * CHUNK_MISSING_UPDATE, CHUNK_ADVANCE_UPDATE, NO_SPACE, IO_ERROR,
   * INVALID_ARGUMENT, CLOSED.
   *
   * TRUNCATE and EXTEND take their target length as `offset + length` (3FS
   * sends offset 0 and the length; protocol.ts documents the offset): TRUNCATE
   * sets the length exactly (zero-filling when it grows), EXTEND only grows.
   */
  async applyUpdate(io: UpdateIO, opts: ApplyUpdateOptions): Promise<UpdateResult> {
    const chunkId = chunkIdOf(io?.key?.chunkId)
    const req = normalizeUpdate(io, opts)
    return this.gate.run(() => this.opLocks.run(chunkId.toString('hex'), () => this.updateLocked(chunkId, io, req, opts)))
  }

  private async updateLocked(
    chunkId: Buffer,
    io: UpdateIO,
    req: NormalizedUpdate,
    opts: ApplyUpdateOptions,
  ): Promise<UpdateResult> {
    const old = this.load(chunkId)
    if (!old && req.type === 'REMOVE') {
      // Removing what is not there is done; report the requested version as committed (3FS).
      return {
        lengthInfo: 0,
        commitVer: io.updateVer,
        updateVer: io.updateVer,
        checksum: 0,
        commitChainVer: opts.chainVer,
        size: 0,
        state: null,
      }
    }
    const cur = old ?? emptyRecord(req.chunkSize, opts.chainVer)
    if (req.type !== 'REMOVE' && cur.chunkSize !== req.chunkSize) {
      throw chunkError('CHUNK_SIZE_MISMATCH', chunkId, cur, `chunk size is ${cur.chunkSize}, update says ${req.chunkSize}`)
    }
    if (cur.state === 'DIRTY' && !opts.isSyncing) {
      throw chunkError('CHUNK_NOT_CLEAN', chunkId, cur, 'a previous update was torn; only a syncing write can replace it')
    }
    if (cur.state === 'COMMIT' && opts.chainVer < cur.chainVer) {
      throw chunkError('CHUNK_VERSION_FENCED', chunkId, cur, `update under chain version ${opts.chainVer} < committed ${cur.chainVer}`)
    }
    let dataCrc = 0
    if (req.data && req.data.length > 0) {
      dataCrc = crc32cOf(req.data)
      if (dataCrc !== io.checksum >>> 0) {
        throw chunkError('CHECKSUM_MISMATCH', chunkId, cur, `payload crc32c ${dataCrc} != request checksum ${io.checksum >>> 0}`)
      }
    }
    const dec = nextVersions(cur, io.updateVer, opts.isSyncing)
    if (!dec.ok) throw chunkError(dec.code, chunkId, cur, dec.message)

    const next: ChunkRecord = {
      ...cur,
      commitVer: dec.commitVer,
      updateVer: dec.updateVer,
      chainVer: opts.chainVer,
      // The newest operation decides: a write after a pending remove revives the chunk.
      recycleState: req.type === 'REMOVE' ? 'REMOVAL_IN_PROGRESS' : 'NORMAL',
      lastClientId: opts.clientId ?? '',
      lastRequestId: opts.requestId ?? 0,
      timestamp: Date.now(),
    }
    const base: ContentRef = { file: cur.file, size: cur.size, checksum: cur.checksum }
    const edit = planEdit(req, base.size, opts.isSyncing)
    const lengthInfo = req.type === 'WRITE' ? req.length : edit ? edit.size : 0

    if (!edit || (!edit.write && edit.size === edit.keep) || edit.size === 0) {
      return this.updateMetadataOnly(chunkId, old, cur, next, base, edit, lengthInfo)
    }

    const basePath = base.file ? this.files.pathOf(chunkId, base.file) : null
    let plan = chooseMode(edit, base, cur.committed)
    // a reader may still be sending an older, longer version out of this file (sendfile): leave it as it is
    if (plan === 'inplace' && this.files.isLeased(basePath!)) plan = 'rewrite'
    const tag = plan === 'inplace' ? base.file! : pickTag(next.updateVer, cur)
    const targetPath = this.files.pathOf(chunkId, tag)

    // The file of an earlier torn update is garbage; drop it unless its name is reused now.
    if (cur.dirtyFile && cur.dirtyFile !== tag && !refersToContent(cur, cur.dirtyFile)) {
      await this.unlinkQuiet(chunkId, cur.dirtyFile)
    }
    const dirty: ChunkRecord = { ...next, state: 'DIRTY', dirtyFile: tag }
    await this.persist(chunkId, old, dirty)

    let checksum: number
    try {
      await this.runHook(this.faults.beforeDataWrite, chunkId)
      if (plan === 'rewrite') {
        // The checksum needs every kept byte anyway, so one read into the new
        // content beats cloning the file and reading it back.
        const content = Buffer.allocUnsafe(edit.size)
        await this.files.readInto(basePath!, content.subarray(0, edit.keep), 0)
        content.fill(0, edit.keep)
        if (edit.write) edit.write.data.copy(content, edit.write.off)
        // Only the kept base bytes are hashed; the payload's CRC is combined in.
        checksum = await contentChecksum(base, edit, dataCrc, (off, len, init) => crc32cOf(content.subarray(off, off + len), init))
        await this.files.materialize('fresh', targetPath, { keep: 0, size: edit.size, write: { off: 0, data: content } })
      } else {
        checksum = await contentChecksum(base, edit, dataCrc, (off, len, init) => this.files.crcRange(basePath!, off, len, init))
        await this.files.materialize(plan, targetPath, edit)
      }
      await this.runHook(this.faults.afterDataWrite, chunkId)
    } catch (e) {
      if (e instanceof SimulatedCrash) throw e.original
      await this.rollback(chunkId, old, dirty, plan === 'inplace' ? null : targetPath)
      throw toStrataError(e, 'IO_ERROR')
    }

    const clean: ChunkRecord = { ...dirty, state: 'CLEAN', file: tag, size: edit.size, checksum, dirtyFile: null }
    // If this fails the chunk stays DIRTY, which is the truth as far as anyone can prove.
    await this.persist(chunkId, dirty, clean)
    await this.reclaim(chunkId, [cur.file, cur.dirtyFile], clean)
    return updateResult(clean, lengthInfo)
  }

  /** Updates whose new content is a prefix of (or equal to) the current one need no data write, so no DIRTY step. */
  private async updateMetadataOnly(
    chunkId: Buffer,
    old: ChunkRecord | undefined,
    cur: ChunkRecord,
    next: ChunkRecord,
    base: ContentRef,
    edit: ContentEdit | null,
    lengthInfo: number,
  ): Promise<UpdateResult> {
    let content: ContentRef
    if (!edit) {
      content = base
    } else if (edit.size === 0) {
      content = { file: null, size: 0, checksum: 0 }
    } else if (edit.size === base.size) {
      content = base
    } else {
      let crc: number
      try {
        crc = await this.files.crcRange(this.files.pathOf(chunkId, base.file!), 0, edit.size, 0)
      } catch (e) {
        throw toStrataError(e, 'IO_ERROR')
      }
      content = { file: base.file, size: edit.size, checksum: crc }
    }
    const clean: ChunkRecord = { ...next, state: 'CLEAN', ...content, dirtyFile: null }
    await this.persist(chunkId, old, clean)
    await this.reclaim(chunkId, [cur.file, cur.dirtyFile], clean)
    return updateResult(clean, lengthInfo)
  }

  private async rollback(chunkId: Buffer, old: ChunkRecord | undefined, dirty: ChunkRecord, newFile: string | null): Promise<void> {
    try {
      if (newFile) await this.files.unlinkQuiet(newFile)
      if (old) await this.persist(chunkId, dirty, old)
      else await this.deleteRecord(chunkId, dirty)
    } catch {
      // The record stays DIRTY: committed content is still served and resync repairs the rest.
    }
  }

  private async runHook(hook: EngineFaults['beforeDataWrite'], chunkId: Buffer): Promise<void> {
    if (!hook) return
    try {
      await hook(chunkId)
    } catch (e) {
      throw new SimulatedCrash(e)
    }
  }

  // ------------------------------------------------------------------ commit

  /**
   * Commits version `commitVer` (3FS ChunkReplica::commit): `commitVer := ver`;
   * when it reaches `updateVer` the chunk becomes COMMIT under
   * `commitChainVer`, its previous committed file is reclaimed, and a pending
   * REMOVE deletes the chunk. A commit at or below the current commitVer is a
   * successful no-op (`stale: true`).
   *
   * Errors: CHUNK_NOT_FOUND (unless `isRemove`), CHUNK_VERSION_FENCED
   * (`commitChainVer` below the chunk's), CHUNK_MISSING_UPDATE (`commitVer`
   * above `updateVer`), CHUNK_NOT_CLEAN (DIRTY and not `force`), IO_ERROR.
   */
  async commit(chunkId: Buffer, commitVer: number, commitChainVer: number, opts: CommitOptions = {}): Promise<CommitResult> {
    const id = chunkIdOf(chunkId)
    checkUint('commitVer', commitVer)
    checkUint('commitChainVer', commitChainVer)
    return this.gate.run(() => this.opLocks.run(id.toString('hex'), () => this.commitLocked(id, commitVer, commitChainVer, opts)))
  }

  private async commitLocked(id: Buffer, ver: number, chainVer: number, opts: CommitOptions): Promise<CommitResult> {
    const cur = this.load(id)
    if (!cur) {
      if (opts.isRemove) {
        return { lengthInfo: 0, commitVer: ver, updateVer: ver, checksum: 0, commitChainVer: chainVer, size: 0, state: null, stale: false, removed: true }
      }
      throw new StrataError('CHUNK_NOT_FOUND', `chunk ${id.toString('hex')} not found`)
    }
    if (chainVer < cur.chainVer) {
      throw chunkError('CHUNK_VERSION_FENCED', id, cur, `commit under chain version ${chainVer} < ${cur.chainVer}`)
    }
    if (ver > cur.updateVer) {
      throw chunkError('CHUNK_MISSING_UPDATE', id, cur, `commit of version ${ver} beyond updateVer ${cur.updateVer}`)
    }
    let next: ChunkRecord
    if (opts.force) {
      // A torn update is dropped: the last whole content (still `file`) is what gets committed.
      next = { ...cur, state: 'CLEAN', commitVer: ver, dirtyFile: null }
    } else if (cur.state === 'DIRTY') {
      throw chunkError('CHUNK_NOT_CLEAN', id, cur, 'cannot commit a torn update')
    } else if (cur.commitVer < ver) {
      next = { ...cur, commitVer: ver }
    } else {
      return { ...updateResult(cur, cur.size), stale: true, removed: false }
    }
    if (next.commitVer === next.updateVer) {
      next.state = 'COMMIT'
      next.chainVer = chainVer
      next.committed = { file: next.file, size: next.size, checksum: next.checksum }
    }
    if (opts.clientId !== undefined) next.lastClientId = opts.clientId
    if (opts.requestId !== undefined) next.lastRequestId = opts.requestId
    next.timestamp = Date.now()

    if (next.recycleState !== 'NORMAL' && next.state === 'COMMIT') {
      // Metadata goes first: a crash then leaves unreferenced files, never a record without its data.
      await this.deleteRecord(id, cur)
      await this.flushMeta()
      await this.reclaim(id, [cur.file, cur.committed.file, cur.dirtyFile], null)
      return {
        lengthInfo: 0,
        commitVer: next.commitVer,
        updateVer: next.updateVer,
        checksum: 0,
        commitChainVer: next.chainVer,
        size: 0,
        state: null,
        stale: false,
        removed: true,
      }
    }
    await this.persist(id, cur, next)
    await this.flushMeta()
    await this.reclaim(id, [cur.committed.file, cur.dirtyFile], next)
    return { ...updateResult(next, next.size), stale: false, removed: false }
  }

  /**
   * Drops the pending update `updateVer` (applied here, committed nowhere)
   * and goes back to the last committed content, as if it had never been
   * applied. For an update the rest of the chain refused without applying it
   * (a successor's full disk): left pending, it would block every later write
   * of the chunk with CHUNK_ADVANCE_UPDATE. Anything but exactly that pending
   * update (a newer one, a torn or syncing write) is left alone: false.
   */
  async abortUpdate(chunkId: Buffer, updateVer: number): Promise<boolean> {
    const id = chunkIdOf(chunkId)
    checkUint('updateVer', updateVer)
    return this.gate.run(() =>
      this.opLocks.run(id.toString('hex'), async () => {
        const cur = this.load(id)
        if (!cur || cur.state !== 'CLEAN' || cur.updateVer !== updateVer || cur.commitVer !== updateVer - 1) return false
        if (cur.commitVer === 0) {
          // the update created the chunk: it goes away again
          await this.deleteRecord(id, cur)
          await this.reclaim(id, [cur.file], null)
          return true
        }
        const back: ChunkRecord = {
          ...cur,
          state: 'COMMIT',
          recycleState: 'NORMAL',
          updateVer: cur.commitVer,
          ...cur.committed,
          dirtyFile: null,
          // the aborted request is not what the chunk holds; nor, now, is anyone's in particular
          lastClientId: '',
          lastRequestId: 0,
          timestamp: Date.now(),
        }
        await this.persist(id, cur, back)
        await this.reclaim(id, [cur.file], back)
        return true
      }),
    )
  }

  /**
   * Force-commits every chunk with a pending or torn update (3FS
   * resetUncommitted): a LASTSRV target returning as SERVING is the only copy,
   * so its newest whole content becomes the committed one. Chunks pending a
   * REMOVE are removed. Returns how many chunks were reset.
   */
  async resetUncommitted(chainVer?: number): Promise<number> {
    this.gate.checkOpen()
    const ids: Buffer[] = []
    for (const { key, value } of this.chunks.getRange({})) {
      if (value.state !== 'COMMIT' || value.commitVer !== value.updateVer) ids.push(Buffer.from(key))
    }
    let n = 0
    for (const id of ids) {
      const done = await this.gate.run(() =>
        this.opLocks.run(id.toString('hex'), async () => {
          const cur = this.load(id)
          if (!cur || (cur.state === 'COMMIT' && cur.commitVer === cur.updateVer)) return false
          await this.commitLocked(id, cur.updateVer, Math.max(chainVer ?? cur.chainVer, cur.chainVer), { force: true })
          return true
        }),
      )
      if (done) n++
    }
    return n
  }

  // ------------------------------------------------------------------ reads

  /**
   * Reads [offset, offset+length) of a chunk (3FS aioPrepareRead/aioFinishRead).
   * A chunk shorter than the range gives a short read. Errors: CHUNK_NOT_FOUND;
   * CHUNK_NOT_COMMIT while an update is pending (unless `allowUncommitted`) or
   * when the chunk changed version during the read; CHECKSUM_MISMATCH with
   * `verifyChecksum`; IO_ERROR.
   */
  async read(chunkId: Buffer, offset: number, length: number, opts: ReadOptions = {}): Promise<ChunkReadResult> {
    const id = chunkIdOf(chunkId)
    checkUint('offset', offset)
    checkUint('length', length)
    return this.gate.run(async () => {
      for (let attempt = 1; ; attempt++) {
        const rec = this.load(id)
        if (!rec) throw new StrataError('CHUNK_NOT_FOUND', `chunk ${id.toString('hex')} not found`)
        if (rec.commitVer !== rec.updateVer && !opts.allowUncommitted) {
          throw chunkError('CHUNK_NOT_COMMIT', id, rec, `commitVer ${rec.commitVer} != updateVer ${rec.updateVer}`)
        }
        const ref = readableContent(rec)
        const start = Math.min(offset, ref.size)
        const end = Math.min(offset + length, ref.size)
        let data: Buffer
        let leased: LeasedRange | undefined
        try {
          if (opts.leaseFrom !== undefined && !opts.verifyChecksum && start === 0 && end === ref.size && ref.size >= opts.leaseFrom && ref.size > 0) {
            const l = await this.files.lease(this.files.pathOf(id, ref.file!))
            leased = { fd: l.fd, offset: 0, length: ref.size, release: l.release }
            data = EMPTY
          } else if (opts.verifyChecksum && ref.size > 0) {
            const whole = await this.files.read(this.files.pathOf(id, ref.file!), 0, ref.size, opts.alloc)
            if (crc32cOf(whole) !== ref.checksum) {
              throw chunkError('CHECKSUM_MISMATCH', id, rec, 'stored data does not match the chunk checksum')
            }
            data = whole.subarray(start, end)
          } else {
            data = end > start ? await this.files.read(this.files.pathOf(id, ref.file!), start, end - start, opts.alloc) : EMPTY
          }
        } catch (e) {
          // A file can vanish or shrink only after a newer update replaced it: that is a version change.
          const now = this.load(id)
          if (!now) throw new StrataError('CHUNK_NOT_FOUND', `chunk ${id.toString('hex')} removed during read`)
          if (now.updateVer !== rec.updateVer) throw chunkError('CHUNK_NOT_COMMIT', id, now, 'chunk changed during read')
          if (attempt < READ_ATTEMPTS && sameContent(readableContent(now), ref) === false) continue
          throw toStrataError(e, 'IO_ERROR')
        }
        const after = this.load(id)
        if (!after || after.updateVer !== rec.updateVer) leased?.release()
        if (!after) throw new StrataError('CHUNK_NOT_FOUND', `chunk ${id.toString('hex')} removed during read`)
        if (after.updateVer !== rec.updateVer) throw chunkError('CHUNK_NOT_COMMIT', id, after, 'chunk changed during read')
        // From here the lease keeps the range as it is: no update writes into a leased file in place.
        return {
          data,
          ...(leased ? { file: leased } : {}),
          commitVer: rec.commitVer,
          updateVer: rec.updateVer,
          commitChainVer: rec.chainVer,
          // A read of the whole content is described by the stored chunk
          // checksum, so the client's verification then checks the bytes
          // against what was recorded at write time, and a 1 MiB read skips
          // a CRC pass here (~0.2 ms of this node's single thread).
          checksum: start === 0 && end === ref.size ? ref.checksum >>> 0 : crc32cOf(data),
          chunkLength: ref.size,
          chunkChecksum: ref.checksum,
        }
      }
    })
  }

  /**
   * The whole chunk with its metadata, for full-chunk-replace forwarding to a
   * SYNCING successor (`includePending`, the default: the newest content, as
   * 3FS reads with readUncommitted) or for inspection of the committed
   * version. Callers forwarding must hold the chunk lock and must not forward a
   * DIRTY chunk: its newest whole content predates its updateVer.
   */
  async readWholeChunk(chunkId: Buffer, opts: { includePending?: boolean } = {}): Promise<WholeChunk> {
    const id = chunkIdOf(chunkId)
    const includePending = opts.includePending ?? true
    return this.gate.run(async () => {
      for (let attempt = 1; ; attempt++) {
        const rec = this.load(id)
        if (!rec) throw new StrataError('CHUNK_NOT_FOUND', `chunk ${id.toString('hex')} not found`)
        const ref: ContentRef = includePending ? { file: rec.file, size: rec.size, checksum: rec.checksum } : rec.committed
        let data: Buffer
        try {
          data = ref.size > 0 ? await this.files.read(this.files.pathOf(id, ref.file!), 0, ref.size) : EMPTY
        } catch (e) {
          if (attempt < READ_ATTEMPTS && !sameRecord(this.load(id), rec)) continue
          throw toStrataError(e, 'IO_ERROR')
        }
        if (!sameRecord(this.load(id), rec)) {
          if (attempt < READ_ATTEMPTS) continue
          throw chunkError('CHUNK_NOT_COMMIT', id, rec, 'chunk kept changing during a whole-chunk read')
        }
        return {
          data,
          meta: recordToMeta(id, rec),
          checksum: ref.checksum,
          committed: !includePending || rec.commitVer === rec.updateVer,
        }
      }
    })
  }

  // ------------------------------------------------------------------ metadata queries

  getMeta(chunkId: Buffer): ChunkMeta | null {
    this.gate.checkOpen()
    const id = chunkIdOf(chunkId)
    const rec = this.load(id)
    return rec ? recordToMeta(id, rec) : null
  }

  /** Every chunk's metadata in chunk-id order (3FS getAllChunkMetadata / syncStart). */
  getAllMetadata(): ChunkMeta[] {
    this.gate.checkOpen()
    const out: ChunkMeta[] = []
    for (const { key, value } of this.chunks.getRange({})) out.push(recordToMeta(Buffer.from(key), value))
    return out
  }

  /**
   * 3FS queryLastChunk over [begin, end): walks chunk ids downward from `end`,
   * skipping chunks being removed, processing at most `maxNum` (0 = no limit).
   * `moreChunksInRange` says another chunk exists beyond the limit.
   */
  queryLastChunk(begin: Buffer | null, end: Buffer | null, maxNum = 0): LastChunkInfo {
    this.gate.checkOpen()
    const limit = maxNum > 0 ? maxNum : Infinity
    const res: LastChunkInfo = { lastChunkId: null, lastChunkLen: 0, totalChunkLen: 0, totalNumChunks: 0, moreChunksInRange: false }
    for (const [id, rec] of this.descending(begin, end)) {
      if (rec.recycleState !== 'NORMAL') continue
      if (res.totalNumChunks >= limit) {
        res.moreChunksInRange = true
        break
      }
      if (!res.lastChunkId) {
        res.lastChunkId = id
        res.lastChunkLen = rec.size
      }
      res.totalChunkLen += rec.size
      res.totalNumChunks++
    }
    return res
  }

  /**
   * Metadata of chunks in [begin, end) from the highest id down, at most
   * `maxNum` (0 = all), including chunks being removed (3FS queryChunks; the
   * service's removeChunks walks this).
   */
  queryChunks(begin: Buffer | null, end: Buffer | null, maxNum = 0): ChunkMeta[] {
    this.gate.checkOpen()
    const limit = maxNum > 0 ? maxNum : Infinity
    const out: ChunkMeta[] = []
    for (const [id, rec] of this.descending(begin, end)) {
      if (out.length >= limit) break
      out.push(recordToMeta(id, rec))
    }
    return out
  }

  /** Chunk ids in [begin, end) in ascending order, at most `limit` (0 = all). */
  listChunkIds(begin: Buffer | null, end: Buffer | null, limit = 0): Buffer[] {
    this.gate.checkOpen()
    const out: Buffer[] = []
    const range: { start?: Buffer; end?: Buffer; limit?: number } = {}
    if (begin && begin.length > 0) range.start = begin
    if (end && end.length > 0) range.end = end
    if (limit > 0) range.limit = limit
    for (const key of this.chunks.getKeys(range)) out.push(Buffer.from(key))
    return out
  }

  private *descending(begin: Buffer | null, end: Buffer | null): Generator<[Buffer, ChunkRecord]> {
    const range: { reverse: true; start?: Buffer } = { reverse: true }
    if (end && end.length > 0) range.start = end
    for (const { key, value } of this.chunks.getRange(range)) {
      // lmdb starts a reverse walk at `start` inclusive; the range is half-open.
      if (end && end.length > 0 && Buffer.compare(key, end) >= 0) continue
      if (begin && Buffer.compare(key, begin) < 0) break
      yield [Buffer.from(key), value]
    }
  }

  // ------------------------------------------------------------------ target-level

  /** Sum of chunk lengths (newest content) on this target; kept in memory, no I/O. */
  usedBytes(): number {
    return this.used
  }

  chunkCount(): number {
    return this.count
  }

  async spaceInfo(): Promise<EngineSpaceInfo> {
    this.gate.checkOpen()
    const st = await fsp.statfs(this.dir)
    return {
      targetId: this.targetId,
      capacity: Number(st.blocks) * Number(st.bsize),
      free: Number(st.bavail) * Number(st.bsize),
      used: this.used,
      chunkCount: this.count,
    }
  }

  /** Chain this target belongs to, persisted at the first routing update that names it. */
  get chainId(): number | null {
    this.gate.checkOpen()
    const v = this.target.get(TARGET_KEY.chainId)
    return typeof v === 'number' ? v : null
  }

  async setChainId(chainId: number): Promise<void> {
    checkUint('chainId', chainId)
    await this.setTargetRecord(TARGET_KEY.chainId, chainId)
  }

  /** Whether this target was ever UPTODATE; the restart protocol tells a new replica from a returning one by it. */
  get everUptodate(): boolean {
    this.gate.checkOpen()
    return this.target.get(TARGET_KEY.everUptodate) === true
  }

  async setEverUptodate(value: boolean): Promise<void> {
    await this.setTargetRecord(TARGET_KEY.everUptodate, value)
  }

  getTargetRecord<T = unknown>(key: string): T | undefined {
    this.gate.checkOpen()
    return this.target.get(key) as T | undefined
  }

  async setTargetRecord(key: string, value: unknown): Promise<void> {
    await this.gate.run(async () => {
      try {
        if (this.durable) {
          await this.target.put(key, value)
          await this.env.flushed
        } else {
          this.target.putSync(key, value)
        }
      } catch (e) {
        throw toStrataError(e, 'IO_ERROR')
      }
    })
  }

  /** Deletes every chunk and data file (target removal). Target-level records are kept. Returns the chunk count removed. */
  async removeAll(): Promise<number> {
    return this.gate.exclusive(async () => {
      const n = this.count
      try {
        if (this.durable) {
          this.records.clear()
          await this.chunks.clearAsync()
          await this.env.flushed
        } else {
          this.records.clear()
          this.chunks.clearSync()
        }
        await this.files.removeAll()
      } catch (e) {
        throw toStrataError(e, 'IO_ERROR')
      }
      this.count = 0
      this.used = 0
      return n
    })
  }

  /**
   * Deletes data files no record refers to (left by a machine crash between a
   * file write and its metadata, or by interrupted reclamation). Safe while the
   * engine serves: each chunk is examined under its engine lock.
   */
  async collectGarbage(): Promise<number> {
    let removed = 0
    for (let i = 0; i < ChunkFiles.fanoutCount; i++) {
      const names = await this.gate.run(() => this.files.listFanout(i))
      const byChunk = new Map<string, string[]>()
      for (const name of names) {
        const dot = name.indexOf('.')
        const hex = name.slice(0, dot)
        if (dot !== CHUNK_ID_LEN * 2 || !/^[0-9a-f]+$/.test(hex)) continue
        const tags = byChunk.get(hex) ?? []
        tags.push(name.slice(dot + 1))
        byChunk.set(hex, tags)
      }
      for (const [hex, tags] of byChunk) {
        removed += await this.gate.run(() =>
          this.opLocks.run(hex, async () => {
            const id = Buffer.from(hex, 'hex')
            const rec = this.load(id)
            let n = 0
            for (const tag of tags) {
              // Under the engine lock no update is in flight, so a recorded dirtyFile is garbage too.
              if (rec && refersToContent(rec, tag)) continue
              await this.files.unlinkQuiet(this.files.pathOf(id, tag))
              n++
            }
            return n
          }),
        )
      }
    }
    return removed
  }

  // ------------------------------------------------------------------ internals

  /**
   * The record as of its last stored write. Decoded records are kept (they
   * are never modified once stored: every change builds a new object): an
   * lmdb get plus msgpack decoding cost ~12 µs here, and a read looks its
   * chunk up twice.
   */
  private load(id: Buffer): ChunkRecord | undefined {
    const key = id.toString('latin1')
    const hit = this.records.get(key)
    if (hit) return hit
    const rec = this.chunks.get(id)
    if (rec) this.remember(key, rec)
    return rec
  }

  private remember(key: string, rec: ChunkRecord): void {
    if (this.records.size >= RECORD_CACHE_ENTRIES) {
      // oldest inserted first: a plain bound, not an LRU (a hit does not refresh)
      const oldest = this.records.keys().next().value
      if (oldest !== undefined) this.records.delete(oldest)
    }
    this.records.set(key, rec)
  }

  private async persist(id: Buffer, old: ChunkRecord | undefined, next: ChunkRecord): Promise<void> {
    const key = id.toString('latin1')
    try {
      if (this.durable) await this.chunks.put(id, next)
      else this.chunks.putSync(id, next)
    } catch (e) {
      // whether it was stored is unknown: the next load asks lmdb
      this.records.delete(key)
      throw toStrataError(e, 'IO_ERROR')
    }
    this.records.delete(key)
    this.remember(key, next)
    if (!old) this.count++
    this.used += next.size - (old?.size ?? 0)
  }

  private async deleteRecord(id: Buffer, old: ChunkRecord): Promise<void> {
    const key = id.toString('latin1')
    try {
      if (this.durable) await this.chunks.remove(id)
      else this.chunks.removeSync(id)
    } catch (e) {
      this.records.delete(key)
      throw toStrataError(e, 'IO_ERROR')
    }
    this.records.delete(key)
    this.count--
    this.used -= old.size
  }

  /** A commit is the CRAQ acknowledgement point, so in durable mode it waits for lmdb's flush. */
  private async flushMeta(): Promise<void> {
    if (!this.durable) return
    try {
      await this.env.flushed
    } catch (e) {
      throw toStrataError(e, 'IO_ERROR')
    }
  }

  /** Unlinks files of `candidates` that `live` no longer refers to. Failures only leave garbage behind. */
  private async reclaim(id: Buffer, candidates: Array<string | null>, live: ChunkRecord | null): Promise<void> {
    const seen = new Set<string>()
    for (const tag of candidates) {
      if (!tag || seen.has(tag)) continue
      seen.add(tag)
      if (live && refersTo(live, tag)) continue
      await this.unlinkQuiet(id, tag)
    }
  }

  private async unlinkQuiet(id: Buffer, tag: string): Promise<void> {
    try {
      await this.files.unlinkQuiet(this.files.pathOf(id, tag))
    } catch {
      // collectGarbage picks it up later.
    }
  }

  private async checkIdentity(): Promise<void> {
    const stored = this.target.get(TARGET_KEY.targetId)
    if (stored !== undefined && stored !== this.targetId) {
      throw new StrataError('BAD_CONFIG', `${this.dir} belongs to target ${String(stored)}, not ${this.targetId}`)
    }
    const format = this.target.get(TARGET_KEY.format)
    if (format !== undefined && format !== FORMAT_VERSION) {
      throw new StrataError('BAD_CONFIG', `${this.dir} has chunk engine format ${String(format)}, expected ${FORMAT_VERSION}`)
    }
    if (stored === undefined || format === undefined) {
      if (this.durable) {
        await this.target.put(TARGET_KEY.targetId, this.targetId)
        await this.target.put(TARGET_KEY.format, FORMAT_VERSION)
        await this.env.flushed
      } else {
        this.target.putSync(TARGET_KEY.targetId, this.targetId)
        this.target.putSync(TARGET_KEY.format, FORMAT_VERSION)
      }
    }
  }

  /** Rebuilds usage counters and drops files of torn updates; DIRTY records stay DIRTY. */
  private async recover(): Promise<void> {
    const orphans: Array<[Buffer, string]> = []
    for (const { key, value } of this.chunks.getRange({})) {
      this.count++
      this.used += value.size
      if (value.state === 'DIRTY') this.recovery.dirtyChunks++
      if (value.state !== 'COMMIT' || value.commitVer !== value.updateVer) this.recovery.uncommittedChunks++
      if (value.dirtyFile && !refersToContent(value, value.dirtyFile)) orphans.push([Buffer.from(key), value.dirtyFile])
    }
    this.recovery.chunks = this.count
    for (const [id, tag] of orphans) {
      await this.unlinkQuiet(id, tag)
      this.recovery.orphanFilesRemoved++
    }
  }
}

// ---------------------------------------------------------------------- helpers

function chunkIdOf(x: unknown): Buffer {
  if (x instanceof Uint8Array && x.length === CHUNK_ID_LEN) {
    return Buffer.isBuffer(x) ? x : Buffer.from(x.buffer, x.byteOffset, x.byteLength)
  }
  throw new StrataError('INVALID_ARGUMENT', `chunk id must be ${CHUNK_ID_LEN} bytes`)
}

function checkUint(name: string, v: unknown): void {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
    throw new StrataError('INVALID_ARGUMENT', `${name} must be a non-negative integer, got ${String(v)}`)
  }
}

function normalizeUpdate(io: UpdateIO, opts: ApplyUpdateOptions): NormalizedUpdate {
  if (!opts || typeof opts !== 'object') throw new StrataError('INVALID_ARGUMENT', 'update options missing')
  const type = io.updateType
  if (!UPDATE_TYPES.includes(type)) throw new StrataError('INVALID_ARGUMENT', `unknown update type ${String(type)}`)
  checkUint('offset', io.offset)
  checkUint('length', io.length)
  checkUint('chunkSize', io.chunkSize)
  checkUint('updateVer', io.updateVer)
  checkUint('chainVer', opts.chainVer)
  const { offset, length, chunkSize } = io
  if (type === 'WRITE' && (offset >= chunkSize || offset + length > chunkSize)) {
    throw new StrataError('CHUNK_INVALID_RANGE', `write [${offset}, +${length}) outside chunk size ${chunkSize}`)
  }
  if ((type === 'TRUNCATE' || type === 'EXTEND') && offset + length > chunkSize) {
    throw new StrataError('CHUNK_INVALID_RANGE', `${type.toLowerCase()} to ${offset + length} beyond chunk size ${chunkSize}`)
  }
  if (opts.isSyncing && (type === 'TRUNCATE' || type === 'EXTEND')) {
    // A syncing successor only takes full-chunk writes; the forwarder converts truncate/extend (3FS #403).
    throw new StrataError('INVALID_ARGUMENT', `${type} cannot be a syncing update`)
  }
  let data: Buffer | null = null
  if (type === 'WRITE') {
    if (length === 0) {
      data = EMPTY
    } else {
      // Data that crossed msgpack may be a plain Uint8Array.
      const d: unknown = io.data
      if (!(d instanceof Uint8Array) || d.length < length) {
        throw new StrataError('INVALID_ARGUMENT', `write of ${length} bytes carries ${d instanceof Uint8Array ? d.length : 'no'} data`)
      }
      const b = Buffer.isBuffer(d) ? d : Buffer.from(d.buffer, d.byteOffset, d.byteLength)
      data = b.length === length ? b : b.subarray(0, length)
    }
  }
  return { type, offset, length, chunkSize, data }
}

function emptyRecord(chunkSize: number, chainVer: number): ChunkRecord {
  return {
    commitVer: 0,
    updateVer: 0,
    chainVer,
    chunkSize,
    state: 'CLEAN',
    recycleState: 'NORMAL',
    size: 0,
    checksum: 0,
    file: null,
    committed: { file: null, size: 0, checksum: 0 },
    dirtyFile: null,
    lastClientId: '',
    lastRequestId: 0,
    timestamp: 0,
  }
}

/** The new content as an edit of the newest one; null for REMOVE (content untouched until commit). */
function planEdit(req: NormalizedUpdate, baseSize: number, isSyncing: boolean): ContentEdit | null {
  switch (req.type) {
    case 'REMOVE':
      return null
    case 'TRUNCATE': {
      const len = req.offset + req.length
      return { keep: Math.min(len, baseSize), size: len, write: null }
    }
    case 'EXTEND': {
      const len = req.offset + req.length
      return { keep: baseSize, size: Math.max(baseSize, len), write: null }
    }
    case 'WRITE': {
      const data = req.data ?? EMPTY
      const end = req.offset + data.length
      if (isSyncing) {
        // Full-chunk replace: the chunk becomes exactly what the predecessor holds.
        return { keep: Math.min(req.offset, baseSize), size: end, write: data.length > 0 ? { off: req.offset, data } : null }
      }
      return { keep: baseSize, size: Math.max(baseSize, end), write: data.length > 0 ? { off: req.offset, data } : null }
    }
  }
}

/**
 * How to produce the edited content without touching bytes a live version
 * needs: a fresh file when nothing of the base survives; the base file itself
 * when the edit only adds bytes past its end and no live version (the
 * committed one may share the file) extends beyond that end; otherwise a new
 * file holding the kept bytes rewritten with the edit.
 */
function chooseMode(edit: ContentEdit, base: ContentRef, committed: ContentRef): MaterializeMode | 'rewrite' {
  if (edit.keep === 0 || !base.file) return 'fresh'
  const appendsOnly = edit.keep === base.size && (!edit.write || edit.write.off >= base.size)
  const sharedBeyond = committed.file === base.file && committed.size > base.size
  return appendsOnly && !sharedBeyond ? 'inplace' : 'rewrite'
}

/** File names start as the update version that wrote them; a suffix avoids clobbering a live file (sync can lower versions). */
function pickTag(updateVer: number, cur: ChunkRecord): string {
  let tag = String(updateVer)
  for (let n = 1; tag === cur.file || tag === cur.committed.file; n++) tag = `${updateVer}-${n}`
  return tag
}

function refersToContent(rec: ChunkRecord, tag: string): boolean {
  return rec.file === tag || rec.committed.file === tag
}

function refersTo(rec: ChunkRecord, tag: string): boolean {
  return refersToContent(rec, tag) || rec.dirtyFile === tag
}

/** Content a reader may see: a DIRTY chunk serves its committed content, otherwise the newest. */
function readableContent(rec: ChunkRecord): ContentRef {
  return rec.state === 'DIRTY' ? rec.committed : { file: rec.file, size: rec.size, checksum: rec.checksum }
}

function sameContent(a: ContentRef, b: ContentRef): boolean {
  return a.file === b.file && a.size === b.size && a.checksum === b.checksum
}

function sameRecord(a: ChunkRecord | undefined, b: ChunkRecord): boolean {
  return (
    !!a &&
    a.updateVer === b.updateVer &&
    a.commitVer === b.commitVer &&
    a.state === b.state &&
    sameContent({ file: a.file, size: a.size, checksum: a.checksum }, { file: b.file, size: b.size, checksum: b.checksum }) &&
    sameContent(a.committed, b.committed)
  )
}

/**
 * CRC32C of the edited content. The whole base is covered by its stored
 * checksum and the payload by its own, so `baseCrc` (hashing base bytes
 * [off, off+len) continuing from `init`) runs only over kept bytes around a
 * write that does not start at the end of the base.
 */
async function contentChecksum(
  base: ContentRef,
  edit: ContentEdit,
  dataCrc: number,
  baseCrc: (off: number, len: number, init: number) => number | Promise<number>,
): Promise<number> {
  const w = edit.write
  if (w && w.off === 0 && w.data.length === edit.size) return dataCrc
  const headEnd = w ? Math.min(edit.keep, w.off) : edit.keep
  let crc: number
  if (headEnd === base.size) crc = base.checksum
  else if (headEnd === 0) crc = 0
  else crc = await baseCrc(0, headEnd, 0)
  let pos = headEnd
  if (w) {
    crc = crc32cZeros(w.off - pos, crc)
    crc = crc32cCombine(crc, dataCrc, w.data.length)
    pos = w.off + w.data.length
    if (edit.keep > pos) {
      crc = await baseCrc(pos, edit.keep - pos, crc)
      pos = edit.keep
    }
  }
  return crc32cZeros(edit.size - pos, crc)
}

function updateResult(rec: ChunkRecord, lengthInfo: number): UpdateResult {
  return {
    lengthInfo,
    commitVer: rec.commitVer,
    updateVer: rec.updateVer,
    checksum: rec.checksum,
    commitChainVer: rec.chainVer,
    size: rec.size,
    state: rec.state,
  }
}

function chunkError(code: ErrorCode, id: Buffer, rec: ChunkRecord, msg: string): StrataError {
  return new StrataError(code, `chunk ${id.toString('hex')}: ${msg}`, {
    detail: {
      commitVer: rec.commitVer,
      updateVer: rec.updateVer,
      chainVer: rec.chainVer,
      checksum: rec.checksum,
      size: rec.size,
      state: rec.state,
    },
  })
}
