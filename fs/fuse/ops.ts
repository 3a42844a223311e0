// The FUSE operations of the Strata daemon, on top of the file client
// (FileSystem) with 3FS's FUSE semantics (src/fuse/FuseOps.cc):
//  - data: per-inode write buffer, flushed on a non-contiguous write, when
//    full, on flush/fsync/release and by periodic sync; flush (every close(2))
//    is an fsync, as in 3FS, so another client sees the exact length as soon
//    as close returns; release ends the write session;
//  - names: every request carries a path (libfuse 2 high-level API); getattr
//    answers from a path cache filled by stat and by listings, dropped on
//    every change this mount makes;
//  - `3fs-virt/` (virtual directory listed in the root): `ln -s <abs path on
//    this mount> 3fs-virt/rm-rf/<any>` removes <path> recursively with one
//    meta remove;
//  - xattrs: only `hf3fs.lock` on directories (try_lock | preempt_lock |
//    unlock | clear; get returns the holder as JSON or ENODATA). Other
//    `hf3fs.*` names → ENOTSUP; other namespaces: set → ENOTSUP, get →
//    ENODATA, as 3FS (cp -a and tar tolerate both); a read-only mount
//    refuses set and remove with EROFS (a lock is a change).
// fuse-native gives no caller identity, so every request runs as the
// mount's user (config uid/gid).

import path from 'node:path'
import { constants as fsc, promises as fsp } from 'node:fs'
import { StrataError, toStrataError } from '../common/errors.js'
import { BufferPool } from '../common/buffer-pool.js'
import type { Logger } from '../common/log.js'
import type { FileHandle, FileSystem } from '../client/file/file-system.js'
import { pathAt } from '../client/file/flags.js'
import { checkFileSize } from '../client/file/index.js'
import type { Inode, LockAction, PathAt, StatFsRsp } from '../meta/protocol.js'
import { E, toFuseErrno } from './errno.js'
import type { FuseOperations, FuseStat, FuseStatfs } from './native.js'
import { PathCache, childOf, nameOf, parentOf } from './path-cache.js'
import { READ_AHEAD_DEFAULTS, ReadAhead, ReadAheadBudget, type ReadAheadOptions, type ReadAheadStats } from './read-ahead.js'
import type { FastReadStats, FastReads } from './fast-reads.js'
import { msToWire, usToWire, wireToSetattrUs } from './times.js'
import { RmdirRetries, isHiddenName } from './hidden-files.js'

export const VIRT_DIR = '3fs-virt'
export const VIRT_ROOT = `/${VIRT_DIR}`
export const RMRF_DIR = `${VIRT_ROOT}/rm-rf`
export const LOCK_XATTR = 'hf3fs.lock'
const LOCK_ACTIONS: readonly LockAction[] = ['try_lock', 'preempt_lock', 'unlock', 'clear']

const S_IFMT = 0o170000
const S_IFREG = 0o100000
const S_IFDIR = 0o040000
const S_IFLNK = 0o120000
const UNCHANGED_ID = 0xffffffff
const O_ACCMODE = 3


/**
 * Names libfuse gives the node of a directory held here (a working directory, a descriptor) when
 * another client put something else at its name (detachHeld): longer than any path the kernel
 * takes (PATH_MAX), so no request can name it and no real name can meet it in libfuse's table.
 */
const HELD_PREFIX = 'strata-held-'
const HELD_NAME_BYTES = 4096
/** how many such names the daemon keeps resolving (oldest dropped: their requests get ESTALE) */
const HELD_NAMES_MAX = 4096

/** errnos that are answers, not failures (logged at debug only) */
const EXPECTED = new Set<number>([-38, -2, -17, -20, -21, -39, -61, -95, -37, -13, -1, -22, -40, -36, -18, -31, -30, -9, -27, -116])

export interface FuseOpsOptions {
  fs: FileSystem
  /** absolute mount point (rm-rf targets must be under it) */
  mountpoint: string
  /** path-cache lifetime, ms (the attr timeout) */
  attrTimeoutMs: number
  /** refuse every change with EROFS */
  readonly?: boolean
  /** identity the mount acts as (for access()) */
  uid: number
  gid: number
  groups?: number[]
  log: Logger
  /** how long a 3fs-virt/rm-rf/<name> link stays visible after the remove (ms) */
  rmrfLinkTtlMs?: number
  /** whole-chunk read-ahead of read-only handles read sequentially (read-ahead.ts); false: off */
  readAhead?: Partial<ReadAheadOptions> | false
  /**
   * After a 3fs-virt/rm-rf, make the kernel drop its cached name and attributes of the removed path by
   * an rmdir/unlink of it through the mount, which these ops answer without a meta call. Only for ops
   * that serve `mountpoint` (the daemon): otherwise that path is someone else's.
   */
  kernelInvalidate?: boolean
  /** how many paths the daemon remembers the reported file type of (kernelView) */
  reportedPathsMax?: number
}

type Handle =
  | { kind: 'file'; fh: FileHandle; path: string; ra?: ReadAhead }
  /** id: the directory opened (opendir by the kernel's node, see heldDir), listed by id whatever its name is now */
  | { kind: 'dir'; path: string; id: bigint }

export interface FuseOpsStats {
  ops: Record<string, number>
  errors: Record<string, number>
  inFlight: number
  openFiles: number
  openDirs: number
  rmrf: number
  cache: ReturnType<PathCache['stats']>
  /** paths whose inode and type the kernel was told (kernelView) */
  reportedPaths: number
  slowestMs: number
  readAhead: ReadAheadStats & { bytesHeld: number; buffers: { hits: number; misses: number; freeBytes: number }; native: FastReadStats | null }
}

/** st_ino of the virtual directories and the rm-rf links: above every id 3FS hands out (INODE_NORMAL_MAX) */
const VIRT_ROOT_INO = 0xffffffffffffff01n
const RMRF_DIR_INO = 0xffffffffffffff02n
const RMRF_LINK_INO = 0xfffffffe00000000n

/**
 * st_ino as the addon takes it (native/fuse/fuse-native.c, change 7): the
 * 3FS inode id, so every hard link of a file has the same st_ino, split into
 * fuse-native's 32-bit `ino` field and its `dev` field, which carries the
 * high half (the kernel sets st_dev itself). The root's id 0 is reported as
 * 1: tools read an inode number of 0 as "no file".
 */
export function inoFields(id: bigint): { dev: number; ino: number } {
  const v = id === 0n ? 1n : BigInt.asUintN(64, id)
  return { dev: Number(v >> 32n), ino: Number(v & 0xffffffffn) }
}

/** The attributes FUSE reports for an inode. */
export function inodeToStat(inode: Inode): FuseStat {
  const typeBits = inode.type === 'File' ? S_IFREG : inode.type === 'Directory' ? S_IFDIR : S_IFLNK
  const size =
    inode.type === 'File' ? (inode.file?.length ?? 0) : inode.type === 'Symlink' ? Buffer.byteLength(inode.symlink?.target ?? '') : 4096
  return {
    ...inoFields(inode.id),
    mode: typeBits | (inode.acl.perm & 0o7777),
    uid: inode.acl.uid,
    gid: inode.acl.gid,
    size,
    nlink: Math.max(1, inode.nlink),
    blksize: inode.type === 'File' ? Math.min(inode.file?.layout.chunkSize ?? 4096, 1 << 20) : 4096,
    blocks: Math.ceil(size / 512),
    atime: usToWire(inode.atime),
    mtime: usToWire(inode.mtime),
    ctime: usToWire(inode.ctime),
  }
}

function virtDirStat(perm: number, ino: bigint): FuseStat {
  // 3FS: 2023-06-01 as the virtual inodes' time
  const t = msToWire(Date.UTC(2023, 5, 1))
  return { ...inoFields(ino), mode: S_IFDIR | perm, uid: 0, gid: 0, size: 4096, nlink: 2, blksize: 4096, blocks: 8, atime: t, mtime: t, ctime: t }
}

/** FNV-1a of a string's UTF-8 bytes: distinct st_ino for distinct rm-rf links */
function hash32(s: string): number {
  let h = 0x811c9dc5
  for (const b of Buffer.from(s)) h = Math.imul(h ^ b, 0x01000193) >>> 0
  return h
}

/** statfs numbers in 32-bit fields (fuse-native): the block size grows until the block counts fit. */
export function toStatfs(s: StatFsRsp): FuseStatfs {
  let bsize = 4096
  const cap = Math.max(0, s.capacity)
  while (cap / bsize >= 2 ** 32 - 1) bsize *= 2
  const blocks = Math.floor(cap / bsize)
  const bfree = Math.min(blocks, Math.floor(Math.max(0, s.free) / bsize))
  const files = 2 ** 31
  return { bsize, frsize: bsize, blocks, bfree, bavail: bfree, files, ffree: files, favail: files, fsid: 0x8f3f5fff, flag: 0, namemax: 255 }
}


function fail(errno: number, msg?: string): never {
  throw Object.assign(new Error(msg ?? `errno ${errno}`), { fuseErrno: errno })
}

function errnoOf(e: unknown): number {
  const fe = (e as { fuseErrno?: unknown } | null)?.fuseErrno
  if (typeof fe === 'number') return fe
  return toFuseErrno(e)
}

export class StrataFuseOps {
  readonly fs: FileSystem
  readonly cache: PathCache
  private readonly mnt: string
  private readonly ro: boolean
  private readonly log: Logger
  private readonly handles = new Map<number, Handle>()
  private nextHandle = 1
  /** inode id → open handles that may write it */
  private readonly writers = new Map<bigint, number>()
  /** 3fs-virt/rm-rf/<name> links just "created" (the kernel looks them up right after symlink) */
  private readonly rmrfLinks = new Map<string, { target: string; until: number }>()
  /** paths a finished rm-rf is dropping from the kernel's caches (rmdir/unlink/rename of them succeed at once) */
  private readonly dropping = new Map<string, number>()
  /** st_dev of the FUSE mount these ops serve, once mounted (setMountDevice): the only place a drop may remove a name */
  private mountDev: bigint | null = null
  private readonly rmrfTtlMs: number
  private readonly counters = { ops: {} as Record<string, number>, errors: {} as Record<string, number>, inFlight: 0, rmrf: 0, slowestMs: 0 }
  private readonly readAhead: ReadAheadOptions | null
  private readonly raBudget: ReadAheadBudget
  /** read-ahead chunk buffers, recycled: a fresh 1 MiB buffer per chunk kept V8's GC threads busy (~1.4 s of CPU per GiB read) */
  private readonly raBuffers: BufferPool
  private readonly raStats: ReadAheadStats = { hits: 0, fetches: 0, direct: 0 }
  /** the mount's native chunk table (READs libfuse threads answer from read-ahead), once attached */
  private fastReads: FastReads | null = null
  /**
   * What the kernel was last told is at each path (inode id and type, from
   * every getattr answered by path). libfuse 2 gives a name the same node id
   * for as long as its node lives, whatever another client puts there, and
   * the kernel marks an inode bad (EIO from then on, for every descriptor
   * open on it) when a LOOKUP or GETATTR of its node id answers another file
   * type. See kernelView().
   */
  private readonly reported = new Map<string, { id: bigint; type: Inode['type'] }>()
  private readonly reportedMax: number
  /**
   * Nodes libfuse moved away from a name (detachHeld): "/<held name>" → the directory's inode id.
   * Requests on the node (and below it) come with that path; they are answered by the id.
   */
  private readonly detached = new Map<string, bigint>()
  private detachSeq = 0
  /**
   * Names whose node is being moved (detachHeld): the directory the node still is until libfuse has
   * moved it and the kernel looked the name up again (a GETATTR of the node may come by the old name).
   */
  private readonly detaching = new Map<string, { id: bigint; as: string }>()
  /** whether libfuse has yet to move a node to this name (the addon's, once mounted: attachMoves) */
  private movePending: ((as: string) => boolean) | null = null
  /** directory id → until when it is taken to exist (seen within the attr timeout; lstatInKernelParent) */
  private readonly dirsSeen = new Map<bigint, number>()
  /** rmdirs answered ESTALE while a release of a hidden file in the directory may be queued (hidden-files.ts) */
  private readonly rmdirRetries = new RmdirRetries()

  constructor(readonly opts: FuseOpsOptions) {
    this.fs = opts.fs
    this.mnt = path.resolve(opts.mountpoint)
    this.ro = !!opts.readonly
    this.log = opts.log
    this.cache = new PathCache(opts.attrTimeoutMs)
    this.rmrfTtlMs = opts.rmrfLinkTtlMs ?? 2000
    this.readAhead = opts.readAhead === false ? null : { ...READ_AHEAD_DEFAULTS, ...opts.readAhead }
    this.raBudget = new ReadAheadBudget(this.readAhead?.budgetBytes ?? 0)
    this.raBuffers = new BufferPool(this.readAhead?.budgetBytes ?? 0)
    this.reportedMax = opts.reportedPathsMax ?? 1 << 16
  }

  stats(): FuseOpsStats {
    let openFiles = 0
    let openDirs = 0
    for (const h of this.handles.values()) h.kind === 'file' ? openFiles++ : openDirs++
    return {
      ops: { ...this.counters.ops },
      errors: { ...this.counters.errors },
      inFlight: this.counters.inFlight,
      openFiles,
      openDirs,
      rmrf: this.counters.rmrf,
      cache: this.cache.stats(),
      reportedPaths: this.reported.size,
      slowestMs: this.counters.slowestMs,
      readAhead: { ...this.raStats, bytesHeld: this.raBudget.used, buffers: this.raBuffers.stats(), native: this.fastReads?.stats() ?? null },
    }
  }

  /** Whether handles get whole-chunk read-ahead at all. */
  get readAheadEnabled(): boolean {
    return this.readAhead !== null
  }

  /**
   * Files opened from now on register their read-ahead chunks in `table`
   * (libfuse threads then answer the READs those chunks cover); null stops
   * it for new handles (the daemon closes the table itself, which lets go of
   * every chunk registered).
   */
  attachFastReads(table: FastReads | null): void {
    this.fastReads = table
  }

  /** Open file handles (for shutdown and tests). */
  openFileHandles(): FileHandle[] {
    const out: FileHandle[] = []
    for (const h of this.handles.values()) if (h.kind === 'file') out.push(h.fh)
    return out
  }

  // --- plumbing

  private run<T>(op: string, fn: () => Promise<T>, done: (errno: number, v?: T, detachAs?: string) => void, what?: string): void {
    this.counters.ops[op] = (this.counters.ops[op] ?? 0) + 1
    this.counters.inFlight++
    const t0 = performance.now()
    let p: Promise<T>
    try {
      p = fn()
    } catch (e) {
      p = Promise.reject(e)
    }
    p.then(
      (v) => {
        this.finish(t0)
        done(0, v)
      },
      (e: unknown) => {
        this.finish(t0)
        const errno = errnoOf(e)
        this.counters.errors[op] = (this.counters.errors[op] ?? 0) + 1
        if (EXPECTED.has(errno)) this.log.debug(`${op} failed`, { path: what, errno, err: e })
        else this.log.warn(`${op} failed`, { path: what, errno, err: e instanceof StrataError ? e : toStrataError(e) })
        done(errno, undefined, (e as { detachAs?: unknown } | null)?.detachAs as string | undefined)
      },
    )
  }

  private finish(t0: number): void {
    this.counters.inFlight--
    const ms = performance.now() - t0
    if (ms > this.counters.slowestMs) this.counters.slowestMs = ms
  }

  private checkWritable(): void {
    if (this.ro) fail(E.EROFS, 'read-only mount')
  }

  private isVirtual(p: string): boolean {
    return p === VIRT_ROOT || p.startsWith(VIRT_ROOT + '/')
  }

  private addHandle(h: Handle): number {
    let id = this.nextHandle
    while (this.handles.has(id) || id === 0) id = id >= 0x7fffffff ? 1 : id + 1
    this.nextHandle = id >= 0x7fffffff ? 1 : id + 1
    this.handles.set(id, h)
    if (h.kind === 'file' && h.fh.writable) {
      this.writers.set(h.fh.inodeId, (this.writers.get(h.fh.inodeId) ?? 0) + 1)
      this.cache.invalidateInode(h.fh.inodeId)
      // readers' chunks fetched before may be overwritten from now on
      this.dropReadAhead(h.fh.inodeId)
    } else if (h.kind === 'file' && this.readAhead) {
      const fh = h.fh
      h.ra = new ReadAhead(
        fh.layout.chunkSize,
        async (pos, len) => {
          const b = this.raBuffers.take(len)
          const r = await this.fs.read(fh, b, pos)
          return b.subarray(0, r.bytesRead)
        },
        this.raBudget,
        this.readAhead,
        this.raStats,
        () => fh.state.knownLength(),
        (b) => this.raBuffers.release(b),
        this.fastReads ? { table: this.fastReads, fh: id } : null,
      )
    }
    return id
  }

  private dropHandle(id: number): Handle | undefined {
    const h = this.handles.get(id)
    if (!h) return undefined
    this.handles.delete(id)
    if (h.kind === 'file') {
      h.ra?.close()
      const ino = h.fh.inodeId
      if (h.fh.writable) {
        const n = (this.writers.get(ino) ?? 1) - 1
        if (n <= 0) this.writers.delete(ino)
        else this.writers.set(ino, n)
      }
      this.cache.invalidateInode(ino)
    }
    return h
  }

  /** Forgets the read-ahead chunks of every handle of this inode. */
  private dropReadAhead(id: bigint): void {
    for (const h of this.handles.values()) if (h.kind === 'file' && h.fh.inodeId === id) h.ra?.clear()
  }

  /**
   * A read: from the handle's read-ahead chunks when it reads sequentially
   * and nobody here writes the file, the rest from storage. The answer is
   * short only at the end of the file: FUSE reads a short answer as EOF.
   */
  private async read(fd: number, dst: Buffer, pos: number): Promise<number> {
    const h = this.handles.get(fd)
    if (!h || h.kind !== 'file') fail(E.EBADF, `no open file ${fd}`)
    const served = h.ra && !this.writers.has(h.fh.inodeId) ? await h.ra.read(pos, dst) : 0
    if (served === dst.length) return served
    return served + (await this.fs.read(h.fh, dst.subarray(served), pos + served)).bytesRead
  }

  /** A write (the file client cuts it at the maximum file size: EFBIG when it starts there or past it). */
  private async write(fd: number, src: Buffer, pos: number): Promise<number> {
    if (this.ro) fail(E.EROFS)
    return this.fs.write(this.file(fd), src, pos)
  }

  private file(fd: number): FileHandle {
    const h = this.handles.get(fd)
    if (!h || h.kind !== 'file') fail(E.EBADF, `no open file ${fd}`)
    return h.fh
  }

  /** A writable handle of this inode, if this mount has one open. */
  private writableHandleOf(id: bigint): FileHandle | undefined {
    for (const h of this.handles.values()) if (h.kind === 'file' && h.fh.writable && !h.fh.closed && h.fh.inodeId === id) return h.fh
    return undefined
  }

  /**
   * lstat of the name p through the cache (files written here skip it: their size moves). The name
   * is looked up in the directory the kernel holds as p's parent (heldDir), by its inode id: a
   * process's working directory or an opendir descriptor that another client renamed (or a
   * directory above it) still finds its entries, as on a local filesystem.
   */
  private async lookup(p: string): Promise<Inode> {
    const hit = this.cache.get(p)
    if (hit && !this.writers.has(hit.id)) return hit
    const inode = await this.lstatInKernelParent(p)
    if (!this.writers.has(inode.id)) this.cache.set(p, inode)
    return inode
  }

  /**
   * The directory the kernel holds at path p, by what it was last told there (libfuse names a
   * node by the path it was looked up at, for as long as the kernel holds it), if that was a
   * directory. Its entries, its attributes and its listing are asked for by this id.
   */
  private heldDir(p: string): bigint | undefined {
    const moving = this.detaching.get(p)
    if (moving) {
      // libfuse has not moved the node yet: the kernel's requests on it still come by this name
      if (this.movePending?.(moving.as)) return moving.id
      this.detaching.delete(p)
    }
    const r = this.reported.get(p)
    if (r?.type === 'Directory') return r.id
    return this.detached.get(p)
  }

  /** The daemon, once mounted: asks the addon whether a node's move (detachHeld) is still to be made. */
  attachMoves(pending: ((as: string) => boolean) | null): void {
    this.movePending = pending
  }

  /** Whether p is a node libfuse moved away from its name, or below one (detachHeld). */
  private isDetached(p: string): boolean {
    return p.startsWith('/' + HELD_PREFIX)
  }

  /**
   * The kernel's LOOKUP of p found another object than the directory it was told is there (another
   * client moved that directory away and put something else at the name, or nothing): libfuse still
   * has the name on the node it gave that directory, which the kernel may hold (a working
   * directory, a descriptor), and would give it to the new object too, so the working directory
   * would become the new directory, or be marked bad for a file. The node is moved to a name of its
   * own (the addon's change 9) before the answer reaches the kernel, and requests on it are answered
   * for the directory by its id from then on. A new object is answered ESTALE: the kernel looks the
   * name up again and gets a new node; a missing one ENOENT.
   */
  private detachHeld(p: string, id: bigint, errno: number): never {
    const name = `${HELD_PREFIX}${id.toString(16)}-${++this.detachSeq}-`.padEnd(HELD_NAME_BYTES, '~')
    const as = '/' + name
    if (this.detached.size >= HELD_NAMES_MAX) this.detached.delete(this.detached.keys().next().value!)
    this.detached.set(as, id)
    if (this.detaching.size >= HELD_NAMES_MAX) this.detaching.clear()
    this.detaching.set(p, { id, as: name })
    // the nodes below it move with it; the name itself is the new object's once looked up again
    this.movedReported(p, as)
    this.cache.invalidateTree(p)
    // debug: every directory another client removes or replaces gets here once (the kernel holding it or not)
    this.log.debug('the node of a directory another client moved away or removed moves off its name', { path: p, id: id.toString(), errno })
    throw Object.assign(new Error(`${p} is no longer the directory ${id} the kernel holds there`), { fuseErrno: errno, detachAs: name })
  }

  private async lstatInKernelParent(p: string): Promise<Inode> {
    const parent = p === '/' ? undefined : this.heldDir(parentOf(p))
    if (parent === undefined) return this.isDetached(p) ? this.inHeldDir(p, (q) => this.fs.lstat(q), true) : this.fs.lstat(p)
    const at: PathAt = { parent, path: nameOf(p) }
    try {
      const inode = await this.fs.lstatAt(at)
      this.sawDir(parent)
      return inode
    } catch (e) {
      // the directory itself is gone (removed by another client): ESTALE, so that a path walk
      // looks its name up again (LOOKUP_REVAL) and finds what is there now; a name missing in a
      // directory that exists stays ENOENT. A directory seen within the attr timeout is taken to
      // exist (a negative lookup, before every create, costs no second meta call then).
      if (e instanceof StrataError && e.code === 'META_NOT_FOUND' && !this.dirSeenLately(parent, parentOf(p))) {
        if (!(await this.dirLive(parent))) fail(E.ESTALE, `the directory ${parentOf(p)} was removed by another client`)
      }
      throw e
    }
  }

  private sawDir(id: bigint): void {
    if (this.dirsSeen.size >= 4096) this.dirsSeen.clear()
    this.dirsSeen.set(id, performance.now() + this.opts.attrTimeoutMs)
  }

  private dirSeenLately(id: bigint, p: string): boolean {
    if (this.cache.get(p)?.id === id) return true
    const until = this.dirsSeen.get(id)
    if (until === undefined) return false
    if (until > performance.now()) return true
    this.dirsSeen.delete(id)
    return false
  }

  /** The directory with this id, unless it was removed (gone, or waiting for the GC with no links). */
  private async dirLive(id: bigint): Promise<Inode | null> {
    try {
      const inode = await this.fs.lstatAt({ parent: id })
      if (inode.type !== 'Directory' || inode.nlink === 0) return null
      this.sawDir(id)
      return inode
    } catch (e) {
      if (e instanceof StrataError && e.code === 'META_NOT_FOUND') return null
      throw e
    }
  }

  /**
   * The attributes of the directory the kernel holds at p (its node, not the name: GETATTR,
   * OPENDIR): the same directory wherever another client moved it. Gone: ESTALE (a path walk
   * then looks the name up again).
   */
  private async heldDirInode(p: string, id: bigint): Promise<Inode> {
    const hit = this.cache.get(p)
    if (hit && hit.id === id) return hit
    const inode = await this.dirLive(id)
    if (inode) return inode
    fail(E.ESTALE, `the directory held at ${p} was removed by another client`)
  }

  /**
   * Runs a change (or an open) of p; when it fails because a component is missing (ENOENT,
   * ENOTDIR) and a directory the kernel holds on p's way (p itself with \`self\`, else its parent or
   * above) has been moved by another client since, runs it again at the directory's new place:
   * creating, opening or removing names in a working directory someone else renamed works, as
   * on a local filesystem. Costs nothing unless the first try fails.
   */
  private async inHeldDir<T>(p: string, fn: (q: string) => Promise<T>, self = false): Promise<T> {
    // a node moved off its name has no path of its own: straight to where its directory is now
    if (this.isDetached(p)) return this.atHeldPlace(p, self, fn)
    try {
      return await fn(p)
    } catch (e) {
      if (!(e instanceof StrataError) || (e.code !== 'META_NOT_FOUND' && e.code !== 'META_NOT_DIRECTORY')) throw e
      const q = await this.movedPath(p, self).catch(() => null)
      if (q === null) throw e
      try {
        return await fn(q)
      } finally {
        this.cache.invalidateTree(q)
      }
    }
  }

  /** fn at p's place now, for p below (or, with self, at) a node libfuse moved off its name; ESTALE once its directory is gone. */
  private async atHeldPlace<T>(p: string, self: boolean, fn: (q: string) => Promise<T>): Promise<T> {
    const q = await this.movedPath(p, self)
    if (q === null) fail(E.ESTALE, `the directory held at ${p.slice(0, 48)}… was removed by another client`)
    try {
      return await fn(q)
    } finally {
      this.cache.invalidateTree(q)
    }
  }

  /** inHeldDir for an operation on two names (rename, link): each is put where its held directory is now. */
  private async inHeldDirs<T>(ps: string[], fn: (...qs: string[]) => Promise<T>): Promise<T> {
    if (ps.some((p) => this.isDetached(p))) {
      const qs = await Promise.all(ps.map(async (p) => (this.isDetached(p) ? ((await this.movedPath(p, false)) ?? fail(E.ESTALE, 'the directory held there was removed by another client')) : p)))
      try {
        return await fn(...qs)
      } finally {
        for (const q of qs) this.cache.invalidateTree(q)
      }
    }
    try {
      return await fn(...ps)
    } catch (e) {
      if (!(e instanceof StrataError) || (e.code !== 'META_NOT_FOUND' && e.code !== 'META_NOT_DIRECTORY')) throw e
      const qs = await Promise.all(ps.map((p) => this.movedPath(p, false).catch(() => null)))
      if (qs.every((q) => q === null)) throw e
      const moved = qs.map((q, i) => q ?? ps[i]!)
      try {
        return await fn(...moved)
      } finally {
        for (const q of moved) this.cache.invalidateTree(q)
      }
    }
  }

  /** p with the nearest directory the kernel holds on its way put where that directory is now; null when it did not move. */
  private async movedPath(p: string, self: boolean): Promise<string | null> {
    for (let d = self ? p : parentOf(p); d !== '/'; d = parentOf(d)) {
      const id = this.heldDir(d)
      if (id === undefined) continue
      // removed: nowhere to go (a removed tree waits for the GC under another root)
      if (!(await this.dirLive(id))) return null
      const now = (await this.fs.meta.getRealPath({ path: { parent: id }, absolute: true })).path
      return now === d ? null : now === '/' ? p.slice(d.length) || '/' : now + p.slice(d.length)
    }
    return null
  }

  private virtualStat(p: string): FuseStat {
    if (p === VIRT_ROOT) return virtDirStat(0o555, VIRT_ROOT_INO)
    if (p === RMRF_DIR) return virtDirStat(0o777, RMRF_DIR_INO)
    if (parentOf(p) === RMRF_DIR) {
      const link = this.rmrfLinks.get(p)
      if (link && link.until > performance.now()) {
        const t = msToWire(Date.now())
        return { ...inoFields(RMRF_LINK_INO | BigInt(hash32(p))), mode: S_IFLNK | 0o777, uid: this.opts.uid, gid: this.opts.gid, size: Buffer.byteLength(link.target), nlink: 1, atime: t, mtime: t, ctime: t }
      }
      this.rmrfLinks.delete(p)
    }
    fail(E.ENOENT)
  }

  // --- the operations object handed to fuse-native

  operations(): FuseOperations {
    return {
      init: (cb) => {
        this.log.info('FUSE session initialised', { mountpoint: this.mnt })
        cb(0)
      },
      getattr: (p, cb, ofNode) => this.run('getattr', () => this.getattr(p, !!ofNode), cb, p),
      fgetattr: (p, fd, cb) => this.run('fgetattr', () => this.fgetattr(p, fd), cb, p),
      access: (p, mode, cb) => this.run('access', () => this.access(p, mode), cb, p),
      statfs: (p, cb) => this.run('statfs', async () => toStatfs(await this.fs.statfs()), cb, p),
      readdir: (p, cb, fd) =>
        this.run(
          'readdir',
          () => this.readdir(p, fd ?? 0),
          (err, v) => (err ? cb(err) : cb(0, v!.names, v!.stats)),
          p,
        ),
      opendir: (p, flags, cb) => this.run('opendir', () => this.opendir(p), cb, p),
      releasedir: (p, fd, cb) => this.run('releasedir', async () => void this.dropHandle(fd), cb, p),
      mkdir: (p, mode, cb) => this.run('mkdir', () => this.mkdir(p, mode), cb, p),
      rmdir: (p, cb) => this.run('rmdir', () => this.rmdir(p), cb, p),
      unlink: (p, cb) => this.run('unlink', () => this.unlink(p), cb, p),
      rename: (src, dest, cb) => this.run('rename', () => this.rename(src, dest), cb, `${src} -> ${dest}`),
      link: (src, dest, cb) => this.run('link', () => this.link(src, dest), cb, `${src} -> ${dest}`),
      symlink: (target, p, cb) => this.run('symlink', () => this.symlink(target, p), cb, p),
      readlink: (p, cb) => this.run('readlink', () => this.readlink(p), cb, p),
      chmod: (p, mode, cb) => this.run('chmod', () => this.setattr(p, { perm: mode & 0o7777 }), cb, p),
      chown: (p, uid, gid, cb) =>
        this.run(
          'chown',
          () => this.setattr(p, { ...(uid !== UNCHANGED_ID && uid >= 0 ? { uid } : {}), ...(gid !== UNCHANGED_ID && gid >= 0 ? { gid } : {}) }),
          cb,
          p,
        ),
      // each time as itself, UTIME_OMIT and UTIME_NOW as sentinels (times.ts; the addon's changes 3 and 6)
      utimens: (p, atime, mtime, cb) => {
        const a = wireToSetattrUs(atime)
        const m = wireToSetattrUs(mtime)
        this.run('utimens', () => this.setattr(p, { ...(a === undefined ? {} : { atime: a }), ...(m === undefined ? {} : { mtime: m }) }), cb, p)
      },
      truncate: (p, size, cb) => this.run('truncate', () => this.truncate(p, size), cb, p),
      ftruncate: (p, fd, size, cb) => this.run('ftruncate', () => this.ftruncate(p, fd, size), cb, p),
      mknod: (p, mode, dev, cb) => this.run('mknod', () => this.mknod(p, mode), cb, p),
      create: (p, mode, cb) => this.run('create', () => this.create(p, mode), cb, p),
      open: (p, flags, cb) => this.run('open', () => this.open(p, flags), cb, p),
      read: (p, fd, buf, len, pos, cb) =>
        this.run(
          'read',
          () => this.read(fd, buf.subarray(0, len), pos),
          (err, n) => cb(err ? err : n!),
          p,
        ),
      write: (p, fd, buf, len, pos, cb) =>
        this.run(
          'write',
          () => this.write(fd, buf.subarray(0, len), pos),
          (err, n) => cb(err ? err : n!),
          p,
        ),
      flush: (p, fd, cb) => this.run('flush', () => this.flush(fd), cb, p),
      fsync: (p, datasync, fd, cb) => this.run('fsync', () => this.fsync(fd), cb, p),
      // names are durable in meta once an operation returned: nothing to sync for a directory
      fsyncdir: (p, datasync, fd, cb) => cb(0),
      release: (p, fd, cb) => this.run('release', () => this.release(fd), cb, p),
      setxattr: (p, name, value, position, flags, cb) => this.run('setxattr', () => this.setxattr(p, name, value), cb, p),
      getxattr: (p, name, position, cb) => this.run('getxattr', () => this.getxattr(p, name), cb, p),
      listxattr: (p, cb) => this.run('listxattr', () => this.listxattr(p), cb, p),
      removexattr: (p, name, cb) => this.run('removexattr', () => this.removexattr(p, name), cb, p),
    }
  }

  // --- attributes and names

  /**
   * ofNode: the kernel asks about a node it holds (GETATTR and the like) rather than looking a
   * name up (LOOKUP); Strata's build of the addon tells them apart. A directory it holds is
   * answered for by its inode id: a working directory or an opendir descriptor that another
   * client renamed, or replaced by a file, keeps its own attributes (a local filesystem's fstat).
   */
  async getattr(p: string, ofNode = false): Promise<FuseStat> {
    if (this.isVirtual(p)) return this.virtualStat(p)
    const held = ofNode ? this.heldDir(p) : undefined
    if (held !== undefined) return inodeToStat(await this.heldDirInode(p, held))
    if (!ofNode) {
      const prev = this.reported.get(p)
      if (prev?.type === 'Directory') {
        let now: Inode
        try {
          now = await this.lookup(p)
        } catch (e) {
          // (a LOOKUP of the name running beside this one may have moved the node already)
          if (errnoOf(e) === E.ENOENT && this.reported.get(p) === prev) this.detachHeld(p, prev.id, E.ENOENT)
          throw e
        }
        if (now.id !== prev.id && this.reported.get(p) === prev) this.detachHeld(p, prev.id, E.ESTALE)
        return this.kernelView(p, now)
      }
    }
    return this.kernelView(p, await this.lookup(p))
  }

  /**
   * The answer to a getattr by path (the kernel's LOOKUP and GETATTR alike:
   * libfuse 2 calls getattr for both). libfuse keeps one node id per name
   * while the kernel holds it, so when another client put an object of
   * another type at a name (a directory where a file was, or the reverse),
   * answering it under the old node id makes the kernel mark its inode bad:
   * that stat fails with EIO, and so does every later call on a descriptor
   * open on the old file. Instead:
   *  - while this mount has the old object open (a file), the name keeps
   *    answering for it (the handle's own inode), so its descriptors go on
   *    writing and reading the open file (3FS: the open file's inode);
   *  - otherwise the first answer that reveals the change is ESTALE (and the
   *    new type is remembered): the kernel redoes the lookup with
   *    LOOKUP_REVAL (stat, open, link, mkdir, … retry once on ESTALE), drops
   *    its stale dentry and inode and gets a fresh inode of the right type.
   */
  private async kernelView(p: string, inode: Inode): Promise<FuseStat> {
    const prev = this.reported.get(p)
    if (prev && prev.type !== inode.type) {
      const open = this.openFileOf(prev.id)
      if (open) return this.handleStat(open)
      this.remember(p, inode)
      fail(E.ESTALE, `${p} is now a ${inode.type.toLowerCase()}, the kernel has it as a ${prev.type.toLowerCase()}`)
    }
    this.remember(p, inode)
    return inodeToStat(inode)
  }

  /**
   * A request on p found another type there than the kernel holds (by what
   * it was told last): the new type is remembered and the request answered
   * ESTALE, which makes the kernel redo it after a fresh lookup. Returns when
   * the kernel was not told otherwise (the caller answers as it would).
   */
  private staleType(p: string, now: Inode): void {
    const prev = this.reported.get(p)
    if (!prev || prev.type === now.type || this.openFileOf(prev.id)) return
    this.remember(p, now)
    fail(E.ESTALE, `${p} is now a ${now.type.toLowerCase()}, the kernel has it as a ${prev.type.toLowerCase()}`)
  }

  private remember(p: string, inode: { id: bigint; type: Inode['type'] }): void {
    const prev = this.reported.get(p)
    if (prev && prev.id === inode.id && prev.type === inode.type) return
    if (!prev && this.reported.size >= this.reportedMax) {
      // the oldest goes, unless it is a file or directory open here (its descriptors depend on it): then the next
      for (let i = 0; i < 8; i++) {
        const oldest = this.reported.entries().next()
        if (oldest.done) break
        const [k, v] = oldest.value
        this.reported.delete(k)
        if (i === 7 || !(v.type === 'Directory' ? this.openDirOf(v.id) : this.openFileOf(v.id))) break
        this.reported.set(k, v)
      }
    }
    this.reported.set(p, { id: inode.id, type: inode.type })
  }

  /**
   * Forgets what the kernel was told about p (and, with `tree`, everything
   * below it: a scan of the whole map, kept to rare calls): libfuse gives
   * those names new nodes. A path left behind below costs at most one ESTALE
   * round trip later, if another client puts something of another type there.
   */
  private forgetReported(p: string, tree = false): void {
    this.reported.delete(p)
    if (!tree) return
    const prefix = p === '/' ? '/' : p + '/'
    for (const k of this.reported.keys()) if (k.startsWith(prefix)) this.reported.delete(k)
  }

  /** Whether this mount has the directory open (opendir). */
  private openDirOf(id: bigint): boolean {
    for (const h of this.handles.values()) if (h.kind === 'dir' && h.id === id) return true
    return false
  }

  /** An open file handle of this inode (this mount's). */
  private openFileOf(id: bigint): FileHandle | undefined {
    for (const h of this.handles.values()) if (h.kind === 'file' && !h.fh.closed && h.fh.inodeId === id) return h.fh
    return undefined
  }

  /** The attributes of an open file's own inode (its name may name something else by now). */
  private async handleStat(fh: FileHandle, p?: string): Promise<FuseStat> {
    const hit = p === undefined ? undefined : this.cache.get(p)
    if (hit && hit.id === fh.inodeId && !this.writers.has(hit.id)) return inodeToStat(hit)
    try {
      return inodeToStat(await this.fs.fstat(fh))
    } catch (e) {
      // removed by another client and gone from meta: the file as last known, as fstat of an unlinked file
      if (e instanceof StrataError && e.code === 'META_NOT_FOUND') return inodeToStat(fh.inode)
      throw e
    }
  }

  /**
   * The kernel's GETATTR with a file handle (fstat of an open file, the size
   * check of a read past the cached end): the attributes of the handle's
   * own inode. The path may name something else by now: this mount follows
   * its own renames, but another client may have renamed or removed the
   * name, or put another file or a directory there.
   */
  async fgetattr(p: string, fd: number): Promise<FuseStat> {
    const h = fd === 0 ? undefined : this.handles.get(fd)
    if (!h || h.kind !== 'file') return this.getattr(p)
    // the kernel node of p is the open file's (libfuse asks this way right after a create, too)
    this.remember(p, h.fh.inode)
    return this.handleStat(h.fh, p)
  }

  async access(p: string, mode: number): Promise<void> {
    const st = await this.getattr(p, true)
    if (mode === fsc.F_OK) return
    if (mode & fsc.W_OK && this.ro) fail(E.EROFS)
    const uid = this.opts.uid
    const isDir = (st.mode & S_IFMT) === S_IFDIR
    if (uid === 0) {
      // root: rwx bypass, except execute needs some x bit on a non-directory
      if (mode & fsc.X_OK && !isDir && !(st.mode & 0o111)) fail(E.EACCES)
      return
    }
    const groups = new Set([this.opts.gid, ...(this.opts.groups ?? [])])
    const shift = st.uid === uid ? 6 : groups.has(st.gid) ? 3 : 0
    const bits = (st.mode >> shift) & 7
    if ((mode & 7 & ~bits) !== 0) fail(E.EACCES)
  }

  /** fd: the handle of opendir, which lists the directory it opened (by id), wherever it is now. */
  async readdir(p: string, fd = 0): Promise<{ names: string[]; stats: FuseStat[] }> {
    if (p === VIRT_ROOT) {
      const d = virtDirStat(0o555, VIRT_ROOT_INO)
      return { names: ['.', '..', 'rm-rf'], stats: [d, d, virtDirStat(0o777, RMRF_DIR_INO)] }
    }
    if (p === RMRF_DIR) {
      const d = virtDirStat(0o777, RMRF_DIR_INO)
      return { names: ['.', '..'], stats: [d, d] }
    }
    if (this.isVirtual(p)) fail(E.ENOENT)
    const h = fd ? this.handles.get(fd) : undefined
    const id = h?.kind === 'dir' ? h.id : undefined
    const { entries, inodes } =
      id === undefined ? await this.inHeldDir(p, (q) => this.fs.readdirAll(q, { status: true }), true) : await this.fs.readdirAll({ parent: id }, { status: true })
    const names = ['.', '..']
    const self = inodeToStat(id === undefined ? await this.lookup(p) : await this.fs.lstatAt({ parent: id }))
    const stats = [self, self]
    entries.forEach((e, i) => {
      // a real /3fs-virt (made by another client) is shadowed by the virtual one, as in 3FS's FUSE: listed once
      if (p === '/' && e.name === VIRT_DIR) return
      const inode = inodes[i]
      names.push(e.name)
      if (inode) {
        const child = childOf(p, e.name)
        if (!this.writers.has(inode.id)) this.cache.set(child, inode)
        stats.push(inodeToStat(inode))
      } else {
        stats.push({ ...self, ...inoFields(e.id), mode: e.type === 'Directory' ? S_IFDIR | 0o755 : e.type === 'Symlink' ? S_IFLNK | 0o777 : S_IFREG | 0o644 })
      }
    })
    if (p === '/') {
      names.push(VIRT_DIR)
      stats.push(virtDirStat(0o555, VIRT_ROOT_INO))
    }
    return { names, stats }
  }

  /**
   * OPENDIR names a node the kernel holds: the directory it was told is there (heldDir), opened
   * by id, wherever another client moved it since (gone: ESTALE, and open(2) looks the name up
   * again). A path the daemon has no record of is looked up by name.
   */
  async opendir(p: string): Promise<number> {
    if (this.isVirtual(p)) {
      this.virtualStat(p)
      return this.addHandle({ kind: 'dir', path: p, id: p === VIRT_ROOT ? VIRT_ROOT_INO : RMRF_DIR_INO })
    }
    const held = this.heldDir(p)
    if (held !== undefined) return this.addHandle({ kind: 'dir', path: p, id: (await this.heldDirInode(p, held)).id })
    const inode = await this.lookup(p)
    if (inode.type !== 'Directory') {
      // the kernel holds a directory that another client replaced: ESTALE has it look the name up again
      this.staleType(p, inode)
      fail(E.ENOTDIR)
    }
    return this.addHandle({ kind: 'dir', path: p, id: inode.id })
  }

  async mkdir(p: string, mode: number): Promise<void> {
    if (this.isVirtual(p)) fail(E.EPERM)
    this.checkWritable()
    this.cache.invalidate(p)
    this.forgetReported(p)
    const inode = await this.inHeldDir(p, (q) => this.fs.mkdir(q, { mode: mode & 0o7777 }))
    this.cache.set(p, inode)
  }

  async rmdir(p: string): Promise<void> {
    if (this.dropped(p)) return this.forgetReported(p, true)
    if (this.isVirtual(p)) fail(E.EPERM)
    this.checkWritable()
    try {
      await this.inHeldDir(p, (q) => this.fs.rmdir(q)).catch(async (e: unknown) => {
        if (errnoOf(e) === E.ENOTEMPTY && (await this.onlyHiddenOpenHere(p)) && this.rmdirRetries.first(p)) {
          fail(E.ESTALE, `${p}: only names of files unlinked while open here are left; their release may be queued behind this rmdir`)
        }
        this.rmdirRetries.done(p)
        throw e
      })
      this.rmdirRetries.done(p)
      this.forgetReported(p)
    } finally {
      this.cache.invalidateTree(p)
    }
  }

  /** Whether directory p holds nothing but `.fuse_hidden…` names of files this mount has open. */
  private async onlyHiddenOpenHere(p: string): Promise<boolean> {
    const { entries } = await this.inHeldDir(p, (q) => this.fs.readdirAll(q), true).catch(() => ({ entries: [] }))
    if (!entries.length || !entries.every((e) => isHiddenName(e.name))) return false
    const open = new Set<bigint>()
    for (const h of this.handles.values()) if (h.kind === 'file') open.add(h.fh.inodeId)
    return entries.every((e) => open.has(e.id))
  }

  async unlink(p: string): Promise<void> {
    if (parentOf(p) === RMRF_DIR) {
      // the link of a finished recursive remove: nothing to do but forget it
      this.rmrfLinks.delete(p)
      return
    }
    if (this.dropped(p)) return this.forgetReported(p, true)
    if (this.isVirtual(p)) fail(E.EPERM)
    this.checkWritable()
    const known = this.cache.get(p)
    try {
      await this.inHeldDir(p, (q) => this.fs.unlink(q))
      this.forgetReported(p)
    } finally {
      // a non-directory: nothing below it; other names of the inode lose a link
      this.cache.invalidate(p)
      if (known) this.cache.invalidateInode(known.id)
    }
  }

  async rename(src: string, dest: string): Promise<void> {
    // libfuse 2 "unlinks" a file open on this mount by renaming it to .fuse_hidden…
    if (this.dropped(src)) return this.movedReported(src, dest)
    if (this.isVirtual(src) || this.isVirtual(dest)) fail(E.EPERM)
    this.checkWritable()
    const replaced = this.cache.get(dest)
    try {
      await this.inHeldDirs([src, dest], (s, d) => this.fs.rename(s!, d!))
      this.movedReported(src, dest)
    } finally {
      this.cache.invalidateTree(src)
      this.cache.invalidateTree(dest)
      if (replaced) this.cache.invalidateInode(replaced.id)
    }
  }

  /** libfuse moved the node of src (and the nodes below it) to dest; dest's own nodes are gone. */
  private movedReported(src: string, dest: string): void {
    const node = this.reported.get(src)
    this.reported.delete(src)
    this.reported.delete(dest)
    if (node?.type === 'Directory') {
      // the names below a directory move with it (one scan of the map, for directories only)
      const moved: [string, { id: bigint; type: Inode['type'] }][] = []
      for (const [k, v] of this.reported) if (k.startsWith(src + '/')) moved.push([dest + k.slice(src.length), v])
      for (const [k] of moved) this.reported.delete(src + k.slice(dest.length))
      for (const [k, v] of moved) this.reported.set(k, v)
    }
    if (node) this.remember(dest, node)
  }

  /**
   * link(2). The kernel checks that the new name's answer has the type it
   * holds for the source, and fails a link that was made with EIO when it
   * differs (another client put a symlink where it had a file, or the
   * reverse). Such a link is undone and answered ESTALE, which makes the
   * kernel look the source up again (LOOKUP_REVAL: its fresh type) and send
   * the link once more.
   */
  async link(src: string, dest: string): Promise<void> {
    if (this.isVirtual(src) || this.isVirtual(dest)) fail(E.EPERM)
    this.checkWritable()
    this.forgetReported(dest)
    const expected = this.reported.get(src)
    const inode = await this.inHeldDirs([src, dest], (s, d) => this.fs.link(s!, d!))
    this.cache.invalidateInode(inode.id)
    this.cache.invalidate(src)
    this.cache.invalidate(dest)
    if (expected && expected.type !== inode.type) {
      await this.inHeldDir(dest, (q) => this.fs.unlink(q)).catch((e: unknown) => this.log.warn('link: could not undo a link the kernel would refuse', { path: dest, err: toStrataError(e) }))
      this.cache.invalidateInode(inode.id)
      this.cache.invalidate(dest)
      this.remember(src, inode)
      fail(E.ESTALE, `${src} is now a ${inode.type.toLowerCase()}, the kernel has it as a ${expected.type.toLowerCase()}`)
    }
  }

  async symlink(target: string, p: string): Promise<void> {
    if (parentOf(p) === RMRF_DIR) return this.rmrf(target, p)
    if (this.isVirtual(p)) fail(E.EPERM)
    this.checkWritable()
    this.cache.invalidate(p)
    this.forgetReported(p)
    const inode = await this.inHeldDir(p, (q) => this.fs.symlink(target, q))
    this.cache.set(p, inode)
  }

  async readlink(p: string): Promise<string> {
    if (parentOf(p) === RMRF_DIR) {
      const link = this.rmrfLinks.get(p)
      if (link) return link.target
      fail(E.ENOENT)
    }
    if (this.isVirtual(p)) fail(E.EINVAL)
    const hit = this.cache.get(p)
    if (hit?.type === 'Symlink' && hit.symlink) return hit.symlink.target
    return this.inHeldDir(p, (q) => this.fs.readlink(q))
  }

  /** chmod/chown/utimens on the path's own inode (the kernel already resolved symlinks; lchown/lutimes act on links). */
  async setattr(p: string, attrs: { perm?: number; uid?: number; gid?: number; atime?: number; mtime?: number }): Promise<void> {
    if (this.isVirtual(p)) fail(E.EPERM)
    this.checkWritable()
    if (Object.keys(attrs).length === 0) return
    const known = this.cache.get(p)
    if ((attrs.atime !== undefined || attrs.mtime !== undefined) && this.writers.size > 0) {
      // a file written through this mount: its buffered writes land first, and do not set the mtime back at close
      await this.fs.settleWritesBeforeTimes(known?.id ?? (await this.inHeldDir(p, (q) => this.fs.lstat(q), true)).id)
    }
    this.cache.invalidate(p)
    const rsp = await this.inHeldDir(p, (q) => this.fs.meta.setAttr({ path: pathAt(q), flags: { followLastSymlink: false }, ...attrs }), true)
    this.cache.invalidateInode(rsp.stat.id)
    if (known) this.cache.invalidateInode(known.id)
    if (!this.writers.has(rsp.stat.id)) this.cache.set(p, rsp.stat)
  }

  async truncate(p: string, size: number): Promise<void> {
    if (this.isVirtual(p)) fail(E.EPERM)
    this.checkWritable()
    this.cache.invalidate(p)
    const inode = await this.inHeldDir(p, (q) => this.fs.lstat(q))
    if (inode.type === 'Directory') fail(E.EISDIR)
    if (inode.type !== 'File') fail(E.EINVAL)
    // past the maximum size: EFBIG before any open (the file client checks again)
    if (inode.file) checkFileSize(size, inode.file.layout.chunkSize, 'truncate to')
    // an O_TRUNC open arrives as open + truncate(path): use the open handle (same session, same write state)
    const fh = this.writableHandleOf(inode.id)
    if (fh) await this.fs.ftruncate(fh, size)
    else await this.inHeldDir(p, (q) => this.fs.truncate(q, size))
    this.cache.invalidateInode(inode.id)
    this.dropReadAhead(inode.id)
  }

  async ftruncate(p: string, fd: number, size: number): Promise<void> {
    this.checkWritable()
    const fh = this.file(fd)
    const w = fh.writable ? fh : this.writableHandleOf(fh.inodeId)
    if (w) await this.fs.ftruncate(w, size)
    else await this.inHeldDir(p, (q) => this.fs.truncate(q, size), true)
    this.cache.invalidateInode(fh.inodeId)
    this.dropReadAhead(fh.inodeId)
  }

  async mknod(p: string, mode: number): Promise<void> {
    if ((mode & S_IFMT) !== S_IFREG && (mode & S_IFMT) !== 0) fail(E.ENOSYS, 'only regular files can be made with mknod')
    if (this.isVirtual(p)) fail(E.EPERM)
    this.checkWritable()
    this.cache.invalidate(p)
    this.forgetReported(p)
    const fh = await this.inHeldDir(p, (q) => this.fs.open(q, { access: 'r', create: true, excl: true }, mode & 0o7777))
    await this.fs.close(fh)
  }

  // --- files

  async create(p: string, mode: number): Promise<number> {
    if (this.isVirtual(p)) fail(E.EPERM)
    this.checkWritable()
    this.cache.invalidate(p)
    this.forgetReported(p)
    // fuse-native does not pass the open flags of a create: the kernel only
    // sends it after a negative lookup, so a plain O_CREAT open is assumed
    const fh = await this.inHeldDir(p, (q) => this.fs.open(q, { access: 'rw', create: true }, mode & 0o7777))
    return this.addHandle({ kind: 'file', fh, path: p })
  }

  async open(p: string, flags: number): Promise<number> {
    if (this.isVirtual(p)) fail(this.isVirtualDir(p) ? E.EISDIR : E.ENOENT)
    const acc = flags & O_ACCMODE
    if (this.ro && (acc !== fsc.O_RDONLY || flags & fsc.O_TRUNC)) fail(E.EROFS)
    let fh: FileHandle
    try {
      fh = await this.inHeldDir(p, (q) => this.fs.open(q, flags & (O_ACCMODE | fsc.O_APPEND | fsc.O_TRUNC)))
    } catch (e) {
      // the kernel holds a file where another client put a directory: ESTALE has it look the name up
      // again (open(2) retries with LOOKUP_REVAL) and open the directory
      if (e instanceof StrataError && e.code === 'META_IS_DIRECTORY' && this.reported.get(p)?.type !== 'Directory') {
        const now = await this.inHeldDir(p, (q) => this.fs.lstat(q), true).catch(() => null)
        if (now) this.staleType(p, now)
      }
      throw e
    }
    return this.addHandle({ kind: 'file', fh, path: p })
  }

  private isVirtualDir(p: string): boolean {
    return p === VIRT_ROOT || p === RMRF_DIR
  }

  /** close(2) of one descriptor: 3FS flush = fsync (write buffer to storage, exact length to meta). */
  async flush(fd: number): Promise<void> {
    const fh = this.file(fd)
    if (!fh.writable) return
    await this.fs.fsync(fh)
    this.cache.invalidateInode(fh.inodeId)
  }

  async fsync(fd: number): Promise<void> {
    const fh = this.file(fd)
    await this.fs.fsync(fh)
    this.cache.invalidateInode(fh.inodeId)
  }

  /** Last close of an open file: flush, end the write session (meta close with length). */
  async release(fd: number): Promise<void> {
    const h = this.dropHandle(fd)
    if (!h || h.kind !== 'file') return
    await this.fs.close(h.fh)
  }

  // --- 3fs-virt/rm-rf

  private async rmrf(target: string, linkPath: string): Promise<void> {
    this.checkWritable()
    if (!path.posix.isAbsolute(target)) fail(E.EINVAL, 'rm-rf: the link target must be an absolute path on this mount')
    const t = path.posix.normalize(target).replace(/\/+$/, '') || '/'
    if (t !== this.mnt && !t.startsWith(this.mnt + '/')) fail(E.EINVAL, `rm-rf: ${target} is not on this mount (${this.mnt})`)
    const inner = t.slice(this.mnt.length) || '/'
    if (inner === '/' || this.isVirtual(inner)) fail(E.EPERM, `rm-rf: refusing to remove ${target}`)
    this.log.info('recursive remove', { path: inner, link: linkPath })
    // the name as the kernel will send it: symlinks in the middle resolved, the last component kept
    let kernelPath = inner
    if (this.opts.kernelInvalidate) {
      const dir = await this.fs.realpath(path.posix.dirname(inner)).catch(() => null)
      if (dir !== null) kernelPath = path.posix.join(dir, path.posix.basename(inner))
    }
    try {
      await this.fs.rm(inner, { recursive: true })
    } finally {
      this.cache.invalidateTree(inner)
      this.cache.invalidateTree(kernelPath)
      // the kernel's names of the tree die here too; forgotten only when the kernel's drop came
      // back through rmdir (a name it still had cached), every path of the tree stayed behind
      // until pushed out at reportedPathsMax
      this.forgetReported(inner, true)
      this.forgetReported(kernelPath, true)
    }
    if (this.opts.kernelInvalidate) await this.dropFromKernel(kernelPath)
    this.counters.rmrf++
    this.rmrfLinks.set(linkPath, { target, until: performance.now() + this.rmrfTtlMs })
    const timer = setTimeout(() => {
      const l = this.rmrfLinks.get(linkPath)
      if (l && l.until <= performance.now()) this.rmrfLinks.delete(linkPath)
    }, this.rmrfTtlMs + 10)
    timer.unref()
  }

  /**
   * The daemon, once mounted: the st_dev of its FUSE mount (the connection's
   * 0:N). The kernel-cache drop after an rm-rf removes a name only in a
   * directory on that device; null (not mounted, or a test) turns it off.
   */
  setMountDevice(dev: bigint | null): void {
    this.mountDev = dev
  }

  /** A removal of `p` the kernel asks for while dropping it: already done. */
  private dropped(p: string): boolean {
    if (!this.dropping.has(p)) return false
    this.cache.invalidateTree(p)
    return true
  }

  /**
   * The kernel keeps a removed path's dentry and attributes for the entry/attr
   * timeouts, and fuse-native's high-level API cannot send notify_inval_entry
   * (it needs libfuse's node ids, which only libfuse knows). An rmdir (or
   * unlink) of the path through the mount does the same: the kernel sends it
   * here if it still has the name cached (answered at once, see dropped), and
   * on success drops the dentry; a name it does not have is looked up, found
   * missing and never reaches these ops. Runs in libuv's threadpool, so the
   * event loop stays free to answer the request it causes.
   *
   * The kernel follows symlinks by host paths, not DFS paths: a DFS symlink in
   * the directory part (say to /tmp) would lead an rmdir by path off the mount
   * onto a host file. So the parent directory is opened first and used only if
   * it is on this mount (its st_dev is the one recorded when the daemon
   * mounted, setMountDevice: a lazily detached or covered mount point is a
   * host directory by then), and the name is removed
   * through that open directory (/proc/self/fd/N/name), which no later rename
   * or symlink can redirect.
   */
  private async dropFromKernel(p: string): Promise<void> {
    const base = path.posix.basename(p)
    const mntDev = this.mountDev
    if (!base || base === '.' || base === '..' || mntDev === null) return
    this.dropping.set(p, (this.dropping.get(p) ?? 0) + 1)
    let dir: fsp.FileHandle | null = null
    try {
      // compared with the device recorded at mount time, not with a fresh stat of the mount point:
      // once the mount is lazily detached (a stop with files open) or covered by another mount,
      // that path is a host directory, and a stat of it would vouch for a host file of the same name
      dir = await fsp.open(this.mnt + path.posix.dirname(p), fsc.O_RDONLY | fsc.O_DIRECTORY)
      if ((await dir.stat({ bigint: true })).dev !== mntDev) {
        this.log.warn('rm-rf: the removed path does not lead into this FUSE mount (a symlink off it, or the mount point is detached or covered); the kernel keeps its cached name until the timeouts', { path: p })
        return
      }
      const full = `/proc/self/fd/${dir.fd}/${base}`
      await fsp.rmdir(full).catch(async (e: NodeJS.ErrnoException) => {
        if (e.code === 'ENOTDIR') await fsp.unlink(full)
        else throw e
      })
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code
      if (code !== 'ENOENT') this.log.debug('rm-rf: could not drop the kernel name', { path: p, code })
    } finally {
      await dir?.close().catch(() => {})
      const n = (this.dropping.get(p) ?? 1) - 1
      if (n > 0) this.dropping.set(p, n)
      else this.dropping.delete(p)
    }
  }

  // --- xattrs (3FS: only hf3fs.lock on directories)

  private async xattrTarget(p: string): Promise<Inode> {
    if (this.isVirtual(p)) fail(E.ENOTSUP)
    const inode = await this.inHeldDir(p, (q) => this.fs.lstat(q), true)
    if (!this.writers.has(inode.id)) this.cache.set(p, inode)
    return inode
  }

  async setxattr(p: string, name: string, value: Buffer): Promise<void> {
    // a set is a change like any other, and hf3fs.lock in particular blocks every other
    // client's creates/removes/renames in the directory (and outlives this mount)
    this.checkWritable()
    // 3FS: only the hf3fs namespace, and of it only hf3fs.lock, and only on directories
    if (name !== LOCK_XATTR) fail(E.ENOTSUP)
    const inode = await this.xattrTarget(p)
    if (inode.type !== 'Directory') fail(E.ENOTSUP)
    const action = value.toString('utf8').replace(/[\0\s]+$/, '') as LockAction
    if (!LOCK_ACTIONS.includes(action)) fail(E.EINVAL, `hf3fs.lock: ${action} is not one of ${LOCK_ACTIONS.join(', ')}`)
    await this.fs.meta.lockDirectory({ inode: inode.id, action })
    this.cache.invalidateInode(inode.id)
  }

  async getxattr(p: string, name: string): Promise<Buffer | null> {
    if (name !== LOCK_XATTR) {
      if (name.startsWith('hf3fs.')) fail(E.ENOTSUP)
      // answered without a lookup: the kernel asks for security.capability before every write
      fail(E.ENODATA)
    }
    const inode = await this.xattrTarget(p)
    if (inode.type === 'Symlink') fail(E.ENOTSUP)
    const lock = inode.type === 'Directory' ? inode.directory?.lock : null
    if (!lock) fail(E.ENODATA)
    return Buffer.from(JSON.stringify(lock))
  }

  async listxattr(p: string): Promise<string[]> {
    const inode = await this.xattrTarget(p)
    if (inode.type === 'Symlink') fail(E.ENOTSUP)
    return inode.type === 'Directory' && inode.directory?.lock ? [LOCK_XATTR] : []
  }

  async removexattr(p: string, name: string): Promise<void> {
    if (this.isVirtual(p)) fail(E.EPERM)
    // clearing a directory lock (someone else's, too) is a change
    this.checkWritable()
    if (name !== LOCK_XATTR) fail(E.ENOTSUP)
    const inode = await this.xattrTarget(p)
    if (inode.type === 'Symlink') fail(E.EPERM)
    if (inode.type !== 'Directory') fail(E.ENOTDIR)
    await this.fs.meta.lockDirectory({ inode: inode.id, action: 'clear' })
    this.cache.invalidateInode(inode.id)
  }

  /** For tests and logs: the handle table size. */
  get openHandleCount(): number {
    return this.handles.size
  }
}

