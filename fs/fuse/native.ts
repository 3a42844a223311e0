// Loader and types of fuse-native (path-based libfuse 2.9 bindings). Its
// JavaScript runs on Strata's own build of its addon (build/Release/
// fuse_native.node from native/fuse: fuse-native's C with a fix for thread
// churn, see the top of native/fuse/fuse-native.c), handed over in place of
// the prebuilt one that node-gyp-build would load. Only what Strata uses is
// typed here.
//
// fuse-native facts the daemon depends on (checked against 2.2.6):
//  - options are only passed when truthy: a 0 timeout cannot be given (FUSE2
//    then uses 1 s), so "no caching" is 0.001;
//  - every callback has a 15 s timeout unless `timeout: false`;
//  - the option string is joined verbatim, so libfuse options fuse-native
//    does not know (big_writes, max_write, negative_timeout, …) ride along in
//    `fsname` after a comma;
//  - the FUSE request context (caller uid/gid/pid) is not exposed;
//  - create() receives no open flags;
//  - times cross as one number each; Strata's build of the addon gives that
//    number its own meaning (times.ts);
//  - Fuse.unmount runs `fusermount -uz`, which Debian's fuse3 does not ship
//    (it has fusermount3), so the daemon unmounts by itself;
//  - its fgetattr (fstat of an open file) called ops.getattr(path) and
//    dropped the file handle: requireWithOwnAddon() replaces it with one
//    that calls ops.fgetattr(path, fd) (withFgetattr);
//  - getattr could not tell the kernel's GETATTR of a node it holds from its
//    LOOKUP of a name, and readdir got no directory handle: Strata's build
//    of the addon passes both (its change 8), and withNodeOps hands them to
//    ops.getattr(path, cb, ofNode) and ops.readdir(path, cb, fd); a LOOKUP's
//    getattr may answer cb(err, stat, detachAs) to have libfuse move the
//    node it keeps for that name out of the way (change 9).

import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { createRequire } from 'node:module'
import { StrataError } from '../common/errors.js'

export interface FuseStat {
  mode: number
  uid: number
  gid: number
  size: number
  dev?: number
  nlink: number
  ino?: number
  rdev?: number
  blksize?: number
  blocks?: number
  /** wire times (times.ts: µs since the epoch + 2^52), which Strata's build of the addon decodes */
  atime: number
  mtime: number
  ctime: number
}

export interface FuseStatfs {
  bsize: number
  frsize: number
  blocks: number
  bfree: number
  bavail: number
  files: number
  ffree: number
  favail: number
  fsid: number
  flag: number
  namemax: number
}

type Cb0 = (err: number) => void
type Cb1<T> = (err: number, v?: T) => void

/** The operations object fuse-native calls; every callback's first argument is 0 or a negative errno (read/write: bytes or negative errno). */
export interface FuseOperations {
  init?(cb: Cb0): void
  access?(path: string, mode: number, cb: Cb0): void
  statfs?(path: string, cb: Cb1<FuseStatfs>): void
  /**
   * ofNode: the kernel asks about a node it holds (GETATTR, …), not about a name (LOOKUP, …).
   * detachAs (a LOOKUP only): libfuse moves the node it has for this name to /detachAs before the
   * answer reaches the kernel, and the next LOOKUP of the name gets a new node (the addon's change 9)
   */
  getattr?(path: string, cb: (err: number, v?: FuseStat, detachAs?: string) => void, ofNode?: boolean): void
  fgetattr?(path: string, fd: number, cb: Cb1<FuseStat>): void
  flush?(path: string, fd: number, cb: Cb0): void
  fsync?(path: string, datasync: number, fd: number, cb: Cb0): void
  fsyncdir?(path: string, datasync: number, fd: number, cb: Cb0): void
  /** fd: the handle opendir returned (0: none) */
  readdir?(path: string, cb: (err: number, names?: string[], stats?: FuseStat[]) => void, fd?: number): void
  truncate?(path: string, size: number, cb: Cb0): void
  ftruncate?(path: string, fd: number, size: number, cb: Cb0): void
  utimens?(path: string, atime: number, mtime: number, cb: Cb0): void
  readlink?(path: string, cb: Cb1<string>): void
  chown?(path: string, uid: number, gid: number, cb: Cb0): void
  chmod?(path: string, mode: number, cb: Cb0): void
  mknod?(path: string, mode: number, dev: number, cb: Cb0): void
  setxattr?(path: string, name: string, value: Buffer, position: number, flags: number, cb: Cb0): void
  getxattr?(path: string, name: string, position: number, cb: Cb1<Buffer | null>): void
  listxattr?(path: string, cb: Cb1<string[]>): void
  removexattr?(path: string, name: string, cb: Cb0): void
  open?(path: string, flags: number, cb: Cb1<number>): void
  opendir?(path: string, flags: number, cb: Cb1<number>): void
  read?(path: string, fd: number, buf: Buffer, len: number, pos: number, cb: (res: number) => void): void
  write?(path: string, fd: number, buf: Buffer, len: number, pos: number, cb: (res: number) => void): void
  release?(path: string, fd: number, cb: Cb0): void
  releasedir?(path: string, fd: number, cb: Cb0): void
  create?(path: string, mode: number, cb: Cb1<number>): void
  unlink?(path: string, cb: Cb0): void
  rename?(src: string, dest: string, cb: Cb0): void
  link?(src: string, dest: string, cb: Cb0): void
  symlink?(target: string, path: string, cb: Cb0): void
  mkdir?(path: string, mode: number, cb: Cb0): void
  rmdir?(path: string, cb: Cb0): void
}

export interface FuseOptions {
  /** ms per callback, or false for none */
  timeout?: number | false
  debug?: boolean
  allowOther?: boolean
  allowRoot?: boolean
  defaultPermissions?: boolean
  maxRead?: number
  fsname?: string
  subtype?: string
  kernelCache?: boolean
  autoCache?: boolean
  entryTimeout?: number
  attrTimeout?: number
  acAttrTimeout?: number
  mkdir?: boolean
  force?: boolean
}

export interface FuseInstance {
  readonly mnt: string
  mount(cb: (err: Error | null) => void): void
  /** fuse-native internal: one thread-locals block per libfuse worker thread it was handed (each holds a uv_async handle) */
  readonly _threads?: Set<Buffer>
  /** fuse-native internal: the mount's native state (fuse_thread_t), once mounted */
  readonly _thread?: Buffer | null
}

export interface FuseConstructor {
  new (mnt: string, ops: FuseOperations, opts?: FuseOptions): FuseInstance
  [errno: string]: unknown
}

let loaded: FuseConstructor | null = null
let loadError: Error | null = null
let binding: unknown = null

/** Strata's build of the addon (its strata_* functions), once loadFuse() succeeded; null before. */
export function fuseBinding(): unknown {
  return binding
}

/** fuse-native's Fuse class; throws NOT_IMPLEMENTED when the addon or libfuse.so.2 is missing. */
export function loadFuse(): FuseConstructor {
  if (loaded) return loaded
  if (loadError) throw new StrataError('NOT_IMPLEMENTED', `fuse-native cannot be loaded: ${loadError.message} (Debian needs libfuse2; run scripts/setup.sh)`)
  try {
    loaded = requireWithOwnAddon()
    return loaded
  } catch (e) {
    loadError = e as Error
    throw new StrataError('NOT_IMPLEMENTED', `fuse-native cannot be loaded: ${loadError.message} (Debian needs libfuse2; run scripts/setup.sh)`, { cause: e })
  }
}

/**
 * Loads fuse-native's JavaScript with build/Release/fuse_native.node as its
 * binding. fuse-native asks node-gyp-build for its addon when its module is
 * first evaluated; for that one moment the cached node-gyp-build module
 * answers for fuse-native's directory with Strata's build (require.cache
 * entries are replaceable by design), then goes back to itself.
 */
function requireWithOwnAddon(): FuseConstructor {
  const req = createRequire(import.meta.url)
  // dist/fs/fuse/native.js → repo root is three levels up
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
  const addon = req(path.join(root, 'build/Release/fuse_native.node')) as unknown
  const fuseDir = path.dirname(req.resolve('fuse-native/package.json'))
  const ngbPath = req.resolve('node-gyp-build', { paths: [fuseDir] })
  req(ngbPath)
  const cached = req.cache[ngbPath]
  if (!cached) throw new Error(`node-gyp-build is not in the module cache after loading ${ngbPath}`)
  const real = cached.exports as (dir: string) => unknown
  cached.exports = Object.assign((dir: string) => (path.resolve(dir) === fuseDir ? addon : real(dir)), real)
  try {
    const Fuse = req('fuse-native') as FuseConstructor
    withFgetattr(Fuse)
    withNodeOps(Fuse)
    binding = addon
    return Fuse
  } finally {
    cached.exports = real
  }
}

type OpSignal = (err: number, ...rest: unknown[]) => void
interface FuseInternals {
  ops: FuseOperations
  _op_getattr(signal: OpSignal, path: string, ofNode?: boolean): void
  _op_fgetattr(signal: OpSignal, path: string, fd: number): void
  _op_readdir(signal: OpSignal, path: string, fd?: number): void
}

/**
 * fuse-native 2.2.6 answers fgetattr (the kernel's GETATTR with a file
 * handle: fstat(2) of an open file, and the size check of a read past the
 * cached end) with ops.getattr(path), the handle dropped. A path-based
 * getattr is wrong for an open file whose name another client renamed or
 * removed: fstat gave ENOENT, or the attributes of whatever now has the name
 * (its st_ino, its size, which the kernel then applied to the open file),
 * and a directory there made the kernel mark the open file bad, so every
 * later write and the close failed with EIO. This passes the handle on to
 * ops.fgetattr (when the daemon has one; libfuse passes handle 0 when the
 * kernel sends none), reusing fuse-native's own getattr answer path.
 */
function withFgetattr(Fuse: FuseConstructor): void {
  const proto = (Fuse as unknown as { prototype: FuseInternals }).prototype
  const byPath = proto._op_getattr
  proto._op_fgetattr = function (this: FuseInternals, signal: OpSignal, p: string, fd: number) {
    const fgetattr = this.ops.fgetattr
    if (!fgetattr) return byPath.call(this, signal, p)
    const ops: FuseOperations = { getattr: (gp, cb) => fgetattr.call(this.ops, gp, fd, cb) }
    return byPath.call(Object.create(this, { ops: { value: ops } }) as FuseInternals, signal, p)
  }
}

/**
 * fuse-native 2.2.6 calls ops.getattr(path) and ops.readdir(path): Strata's
 * build of the addon also says whether a getattr is about a node the kernel
 * holds (its GETATTR) or a name (its LOOKUP), and passes readdir the handle
 * of opendir. A directory held open (a working directory, an opendir
 * descriptor) is then answered for as the directory it was opened as, not
 * whatever another client has put at its old name since (fs/fuse/ops.ts).
 * fuse-native's own answer paths (stat arrays, readdir's empty defaults)
 * are kept.
 */
function withNodeOps(Fuse: FuseConstructor): void {
  const proto = (Fuse as unknown as { prototype: FuseInternals }).prototype
  const getattr = proto._op_getattr
  proto._op_getattr = function (this: FuseInternals, signal: OpSignal, p: string, ofNode?: boolean) {
    const own = this.ops.getattr
    if (!own) return getattr.call(this, signal, p)
    // a LOOKUP's answer may name where libfuse is to move the node of that name first (the addon's change 9)
    let detachAs: string | undefined
    const ops: FuseOperations = {
      getattr: (gp, cb) =>
        own.call(
          this.ops,
          gp,
          (err, st, as) => {
            detachAs = as
            cb(err, st)
          },
          !!ofNode,
        ),
    }
    const sig: OpSignal = (err, ...rest) => (detachAs === undefined ? signal(err, ...rest) : signal(err, ...rest, detachAs))
    return getattr.call(Object.create(this, { ops: { value: ops } }) as FuseInternals, sig, p)
  }
  const readdir = proto._op_readdir
  proto._op_readdir = function (this: FuseInternals, signal: OpSignal, p: string, fd?: number) {
    const own = this.ops.readdir
    if (!own || !fd) return readdir.call(this, signal, p)
    const ops: FuseOperations = { readdir: (rp, cb) => own.call(this.ops, rp, cb, fd) }
    return readdir.call(Object.create(this, { ops: { value: ops } }) as FuseInternals, signal, p)
  }
}

/**
 * The addon's check whether libfuse has yet to move a node a LOOKUP's answer named a new name for
 * (change 9), for a mounted instance; null when the addon has none.
 */
export function nodeMoves(fuse: FuseInstance): ((as: string) => boolean) | null {
  const b = binding as { strata_detach_pending?: (ft: Buffer, as: string) => boolean } | null
  const ft = fuse._thread
  if (!b || typeof b.strata_detach_pending !== 'function' || !Buffer.isBuffer(ft)) return null
  const pending = b.strata_detach_pending
  return (as) => pending(ft, as)
}

/** Is fuse-native usable here (addon, libfuse.so.2 and /dev/fuse)? */
export function fuseAvailable(): { ok: true } | { ok: false; reason: string } {
  try {
    loadFuse()
  } catch (e) {
    return { ok: false, reason: (e as Error).message }
  }
  return { ok: true }
}

let errnoTable: Record<string, number> | null = null

/** fuse-native's negative errno constants by name ({} when it cannot be loaded). */
export function fuseErrnoTable(): Record<string, number> {
  if (errnoTable) return errnoTable
  const t: Record<string, number> = {}
  try {
    const F = loadFuse() as unknown as Record<string, unknown>
    for (const [k, v] of Object.entries(F)) if (/^E[A-Z0-9]+$/.test(k) && typeof v === 'number') t[k] = v
  } catch {
    // Node's table is the fallback in errno.ts
  }
  errnoTable = t
  return t
}
