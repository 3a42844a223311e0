// The file API for programs: POSIX-shaped calls over the meta service (names,
// attributes, sessions, lengths) and the storage service (bytes), with 3FS's
// FUSE-client semantics:
//  - data never goes through meta: offsets are mapped to chunks and chains
//    here, from the inode's layout and the chain table in routing info;
//  - contiguous writes are coalesced in a per-inode 1 MiB buffer, flushed
//    when full, on a non-contiguous write, read, fsync, close and periodic
//    sync;
//  - every flush records a length hint {offset+len, truncateVer}; periodic
//    sync sends hints, fsync asks meta for the exact length (storage query),
//    close sends what is left and ends the write session;
//  - write-mode opens carry a session id (meta keeps the file's chunks while
//    a session exists); read-only opens have none;
//  - O_TRUNC and truncate/extend are client-driven: remove chunks past the
//    end on every chain of the stripe, cut the last chunk, then meta
//    sync(truncated) bumps the truncate version.

import { randomUUID } from 'node:crypto'
import { StrataError, toStrataError } from '../../common/errors.js'
import { isRetryableCode } from '../retry-policy.js'
import type { Layout } from '../../common/layout.js'
import type { MgmtdClient } from '../../mgmtd/client.js'
import { MgmtdClient as MgmtdClientImpl } from '../../mgmtd/client.js'
import { RpcClient } from '../../rpc/index.js'
import type {
  DirEntry,
  Inode,
  InodeType,
  ListRsp,
  LockAction,
  OpenFlags,
  PathAt,
  StatFsRsp,
  UserInfo,
  VersionedLength,
} from '../../meta/protocol.js'
import { StorageClient } from '../storage-client.js'
import type { RetryPolicy } from '../retry-policy.js'
import type { ReadMode } from '../target-selection.js'
import { FileIo, fileLayout } from './file-io.js'
import { checkFileSize, maxFileSize } from './pieces.js'
import { inodeAt, isReadAccess, isWriteAccess, normalizePath, parseOpenFlags, pathAt, type OpenFlagsInput } from './flags.js'
import { InodeState, type SyncKind } from './inode-state.js'
import { MetaClient, mayHaveBeenApplied, type MetaRetryPolicy } from './meta-client.js'
import { DEFAULT_WRITE_BUFFER_SIZE, bufferedWrite } from './write-buffer.js'

/** full write buffers of one file in flight to storage at once (write-behind) */
export const DEFAULT_WRITE_BEHIND = 4

export const DEFAULT_PERIODIC_SYNC_MS = 5000
export const DEFAULT_PERIODIC_SYNC_LIMIT = 1000

export interface FileSystemOptions {
  /** mgmtd to use (not closed by close()); else one is made from mgmtdAddresses */
  mgmtd?: MgmtdClient
  mgmtdAddresses?: string[]
  rpc?: RpcClient
  /** storage client to use (not closed by close()) */
  storage?: StorageClient
  /** meta client to use (not closed by close()) */
  meta?: MetaClient
  /** fixed meta server addresses (default: META nodes from routing info) */
  metaAddresses?: string[]
  /** meta servers to try when routing info lists none */
  metaFallbackAddresses?: string[]
  /** identity of every request (default: the process's uid/gid/groups) */
  user?: Partial<UserInfo>
  clientId?: string
  /** periodic sync of length hints (and write buffers); 0 turns it off. Default 5000 ms. */
  periodicSyncMs?: number
  /** inodes synced per periodic round (3FS periodic_sync.limit) */
  periodicSyncLimit?: number
  /** per-inode write buffer; 0 writes through. Default 1 MiB. */
  writeBufferSize?: number
  /**
   * Write-behind: full write buffers of one file flushed to storage while the
   * writer goes on, at most this many at once (0: a full buffer is flushed
   * before write returns). Their failures are reported by the file's next
   * write, fsync or close. Default 4.
   */
  writeBehind?: number
  /** stat of a file with local unsynced writes flushes and syncs first (3FS sync_on_stat, default true) */
  syncOnStat?: boolean
  storageRetry?: Partial<RetryPolicy>
  metaRetry?: Partial<MetaRetryPolicy>
  readMode?: ReadMode
  /** how often the client tells mgmtd it is alive (default 1000 ms) */
  sessionExtendIntervalMs?: number
  /** routing info poll period of an mgmtd client made here (default 1000 ms) */
  routingRefreshMs?: number
}

export interface CreateOptions {
  /** permission bits (default 0o644 for files, 0o755 for directories) */
  mode?: number
  /** explicit layout; an Empty-chains layout lets meta allocate chains from its table */
  layout?: Layout
}

export type ReadTarget = number | Uint8Array

export interface ReadResult {
  bytesRead: number
  /** the bytes read (allocated target) or the caller's buffer (as a Buffer view) */
  buffer: Buffer
}

export type TimeInput = Date | number | 'now'

export interface ReaddirOptions {
  /** exclusive cursor: the last name of the previous page */
  prev?: string
  /** page size (0: server default) */
  limit?: number
  /** also return inodes */
  status?: boolean
}

export interface FileSystemStats {
  flushes: number
  flushErrors: number
  bytesWritten: number
  bytesRead: number
  syncs: number
  syncErrors: number
  periodicRounds: number
  truncates: number
}

/** An open file. Methods delegate to the FileSystem it came from. */
export class FileHandle {
  /** file position used when a read/write passes no position */
  position = 0
  private closedFlag = false

  constructor(
    readonly fs: FileSystem,
    readonly fd: number,
    readonly path: string,
    readonly flags: OpenFlags,
    /** @internal shared per inode within the FileSystem */
    readonly state: InodeState,
    /** write session id (write-mode opens only) */
    readonly session: string | undefined,
  ) {}

  get inodeId(): bigint {
    return this.state.id
  }
  /** the inode as last returned by meta (length may lag local writes) */
  get inode(): Inode {
    return this.state.inode
  }
  get layout(): Layout {
    return fileLayout(this.state.inode)
  }
  get readable(): boolean {
    return isReadAccess(this.flags)
  }
  get writable(): boolean {
    return isWriteAccess(this.flags)
  }
  get closed(): boolean {
    return this.closedFlag
  }
  /** @internal */
  markClosed(): void {
    this.closedFlag = true
  }

  read(target: ReadTarget, position?: number | null): Promise<ReadResult> {
    return this.fs.read(this, target, position)
  }
  write(data: Uint8Array | string, position?: number | null): Promise<number> {
    return this.fs.write(this, data, position)
  }
  fsync(): Promise<Inode> {
    return this.fs.fsync(this)
  }
  stat(): Promise<Inode> {
    return this.fs.fstat(this)
  }
  truncate(length: number): Promise<Inode> {
    return this.fs.ftruncate(this, length)
  }
  close(): Promise<void> {
    return this.fs.close(this)
  }
}

/** a write open given up on, withdrawn later (abandonOpen) */
interface PendingAbandon {
  kind: 'abandon'
  request: string
  uuid: string
  attempts: number
}

type Pending = PendingClose | PendingAbandon

/** the first try of an abandon is bounded by this, so a failed open does not wait a second whole budget */
const ABANDON_FIRST_TRY_MS = 10_000

interface PendingClose {
  kind: 'close'
  inode: bigint
  session: string
  uuid: string
  updateLength: boolean
  mtime?: number
  lengthHint?: VersionedLength
  attempts: number
}

export class FileSystem {
  readonly mgmtd: MgmtdClient
  readonly storage: StorageClient
  readonly meta: MetaClient
  readonly io: FileIo
  readonly writeBufferSize: number
  readonly writeBehind: number
  readonly periodicSyncMs: number
  readonly periodicSyncLimit: number
  readonly syncOnStat: boolean
  readonly counters: FileSystemStats = { flushes: 0, flushErrors: 0, bytesWritten: 0, bytesRead: 0, syncs: 0, syncErrors: 0, periodicRounds: 0, truncates: 0 }
  private readonly owned: Array<{ close(): void }> = []
  private readonly handles = new Map<number, FileHandle>()
  private readonly inodes = new Map<bigint, InodeState>()
  /** the newest length seen of files with no open handle left (InodeState.raiseLength), most recent last */
  private readonly lengthsSeen = new Map<bigint, VersionedLength>()
  private readonly dirtySet = new Set<bigint>()
  private readonly pendingCloses: Pending[] = []
  private nextFd = 3
  private syncTimer: NodeJS.Timeout | null = null
  private closerTimer: NodeJS.Timeout | null = null
  private syncRound: Promise<void> | null = null
  private closed = false

  constructor(opts: FileSystemOptions) {
    let rpc = opts.rpc
    if (opts.mgmtd) this.mgmtd = opts.mgmtd
    else {
      if (!opts.mgmtdAddresses?.length) throw new StrataError('INVALID_ARGUMENT', 'FileSystem needs a MgmtdClient or mgmtd addresses')
      if (!rpc) {
        rpc = new RpcClient()
        this.owned.push(rpc)
      }
      const m = new MgmtdClientImpl({ addresses: opts.mgmtdAddresses, rpc })
      m.watch(opts.routingRefreshMs ?? 1000)
      this.mgmtd = m
      this.owned.unshift(m)
    }
    const clientId = opts.clientId ?? opts.meta?.clientId ?? randomUUID()
    if (opts.storage) this.storage = opts.storage
    else {
      this.storage = new StorageClient({
        mgmtd: this.mgmtd,
        rpc: rpc ?? this.mgmtd.rpc,
        clientId,
        ...(opts.storageRetry ? { retry: opts.storageRetry } : {}),
        ...(opts.readMode ? { readMode: opts.readMode } : {}),
      })
      this.owned.unshift(this.storage)
    }
    if (opts.meta) this.meta = opts.meta
    else {
      this.meta = new MetaClient({
        mgmtd: this.mgmtd,
        rpc: rpc ?? this.mgmtd.rpc,
        clientId,
        ...(opts.metaAddresses?.length ? { addresses: opts.metaAddresses } : {}),
        ...(opts.metaFallbackAddresses?.length ? { fallbackAddresses: opts.metaFallbackAddresses } : {}),
        ...(opts.user ? { user: opts.user } : {}),
        ...(opts.metaRetry ? { retry: opts.metaRetry } : {}),
        ...(opts.sessionExtendIntervalMs !== undefined ? { sessionExtendIntervalMs: opts.sessionExtendIntervalMs } : {}),
      })
      this.owned.unshift(this.meta)
    }
    this.io = new FileIo(this.storage)
    this.writeBufferSize = opts.writeBufferSize ?? DEFAULT_WRITE_BUFFER_SIZE
    this.writeBehind = opts.writeBehind ?? DEFAULT_WRITE_BEHIND
    if (!Number.isSafeInteger(this.writeBehind) || this.writeBehind < 0) throw new StrataError('INVALID_ARGUMENT', `writeBehind must be a non-negative integer, got ${String(opts.writeBehind)}`)
    this.periodicSyncMs = opts.periodicSyncMs ?? DEFAULT_PERIODIC_SYNC_MS
    this.periodicSyncLimit = opts.periodicSyncLimit ?? DEFAULT_PERIODIC_SYNC_LIMIT
    this.syncOnStat = opts.syncOnStat ?? true
    if (this.periodicSyncMs > 0) this.schedulePeriodicSync()
  }

  get user(): UserInfo {
    return this.meta.user
  }

  get clientId(): string {
    return this.meta.clientId
  }

  /** Open handles (for tests and diagnostics). */
  openHandles(): FileHandle[] {
    return [...this.handles.values()]
  }

  /** Inodes with buffered data or unsynced writes. */
  dirtyInodes(): bigint[] {
    return [...this.dirtySet]
  }

  // --- open / create / close

  /**
   * Opens a file. Flags as Node ('r', 'r+', 'w', 'wx', 'a', …), O_* numbers
   * or OpenFlags. `mode` is the permission of a file created here.
   */
  async open(path: string, flags: OpenFlagsInput = 'r', mode = 0o644, opts: { layout?: Layout } = {}): Promise<FileHandle> {
    this.checkOpen()
    const f = parseOpenFlags(flags)
    const p = normalizePath(path)
    const session = isWriteAccess(f) ? randomUUID() : undefined
    const sess = session ? { session: { session } } : {}
    const uuid = randomUUID()
    let rsp
    try {
      rsp = f.create
        ? await this.meta.create({ path: pathAt(p), ...sess, flags: f, perm: mode & 0o7777, ...(opts.layout ? { layout: opts.layout } : {}) }, { uuid })
        : await this.meta.open({ path: pathAt(p), ...sess, flags: f }, { uuid })
    } catch (e) {
      // a write open meta may have applied, or may apply later, would leave a session nobody closes
      if (session && mayHaveBeenApplied(e)) throw await this.abandonOpen(uuid, toStrataError(e))
      throw e
    }
    const inode = rsp.stat
    if (inode.type !== 'File' || !inode.file) {
      if (session) await this.meta.closeFile({ inode: inode.id, session: { session }, updateLength: false }).catch(() => undefined)
      throw new StrataError(inode.type === 'Directory' ? 'META_IS_DIRECTORY' : 'META_INVALID_ARGUMENT', `${p} is not a regular file (${inode.type})`)
    }
    const state = this.acquireState(inode)
    const fh = new FileHandle(this, this.nextFd++, p, f, state, session)
    this.handles.set(fh.fd, fh)
    if (rsp.needTruncate) {
      try {
        if (!f.trunc) throw new StrataError('INTERNAL', `meta asked to truncate ${p} but O_TRUNC was not given`)
        await state.lock.run(async () => {
          await this.flushLocked(state)
          await this.truncateLocked(state, 0)
        })
      } catch (e) {
        await this.close(fh).catch(() => undefined)
        throw e
      }
    }
    return fh
  }

  /** Creates (or with excl: exclusively creates) a file and opens it for writing. */
  create(path: string, opts: CreateOptions & { excl?: boolean; trunc?: boolean } = {}): Promise<FileHandle> {
    const flags: OpenFlags = { access: 'rw', create: true, ...(opts.excl ? { excl: true } : {}), ...(opts.trunc ? { trunc: true } : {}) }
    return this.open(path, flags, opts.mode ?? 0o644, opts.layout ? { layout: opts.layout } : {})
  }

  /**
   * Closes a handle: flushes its inode's write buffer and, for write-mode
   * handles, sends meta `close` (ends the session; length updated when
   * there were writes since the last exact sync). A flush error is reported
   * but the session is closed anyway. Without a handle: shutdown().
   *
   * With `discard` (a file the caller gives up on, such as a copy that failed
   * and whose temporary name was removed): buffered bytes are dropped without
   * a flush, flushes in flight are not waited for, and the session ends
   * without a length update, so closing does not wait on storage.
   */
  async close(fh?: FileHandle, opts: { discard?: boolean } = {}): Promise<void> {
    // close() without a handle shuts the whole FileSystem down
    if (fh === undefined) return this.shutdown()
    if (fh.closed) return
    fh.markClosed()
    this.handles.delete(fh.fd)
    const state = fh.state
    let err: StrataError | undefined
    if (opts.discard) {
      // other handles of the inode keep what they buffered
      if (state.refs <= 1) state.wb.clear()
    } else {
      try {
        if (fh.writable || !state.wb.empty) await state.lock.run(() => this.flushLocked(state))
      } catch (e) {
        err = toStrataError(e)
      }
    }
    if (fh.writable && fh.session) {
      const writever = state.written
      const updateLength = !opts.discard && writever > state.fsynced
      const req: PendingClose = {
        kind: 'close',
        inode: state.id,
        session: fh.session,
        uuid: randomUUID(),
        updateLength,
        ...(state.mtime !== undefined ? { mtime: state.mtime } : {}),
        ...(updateLength && state.hint ? { lengthHint: state.hint } : {}),
        attempts: 0,
      }
      try {
        const rsp = await this.sendClose(req)
        state.update(rsp, updateLength ? writever : 0, updateLength)
      } catch (e) {
        const se = toStrataError(e)
        state.clearHint()
        if (isRetryableCode(se.code) && !this.closed) this.queueClose(req)
        err ??= se
      }
    }
    this.releaseState(state)
    if (err) throw err
  }

  private async sendClose(req: PendingClose): Promise<Inode> {
    req.attempts++
    const rsp = await this.meta.closeFile(
      {
        inode: req.inode,
        session: { session: req.session },
        updateLength: req.updateLength,
        ...(req.mtime !== undefined ? { mtime: req.mtime } : {}),
        ...(req.lengthHint ? { lengthHint: req.lengthHint } : {}),
      },
      { uuid: req.uuid },
    )
    return rsp.stat
  }

  /**
   * A write open (request `request`) failed without an answer: meta may have
   * applied it, or may still apply it (queued on a slow or stopped server).
   * Withdraws it, so that no write session is left open by it — or queues the
   * withdrawal when meta cannot be reached now — and returns the open's error
   * saying what became of the request.
   */
  private async abandonOpen(request: string, err: StrataError): Promise<StrataError> {
    const req: PendingAbandon = { kind: 'abandon', request, uuid: randomUUID(), attempts: 0 }
    try {
      const r = await this.sendAbandon(req, Math.min(this.meta.policy.totalMs, ABANDON_FIRST_TRY_MS))
      const what = r.applied ? `abandoned: it had been applied, and the write session it opened is now closed` : `abandoned: it was not applied and never will be`
      return new StrataError(err.code, `${err.reason}; ${what}`, { cause: err, ...(err.detail ? { detail: err.detail } : {}) })
    } catch (e) {
      if (!this.closed) this.queueClose(req)
      return err
    }
  }

  private async sendAbandon(req: PendingAbandon, totalMs?: number) {
    req.attempts++
    return this.meta.abandon({ request: req.request }, { uuid: req.uuid, ...(totalMs !== undefined ? { totalMs } : {}) })
  }

  private sendPending(r: Pending): Promise<unknown> {
    return r.kind === 'close' ? this.sendClose(r) : this.sendAbandon(r)
  }

  /** 3FS background closer: a close (or abandon) that kept failing is replayed (same request id) until it lands. */
  private queueClose(req: Pending): void {
    this.pendingCloses.push(req)
    if (this.closerTimer) return
    const tick = async () => {
      this.closerTimer = null
      const batch = this.pendingCloses.splice(0)
      for (const r of batch) {
        try {
          await this.sendPending(r)
        } catch (e) {
          if (isRetryableCode(toStrataError(e).code) && r.attempts < 100 && !this.closed) this.pendingCloses.push(r)
        }
      }
      if (this.pendingCloses.length && !this.closed) {
        this.closerTimer = setTimeout(tick, 1000)
        this.closerTimer.unref()
      }
    }
    this.closerTimer = setTimeout(tick, 1000)
    this.closerTimer.unref()
  }

  private acquireState(inode: Inode): InodeState {
    let s = this.inodes.get(inode.id)
    if (!s) {
      s = new InodeState(inode, this.writeBufferSize)
      // the open's reply may predate the close that released the last state of this file
      const seen = this.lengthsSeen.get(inode.id)
      if (seen) {
        s.raiseLength(seen)
        this.lengthsSeen.delete(inode.id)
      }
      this.inodes.set(inode.id, s)
    } else {
      s.update(inode)
    }
    s.refs++
    return s
  }

  private releaseState(s: InodeState): void {
    s.refs--
    if (s.refs <= 0 && this.inodes.get(s.id) === s) {
      this.inodes.delete(s.id)
      this.dirtySet.delete(s.id)
      s.wb.release()
      const seen = s.lengthSeen
      if (seen) {
        this.lengthsSeen.set(s.id, seen)
        // the oldest first (a Map keeps insertion order): a floor only matters while an open reply may be in flight
        if (this.lengthsSeen.size > LENGTHS_SEEN_MAX) this.lengthsSeen.delete(this.lengthsSeen.keys().next().value!)
      }
    }
  }

  // --- data

  /**
   * Reads into `target` (a buffer, or a byte count to allocate) at
   * `position` (default: the handle's position, which then advances).
   * Holes read as zeros; at or past the end of the file the read is short.
   */
  async read(fh: FileHandle, target: ReadTarget, position?: number | null): Promise<ReadResult> {
    this.checkHandle(fh)
    if (!fh.readable) throw new StrataError('META_BAD_FILE', `${fh.path} is not open for reading`)
    const buf: Buffer =
      typeof target === 'number' ? Buffer.alloc(checkLength(target)) : Buffer.isBuffer(target) ? target : Buffer.from(target.buffer, target.byteOffset, target.byteLength)
    const pos = position ?? fh.position
    checkOffset(pos)
    const state = fh.state
    if (!state.wb.empty || state.behind.size > 0) await state.lock.run(() => this.flushLocked(state, false))
    const known = state.knownLength()
    const n = await this.io.readInto(state.inode, pos, buf.length, buf, 0, { minBytes: Math.max(0, known - pos) })
    this.counters.bytesRead += n
    if (position === undefined || position === null) fh.position = pos + n
    return { bytesRead: n, buffer: typeof target === 'number' ? buf.subarray(0, n) : buf }
  }

  /**
   * Writes `data` at `position` (default: the handle's position, which then
   * advances; O_APPEND: the end of the file). Returns when the bytes are in
   * the write buffer or on storage; a flush failure surfaces here or on a
   * later call (fsync/close report it as well).
   */
  async write(fh: FileHandle, data: Uint8Array | string, position?: number | null): Promise<number> {
    this.checkHandle(fh)
    if (!fh.writable) throw new StrataError('META_BAD_FILE', `${fh.path} is not open for writing`)
    let buf = typeof data === 'string' ? Buffer.from(data) : Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength)
    const state = fh.state
    const direct: Array<Promise<void>> = []
    const n = await state.lock.run(async () => {
      const pos = fh.flags.append ? state.knownLength() : (position ?? fh.position)
      checkOffset(pos)
      // a write that crosses the maximum size writes what fits, as write(2) does; one that starts there is EFBIG
      const room = maxFileSize(fh.layout.chunkSize) - pos
      if (buf.length > 0 && room <= 0) checkFileSize(pos + buf.length, fh.layout.chunkSize, 'a write to')
      if (buf.length > room) buf = buf.subarray(0, room)
      // a failed flush behind is reported once, by the next call that can; a write
      // over bytes still in flight waits for them, so storage sees the writes in order
      if (state.behindError || state.overlapsBehind(pos, pos + buf.length)) await this.drainBehind(state)
      await bufferedWrite(
        state.wb,
        pos,
        buf,
        (off, bytes) => this.flushBytes(state, off, bytes),
        this.writeBehind > 0 ? (off, bytes) => this.flushBehind(state, off, bytes) : undefined,
        this.writeBehind > 0 ? async (off, bytes) => void direct.push(this.flushDirect(state, off, bytes)) : undefined,
      )
      if (!state.wb.empty) this.markDirty(state)
      if (fh.flags.append || position === undefined || position === null) fh.position = pos + buf.length
      return buf.length
    })
    // the runs of a large write that go straight from the caller's memory are
    // waited for outside the lock, so that the file's other writes (several
    // appends in flight, a pull or a copy) reach storage at the same time
    // instead of one after the other; the caller's buffer is in use until
    // they settle, and their failure is this call's
    if (direct.length > 0) {
      const settled = await Promise.allSettled(direct)
      const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected')
      if (failed) throw failed.reason
    }
    return n
  }

  /** Flushes the inode's write buffer and asks meta for the exact length (storage query). */
  async fsync(fh: FileHandle): Promise<Inode> {
    this.checkHandle(fh)
    const state = fh.state
    await state.lock.run(() => this.flushLocked(state))
    return this.syncState(state, 'fsync')
  }

  /** fsync even with no writes since the last one (3FS force-fsync ioctl). */
  async forceFsync(fh: FileHandle): Promise<Inode> {
    this.checkHandle(fh)
    const state = fh.state
    await state.lock.run(() => this.flushLocked(state))
    return this.syncState(state, 'force')
  }

  /** Sets the length of an open (writable) file: shrink removes chunks, grow zero-fills. */
  async ftruncate(fh: FileHandle, length: number): Promise<Inode> {
    this.checkHandle(fh)
    if (!fh.writable) throw new StrataError('META_BAD_FILE', `${fh.path} is not open for writing`)
    checkOffset(length)
    checkFileSize(length, fh.layout.chunkSize, 'truncate to')
    const state = fh.state
    return state.lock.run(async () => {
      await this.flushLocked(state)
      return this.truncateLocked(state, length)
    })
  }

  /** truncate(2) by path: opens for writing (permission check, session), truncates, closes. */
  async truncate(path: string, length: number): Promise<Inode> {
    checkOffset(length)
    const fh = await this.open(path, 'r+')
    try {
      return await this.ftruncate(fh, length)
    } finally {
      await this.close(fh)
    }
  }

  /** Attributes of an open file (after flushing and syncing local writes when syncOnStat). */
  async fstat(fh: FileHandle): Promise<Inode> {
    this.checkHandle(fh)
    const state = fh.state
    if (this.syncOnStat && state.dirty) {
      await state.lock.run(() => this.flushLocked(state, false))
      if (state.needsSync('getattr')) return this.syncState(state, 'getattr')
    }
    const rsp = await this.meta.stat({ path: inodeAt(state.id) })
    state.update(rsp.stat)
    return rsp.stat
  }

  // --- internals of the data path (also used by the USRBIO layer)

  /**
   * @internal flushes the inode's write buffer after the flushes behind it;
   * reports the first failure among them, unless `reportBehind` is false
   * (periodic sync and stat, which must leave it for the writer's next call).
   * Caller holds state.lock.
   */
  async flushLocked(state: InodeState, reportBehind = true): Promise<void> {
    let failed: unknown = null
    try {
      await this.drainBehind(state, reportBehind)
    } catch (e) {
      failed = e
    }
    if (!state.wb.empty) {
      const off = state.wb.off
      const data = state.wb.view()
      try {
        await this.flushBytes(state, off, data)
      } catch (e) {
        failed ??= e
      } finally {
        state.wb.clear()
      }
    }
    if (failed) throw failed
  }

  /** Starts the flush of a full buffer (owning `data`) without waiting for it, once fewer than writeBehind are in flight. */
  private async flushBehind(state: InodeState, offset: number, data: Buffer): Promise<void> {
    while (state.behind.size >= this.writeBehind) await Promise.race(state.behind.keys())
    const p: Promise<void> = this.flushBytes(state, offset, data)
      .catch((e: unknown) => {
        state.behindError ??= toStrataError(e)
      })
      .finally(() => {
        state.behind.delete(p)
        state.wb.recycle(data)
      })
    state.behind.set(p, { off: offset, end: offset + data.length })
  }

  /**
   * Starts the storage write of a run of the caller's memory and returns it;
   * meanwhile the run counts as in flight (state.behind), so that an
   * overlapping write, a read, a flush or a close waits for it. Its failure
   * goes to the write that made it, not to behindError.
   */
  private flushDirect(state: InodeState, offset: number, data: Buffer): Promise<void> {
    const p = this.flushBytes(state, offset, data)
    const tracked: Promise<void> = p.then(
      () => undefined,
      () => undefined,
    ).finally(() => state.behind.delete(tracked))
    state.behind.set(tracked, { off: offset, end: offset + data.length })
    return p
  }

  /**
   * Waits for the writes in flight on the inode now (flushes behind the write
   * buffer, batch API writes); with `report`, throws (once) the first flush
   * that failed. Writes started meanwhile are not waited for: under the
   * state lock write() starts none, and a batch API ring that keeps writing
   * the file would otherwise hold a close, fsync, stat or periodic sync
   * until it paused.
   */
  private async drainBehind(state: InodeState, report = true): Promise<void> {
    if (state.behind.size > 0) await Promise.all([...state.behind.keys()])
    const e = state.behindError
    if (e && report) {
      state.behindError = null
      throw e
    }
  }

  /** @internal one storage write of a file range, recorded as a write for the length hint */
  async flushBytes(state: InodeState, offset: number, data: Buffer): Promise<void> {
    const tv = state.beginWrite()
    this.counters.flushes++
    try {
      await this.io.writeRange(state.inode, offset, data)
    } catch (e) {
      this.counters.flushErrors++
      this.noteWrite(state, tv, offset, -1)
      throw e
    }
    this.counters.bytesWritten += data.length
    this.noteWrite(state, tv, offset, data.length)
  }

  /** @internal records a finished write (bytes < 0: failed) and marks the inode for periodic sync */
  noteWrite(state: InodeState, truncateVer: number, offset: number, bytes: number): void {
    state.finishWrite(truncateVer, offset, bytes)
    this.markDirty(state)
  }

  private markDirty(state: InodeState): void {
    if (this.inodes.get(state.id) === state) this.dirtySet.add(state.id)
  }

  /**
   * Reports local writes to meta. periodic/getattr send the length hint;
   * fsync/force send none, so meta queries storage for the exact length.
   */
  private async syncState(state: InodeState, kind: SyncKind): Promise<Inode> {
    if (!state.needsSync(kind)) return state.inode
    const writever = state.written
    const exact = kind === 'fsync' || kind === 'force'
    const hint = exact ? null : state.hint
    this.dirtySet.delete(state.id)
    this.counters.syncs++
    try {
      const rsp = await this.meta.sync({
        inode: state.id,
        updateLength: true,
        ...(state.mtime !== undefined ? { mtime: state.mtime } : {}),
        ...(hint ? { lengthHint: hint } : {}),
      })
      state.update(rsp.stat, writever, exact)
      return rsp.stat
    } catch (e) {
      this.counters.syncErrors++
      state.clearHint()
      if (state.dirty) this.markDirty(state)
      throw e
    }
  }

  /** Client-driven truncate (3FS MetaClient::truncateImpl); caller holds state.lock with the buffer flushed. */
  private async truncateLocked(state: InodeState, length: number): Promise<Inode> {
    const writever = state.written
    this.counters.truncates++
    try {
      await this.io.truncateChunks(state.inode, length)
      const rsp = await this.meta.sync({ inode: state.id, updateLength: true, truncated: true })
      state.update(rsp.stat, writever, true)
      return rsp.stat
    } catch (e) {
      state.clearHint()
      throw e
    }
  }

  private schedulePeriodicSync(): void {
    if (this.closed) return
    this.syncTimer = setTimeout(() => {
      this.syncRound = this.periodicSync().finally(() => {
        this.syncRound = null
        this.schedulePeriodicSync()
      })
    }, this.periodicSyncMs)
    this.syncTimer.unref()
  }

  /**
   * One periodic-sync round (3FS FuseClients::periodicSync): for up to
   * periodicSyncLimit dirty inodes, flush the write buffer unless a writer
   * holds it, then send the length hint. Errors leave the inode dirty.
   */
  async periodicSync(): Promise<void> {
    this.counters.periodicRounds++
    const ids = [...this.dirtySet].slice(0, this.periodicSyncLimit)
    for (const id of ids) {
      if (this.closed) return
      const state = this.inodes.get(id)
      if (!state) {
        this.dirtySet.delete(id)
        continue
      }
      try {
        await state.lock.tryRun(() => this.flushLocked(state, false))
        if (state.needsSync('periodic')) await this.syncState(state, 'periodic')
        else if (state.wb.empty && state.behind.size === 0) this.dirtySet.delete(id)
      } catch {
        if (state.dirty) this.markDirty(state)
      }
    }
  }

  // --- names and attributes

  async stat(path: string): Promise<Inode> {
    return this.statPath(path, true)
  }

  async lstat(path: string): Promise<Inode> {
    return this.statPath(path, false)
  }

  /** lstat of a path relative to a directory inode (the FUSE daemon's directories held open by id). */
  async lstatAt(at: PathAt): Promise<Inode> {
    return this.statPath(at, false)
  }

  private async statPath(path: string | PathAt, follow: boolean): Promise<Inode> {
    this.checkOpen()
    const rsp = await this.meta.stat({ path: typeof path === 'string' ? pathAt(path) : path, flags: { followLastSymlink: follow } })
    const st = rsp.stat
    const state = this.inodes.get(st.id)
    if (state) {
      if (this.syncOnStat && state.dirty) {
        await state.lock.run(() => this.flushLocked(state, false))
        if (state.needsSync('getattr')) return this.syncState(state, 'getattr')
      }
      state.update(st)
    }
    return st
  }

  async exists(path: string): Promise<boolean> {
    try {
      await this.lstat(path)
      return true
    } catch (e) {
      if (e instanceof StrataError && e.code === 'META_NOT_FOUND') return false
      throw e
    }
  }

  /** One page of a directory listing (entries sorted by name; `more` says whether to ask again). */
  async readdir(path: string | PathAt, opts: ReaddirOptions = {}): Promise<ListRsp> {
    this.checkOpen()
    return this.meta.list({ path: typeof path === 'string' ? pathAt(path) : path, prev: opts.prev ?? '', limit: opts.limit ?? 0, status: !!opts.status })
  }

  /** Every entry of a directory, paging through the listing. */
  async readdirAll(path: string | PathAt, opts: { status?: boolean; pageSize?: number } = {}): Promise<{ entries: DirEntry[]; inodes: Inode[] }> {
    const entries: DirEntry[] = []
    const inodes: Inode[] = []
    let prev = ''
    for (;;) {
      const page = await this.readdir(path, { prev, limit: opts.pageSize ?? 0, status: !!opts.status })
      entries.push(...page.entries)
      if (opts.status) inodes.push(...(page.inodes ?? []))
      if (!page.more || page.entries.length === 0) break
      prev = page.entries[page.entries.length - 1]!.name
    }
    return { entries, inodes }
  }

  async mkdir(path: string, opts: { mode?: number; recursive?: boolean; layout?: Layout } = {}): Promise<Inode> {
    this.checkOpen()
    // the root always exists (mkdir(2) says EEXIST; meta's mkdirs has no name to create)
    if (normalizePath(path) === '/') throw new StrataError('META_EXISTS', '/ exists')
    const rsp = await this.meta.mkdirs({
      path: pathAt(path),
      perm: (opts.mode ?? 0o755) & 0o7777,
      recursive: !!opts.recursive,
      ...(opts.layout ? { layout: opts.layout } : {}),
    })
    return rsp.stat
  }

  /** POSIX rename: atomically replaces an existing destination (meta enforces the type rules). */
  async rename(src: string, dest: string): Promise<Inode | null> {
    this.checkOpen()
    notRoot(src, 'renamed')
    notRoot(dest, 'replaced')
    const rsp = await this.meta.rename({ src: pathAt(src), dest: pathAt(dest) })
    return rsp.stat ?? null
  }

  /** unlink(2): a non-directory. */
  async unlink(path: string): Promise<void> {
    this.checkOpen()
    notRoot(path, 'removed')
    await this.meta.remove({ path: pathAt(path), atFlags: {}, recursive: false, checkType: true })
  }

  /** rmdir(2): an empty directory (or with recursive, a whole tree). */
  async rmdir(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    this.checkOpen()
    notRoot(path, 'removed')
    const recursive = !!opts.recursive
    const inodeId = recursive ? (await this.lstat(path)).id : undefined
    await this.meta.remove({ path: pathAt(path), atFlags: { removeDir: true }, recursive, checkType: true, ...(inodeId !== undefined ? { inodeId } : {}) })
  }

  /** rm [-r]: any type; with recursive a non-empty directory goes as one atomic remove. */
  async rm(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    this.checkOpen()
    notRoot(path, 'removed')
    const recursive = !!opts.recursive
    const inodeId = recursive ? (await this.lstat(path)).id : undefined
    await this.meta.remove({ path: pathAt(path), atFlags: {}, recursive, ...(inodeId !== undefined ? { inodeId } : {}) })
  }

  async symlink(target: string, path: string): Promise<Inode> {
    this.checkOpen()
    if (typeof target !== 'string' || target === '') throw new StrataError('META_INVALID_ARGUMENT', 'symlink target must be a non-empty string')
    return (await this.meta.symlink({ path: pathAt(path), target })).stat
  }

  async readlink(path: string): Promise<string> {
    const st = await this.lstat(path)
    if (st.type !== 'Symlink' || !st.symlink) throw new StrataError('META_INVALID_ARGUMENT', `${normalizePath(path)} is not a symbolic link`)
    return st.symlink.target
  }

  /** link(2): a new name for an existing non-directory. */
  async link(existing: string, newPath: string): Promise<Inode> {
    this.checkOpen()
    return (await this.meta.hardLink({ oldPath: pathAt(existing), newPath: pathAt(newPath), flags: { followLastSymlink: false } })).stat
  }

  async chmod(path: string, mode: number): Promise<Inode> {
    this.checkOpen()
    return (await this.meta.setAttr({ path: pathAt(path), flags: { followLastSymlink: true }, perm: mode & 0o7777 })).stat
  }

  /** uid/gid undefined, -1 or 0xffffffff ((uid_t)-1, as chown(2)): unchanged. */
  async chown(path: string, uid?: number, gid?: number): Promise<Inode> {
    this.checkOpen()
    const given = (id: number | undefined): id is number => id !== undefined && id >= 0 && id !== 0xffffffff
    return (
      await this.meta.setAttr({
        path: pathAt(path),
        flags: { followLastSymlink: true },
        ...(given(uid) ? { uid } : {}),
        ...(given(gid) ? { gid } : {}),
      })
    ).stat
  }

  /** Times as Date, ms since the epoch, or 'now'. */
  async utimes(path: string, atime: TimeInput, mtime: TimeInput): Promise<Inode> {
    this.checkOpen()
    if (this.inodes.size > 0) await this.settleWritesBeforeTimes((await this.stat(path)).id)
    return (await this.meta.setAttr({ path: pathAt(path), flags: { followLastSymlink: true }, atime: toUs(atime), mtime: toUs(mtime) })).stat
  }

  /**
   * Before times are set explicitly on an inode this client has open: its
   * buffered writes are flushed and their length synced, so that what they
   * change (the length, the mtime) lands first, and the time of the last
   * write is forgotten, so that a later sync or close does not put it back
   * over the times set (cp -a and tar -x write a file, then set its times,
   * then close it).
   */
  async settleWritesBeforeTimes(inodeId: bigint): Promise<void> {
    const state = this.inodes.get(inodeId)
    if (!state) return
    await state.lock.run(() => this.flushLocked(state))
    await this.syncState(state, 'fsync')
    state.mtime = undefined
  }

  /** Sets the default layout of a directory (its new files inherit it). */
  async setLayout(path: string, layout: Layout): Promise<Inode> {
    this.checkOpen()
    return (await this.meta.setAttr({ path: pathAt(path), flags: { followLastSymlink: true }, layout })).stat
  }

  async statfs(): Promise<StatFsRsp> {
    this.checkOpen()
    return this.meta.statFs()
  }

  async realpath(path: string): Promise<string> {
    this.checkOpen()
    return (await this.meta.getRealPath({ path: pathAt(path), absolute: true })).path
  }

  /** 3FS directory lock: try_lock | preempt_lock | unlock | clear. */
  async lockDirectory(path: string, action: LockAction = 'try_lock'): Promise<Inode> {
    const st = await this.stat(path)
    if (st.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', `${normalizePath(path)} is not a directory`)
    return (await this.meta.lockDirectory({ inode: st.id, action })).stat
  }

  unlockDirectory(path: string): Promise<Inode> {
    return this.lockDirectory(path, 'unlock')
  }

  // --- whole-file helpers

  async writeFile(path: string, data: Uint8Array | string, opts: CreateOptions = {}): Promise<Inode> {
    const fh = await this.open(path, 'w', opts.mode ?? 0o644, opts.layout ? { layout: opts.layout } : {})
    try {
      await this.write(fh, data, 0)
      return await this.fsync(fh)
    } finally {
      await this.close(fh)
    }
  }

  async readFile(path: string): Promise<Buffer> {
    const fh = await this.open(path, 'r')
    try {
      const parts: Buffer[] = []
      let pos = 0
      const step = 8 * 1024 * 1024
      for (;;) {
        const want = Math.max(step, Math.min(64 * 1024 * 1024, fh.state.knownLength() - pos))
        const r = await this.read(fh, want, pos)
        if (r.bytesRead === 0) break
        parts.push(r.buffer)
        pos += r.bytesRead
        if (r.bytesRead < want) break
      }
      return Buffer.concat(parts)
    } finally {
      await this.close(fh)
    }
  }

  // --- lifecycle

  get isClosed(): boolean {
    return this.closed
  }

  /** Closes every open handle (flush + meta close), then the clients this FileSystem made. */
  async shutdown(): Promise<void> {
    if (this.closed) return
    let first: unknown
    for (const fh of [...this.handles.values()]) {
      try {
        await this.close(fh)
      } catch (e) {
        first ??= e
      }
    }
    if (this.syncRound) await this.syncRound.catch(() => undefined)
    this.closed = true
    if (this.syncTimer) clearTimeout(this.syncTimer)
    if (this.closerTimer) clearTimeout(this.closerTimer)
    // one last try for closes that failed before
    for (const r of this.pendingCloses.splice(0)) await this.sendPending(r).catch(() => undefined)
    for (const o of this.owned) o.close()
    if (first) throw first
  }

  private checkOpen(): void {
    if (this.closed) throw new StrataError('CLOSED', 'file system closed')
  }

  private checkHandle(fh: FileHandle): void {
    this.checkOpen()
    if (!(fh instanceof FileHandle) || fh.fs !== this) throw new StrataError('META_BAD_FILE', 'not a handle of this file system')
    if (fh.closed) throw new StrataError('META_BAD_FILE', `${fh.path}: handle ${fh.fd} is closed`)
  }
}

function checkOffset(n: number): void {
  // past 2^53 a number is no exact offset, and no file is that large (maxFileSize): EFBIG, as for a size past the limit
  if (Number.isInteger(n) && n > Number.MAX_SAFE_INTEGER) throw new StrataError('META_FILE_TOO_LARGE', `offset ${n} is past the maximum file size ${Number.MAX_SAFE_INTEGER}`)
  if (!Number.isSafeInteger(n) || n < 0) throw new StrataError('META_INVALID_ARGUMENT', `offset must be a non-negative integer, got ${n}`)
}

function checkLength(n: number): number {
  if (!Number.isSafeInteger(n) || n < 0 || n > 2 ** 31 - 1) throw new StrataError('META_INVALID_ARGUMENT', `length must be a non-negative integer below 2^31, got ${n}`)
  return n
}

/** µs since the epoch; -1 is 3FS's SETATTR_TIME_NOW. */
function toUs(t: TimeInput): number {
  if (t === 'now') return -1
  if (t instanceof Date) return t.getTime() * 1000
  if (typeof t === 'number' && Number.isFinite(t)) return Math.round(t * 1000)
  throw new StrataError('META_INVALID_ARGUMENT', `bad time ${String(t)}`)
}

// --- presentation helpers

export interface FileStats {
  ino: bigint
  type: InodeType
  /** permission bits plus the S_IF* type bits */
  mode: number
  perm: number
  nlink: number
  uid: number
  gid: number
  size: number
  truncateVer: number
  atimeMs: number
  mtimeMs: number
  ctimeMs: number
  /** symlink target */
  target?: string
}

/** released files whose newest length a client keeps (a few hundred KiB at most) */
const LENGTHS_SEEN_MAX = 4096
const S_IFREG = 0o100000
const S_IFDIR = 0o040000
const S_IFLNK = 0o120000

/** A Node-stat-like view of an inode. */
export function inodeStats(inode: Inode): FileStats {
  const typeBits = inode.type === 'File' ? S_IFREG : inode.type === 'Directory' ? S_IFDIR : S_IFLNK
  return {
    ino: inode.id,
    type: inode.type,
    mode: typeBits | inode.acl.perm,
    perm: inode.acl.perm,
    nlink: inode.nlink,
    uid: inode.acl.uid,
    gid: inode.acl.gid,
    size: inode.type === 'File' ? (inode.file?.length ?? 0) : inode.type === 'Symlink' ? (inode.symlink?.target.length ?? 0) : 0,
    truncateVer: inode.file?.truncateVer ?? 0,
    atimeMs: Math.floor(inode.atime / 1000),
    mtimeMs: Math.floor(inode.mtime / 1000),
    ctimeMs: Math.floor(inode.ctime / 1000),
    ...(inode.symlink ? { target: inode.symlink.target } : {}),
  }
}

/** The root directory has no name in a parent: removing or renaming it is refused up front with a clear error. */
function notRoot(path: string, what: string): void {
  if (normalizePath(path) === '/') throw new StrataError('META_INVALID_ARGUMENT', `the root directory cannot be ${what}`)
}
