// Safe streaming unpack of one OCI layer tar into a directory.
//
// Rules (README.md): names are relative (an absolute name is refused, a
// leading `./` is dropped) and `..` may not climb out of the root; no entry is ever written through a
// symlink (parents are checked with lstat, files are created O_EXCL|O_NOFOLLOW);
// hard links point at an earlier entry of the layer (or, when applying, at an
// existing non-directory); a path may appear once per layer, except a directory,
// whose entries merge (the later entry's attributes win, as tar -x does). Ownership, modes (setuid/sticky included),
// xattrs and nanosecond mtimes are kept; directory times are set last.
//
// System calls run synchronously on the calling thread, file data included:
// each takes microseconds on a local disk (data goes to the page cache),
// while a thread pool round trip per call made unpacking several times
// slower on a loaded machine. File data is written as it arrives, whatever
// has arrived in one writev: a small file usually takes open, writev,
// fchown, fchmod and close. Only reading the input waits. A sparse file's
// holes are not written (a tar of a few KiB may hold terabytes of them).
import fs from 'node:fs'
import type { Readable } from 'node:stream'
import { StrataError } from '../../../fs/common/errors.js'
import { native } from '../../../fs/common/native.js'
import { clearXattrs, fsError, lstatOrNull, setTimes, setXattrs, sys, timesOf } from './fs-ops.js'
import { badHardlink, checkRepeat, classifyEntry, dup, hardlinkThroughSymlink, whiteoutOver, type Seen } from './entry-rules.js'
import { ancestorsOf, joinRel, normalizeEntryPath, parentOf } from './paths.js'
import { TarReader, type TarEntryHeader } from './tar-reader.js'
import { SPARSE_HOLE_CAP, blockSlack, checkSparseHoles } from './tar-sparse.js'
import type { Timespec, UnpackOptions, UnpackStats } from './types.js'

const S_IFCHR = 0o020000
const S_IFBLK = 0o060000
const S_IFIFO = 0o010000
const OPAQUE_XATTR = 'trusted.overlay.opaque'
const IMPLICIT_DIR_MODE = 0o755
const CREATE_FLAGS = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW


/** What is left of `bufs` after the first `n` bytes were written. */
function dropWritten(bufs: Buffer[], n: number): Buffer[] {
  let i = 0
  while (i < bufs.length && n >= bufs[i]!.length) n -= bufs[i++]!.length
  if (i === bufs.length) return []
  const rest = bufs.slice(i)
  if (n > 0) rest[0] = rest[0]!.subarray(n)
  return rest
}

/** Writes all of `bufs` at `pos` (synchronously), retrying short writes. */
function writeAllSync(fd: number, bufs: Buffer[], pos: number): void {
  while (bufs.length > 0) {
    const n = bufs.length === 1 ? fs.writeSync(fd, bufs[0]!, 0, bufs[0]!.length, pos) : fs.writevSync(fd, bufs, pos)
    bufs = dropWritten(bufs, n)
    pos += n
  }
}

/** A write or truncate to a size the work dir's file system cannot hold says so (it is IO_ERROR "File too large"). */
function tooLarge(e: unknown, rel: string, size: number): StrataError {
  const what = `writing ${JSON.stringify(rel)}`
  if ((e as NodeJS.ErrnoException)?.code !== 'EFBIG') return fsError(e, what)
  return new StrataError(
    'IO_ERROR',
    `${what}: ${(e as Error).message} (a file of ${size} bytes, the size the layer gives it, is more than the file system of the work directory holds: ` +
      'import without --squash and --compress, which keeps holes without unpacking, or give --work-dir on another file system)',
    { cause: e },
  )
}

class Unpacker {
  readonly seen = new Map<string, Seen>()
  /** Directories verified to be real directories (not symlinks) in this run; their ancestors were verified first. */
  readonly dirOk = new Set<string>([''])
  /** Times of directory entries, set at the end. */
  readonly dirTimes = new Map<string, Timespec>()
  /** Original times of lower directories this layer changed (apply mode), restored at the end. */
  readonly restore = new Map<string, Timespec>()
  readonly opaque = new Set<string>()
  /** layer mode: directories of this layer that also have a whiteout in it, opaque too */
  readonly whitedDirs = new Set<string>()
  /** paths this layer has whiteouts of */
  readonly whited = new Set<string>()
  rootTimes: Timespec | null = null
  /** disk the sparse files written so far take beyond their data (the rest of the blocks it touches) */
  slack = 0
  readonly stats: UnpackStats = { entries: 0, files: 0, bytes: 0, whiteouts: 0, maxMtime: 0 }

  readonly #prefix: string

  constructor(
    readonly root: string,
    readonly mode: 'layer' | 'apply',
    readonly keepTimesBefore1970 = false,
    readonly slackCap = SPARSE_HOLE_CAP,
  ) {
    this.#prefix = root.endsWith('/') ? root : root + '/'
  }

  abs(rel: string): string {
    return rel === '' ? this.root : this.#prefix + rel
  }

  forget(rel: string): void {
    // Only a directory verified here can have verified directories under it.
    if (!this.dirOk.has(rel)) return
    const prefix = rel + '/'
    for (const d of this.dirOk) if (d === rel || d.startsWith(prefix)) this.dirOk.delete(d)
  }

  /** Before changing the entries of directory `rel`: remember a lower directory's times. */
  noteModify(rel: string): void {
    if (this.mode !== 'apply' || rel === '' || this.seen.get(rel) !== 'ldir' || this.restore.has(rel)) return
    const st = lstatOrNull(this.abs(rel))
    if (st) this.restore.set(rel, timesOf(st))
  }

  mkdirImplicit(rel: string): void {
    this.noteModify(parentOf(rel))
    const abs = this.abs(rel)
    sys(`mkdir ${JSON.stringify(rel)}`, () => {
      fs.mkdirSync(abs, IMPLICIT_DIR_MODE)
      fs.lchownSync(abs, 0, 0)
      fs.chmodSync(abs, IMPLICIT_DIR_MODE)
    })
    this.seen.set(rel, 'idir')
    this.dirOk.add(rel)
  }

  /** Checks that `rel` is a real directory (creating it when `create`); false when missing and not created. */
  checkDir(rel: string, create: boolean): boolean {
    if (this.dirOk.has(rel)) return true
    const st = lstatOrNull(this.abs(rel))
    if (st === null) {
      if (!create) return false
      this.mkdirImplicit(rel)
      return true
    }
    if (st.isSymbolicLink()) throw new StrataError('IMAGE_UNSAFE_PATH', `${JSON.stringify(rel)} is a symlink; no entry may be written through it`)
    if (!st.isDirectory()) {
      if (this.seen.get(rel) === 'wh' && create) {
        // layer mode: an entry under a path this layer whited out, a new directory over the lower one
        sys(`replacing the whiteout ${JSON.stringify(rel)}`, () => fs.rmSync(this.abs(rel)))
        this.mkdirImplicit(rel)
        this.whitedDirs.add(rel)
        return true
      }
      if (this.seen.has(rel)) throw dup(rel, 'is both a non-directory entry and a parent directory in this layer')
      if (!create) return false
      throw new StrataError('IMAGE_BAD_ARCHIVE', `${JSON.stringify(rel)} is not a directory but the layer puts entries under it`)
    }
    if (!this.seen.has(rel)) this.seen.set(rel, 'ldir')
    this.dirOk.add(rel)
    return true
  }

  /** Makes every ancestor of `rel` a real directory; with create=false returns false if one is missing. */
  parents(rel: string, create: boolean): boolean {
    // a verified parent had all its ancestors verified before it
    if (this.dirOk.has(parentOf(rel))) return true
    for (const a of ancestorsOf(rel)) if (!this.checkDir(a, create)) return false
    return true
  }

  async removeExisting(rel: string): Promise<void> {
    this.noteModify(parentOf(rel))
    try {
      await fs.promises.rm(this.abs(rel), { recursive: true, force: true })
    } catch (e) {
      throw fsError(e, `removing ${JSON.stringify(rel)}`)
    }
    this.forget(rel)
  }

  async entry(h: TarEntryHeader, r: TarReader): Promise<void> {
    // a tree built into a layer by mkfs.erofs 1.5, which stores a time before 1970 as the build
    // time (it compares the seconds unsigned), gets 1970, the nearest it keeps
    if (h.mtime.sec < 0 && !this.keepTimesBefore1970) h = { ...h, mtime: { sec: 0, nsec: 0 } }
    const k = classifyEntry(h, this.stats)
    if (k.kind === 'skip') return
    if (k.kind === 'opaque') return this.opaqueMarker(k.dir)
    if (k.kind === 'whiteout') return this.whiteout(k.target, h)
    if (k.kind === 'root') return this.rootEntry(h)
    const rel = k.rel
    const prev = this.seen.get(rel)
    checkRepeat(rel, h, prev)
    // an entry over its own whiteout replaces it (below, as an existing path); a directory also hides the lower one's entries
    if (prev === 'wh' && h.type === 'directory' && this.mode === 'layer') this.whitedDirs.add(rel)
    this.parents(rel, true)
    const abs = this.abs(rel)
    // In layer mode the tree holds only what this layer made, all of it in `seen`.
    const existing = this.mode === 'layer' && prev === undefined ? null : lstatOrNull(abs)
    if (h.type === 'directory') {
      if (existing && !existing.isDirectory()) await this.removeExisting(rel)
      if (!existing || !existing.isDirectory()) {
        this.noteModify(parentOf(rel))
        sys(`mkdir ${JSON.stringify(rel)}`, () => fs.mkdirSync(abs, 0o700))
      }
      this.attrs(abs, rel, h, true)
      this.seen.set(rel, 'dir')
      this.dirOk.add(rel)
      this.restore.delete(rel)
      this.dirTimes.set(rel, h.mtime)
      return
    }
    if (existing) await this.removeExisting(rel)
    else this.noteModify(parentOf(rel))
    switch (h.type) {
      case 'file':
        await this.writeFile(abs, rel, h, r)
        break
      case 'symlink':
        sys(`symlink ${JSON.stringify(rel)}`, () => fs.symlinkSync(h.linkname, abs))
        this.attrs(abs, rel, h, false)
        break
      case 'link':
        this.hardlink(abs, rel, h)
        break
      case 'character-device':
      case 'block-device':
      case 'fifo': {
        const type = h.type === 'fifo' ? S_IFIFO : h.type === 'block-device' ? S_IFBLK : S_IFCHR
        sys(`mknod ${JSON.stringify(rel)}`, () =>
          native().mknod(abs, type | 0o600, h.type === 'fifo' ? 0 : h.devmajor, h.type === 'fifo' ? 0 : h.devminor),
        )
        this.attrs(abs, rel, h, true)
        break
      }
    }
    this.seen.set(rel, 'node')
  }

  /** Owner, mode (after chown, which clears setuid), xattrs; times for non-directories. */
  attrs(abs: string, rel: string, h: TarEntryHeader, chmod: boolean): void {
    sys(`owner/mode of ${JSON.stringify(rel)}`, () => {
      fs.lchownSync(abs, h.uid, h.gid)
      if (chmod) fs.chmodSync(abs, h.mode)
    })
    if (h.type === 'directory') clearXattrs(abs)
    if (h.xattrs.size > 0) setXattrs(abs, h.xattrs, rel)
    if (h.type !== 'directory') setTimes(abs, h.mtime)
  }

  async writeFile(abs: string, rel: string, h: TarEntryHeader, r: TarReader): Promise<void> {
    // holes cost no disk, but data spread thinly fills whole blocks: bounded before a byte is written
    if (r.sparseMap !== null) this.slack = checkSparseHoles(this.slack, blockSlack(r.sparseMap), this.slackCap, rel, 'blocks')
    const fd = sys(`creating ${JSON.stringify(rel)}`, () => fs.openSync(abs, CREATE_FLAGS, 0o600))
    try {
      // What has arrived goes out in one writev (all of a small file, usually).
      // A sparse file's holes are passed over, never written: the data lands at
      // its offsets and the size is set at the end, so the holes stay holes
      // (the tree's builder finds them with SEEK_DATA/SEEK_HOLE).
      let pos = 0
      while (pos < h.size) {
        const hole = r.holeAhead()
        if (hole > 0) {
          r.skipHole(hole)
          pos += hole
          continue
        }
        const first = r.buffered() ?? (await r.chunk())
        if (first === null) break
        const bufs = [first]
        let n = first.length
        for (let c = r.buffered(); c !== null; c = r.buffered()) {
          bufs.push(c)
          n += c.length
        }
        try {
          writeAllSync(fd, bufs, pos)
        } catch (e) {
          throw tooLarge(e, rel, h.size)
        }
        pos += n
      }
      if (pos !== h.size) throw new StrataError('IMAGE_BAD_ARCHIVE', `${JSON.stringify(rel)}: ${pos} bytes of ${h.size}`)
      if (r.sparseMap !== null) {
        try {
          fs.ftruncateSync(fd, h.size)
        } catch (e) {
          throw tooLarge(e, rel, h.size)
        }
      }
      sys(`owner/mode of ${JSON.stringify(rel)}`, () => {
        fs.fchownSync(fd, h.uid, h.gid)
        fs.fchmodSync(fd, h.mode)
      })
    } finally {
      fs.closeSync(fd)
    }
    if (h.xattrs.size > 0) setXattrs(abs, h.xattrs, rel)
    setTimes(abs, h.mtime)
    this.stats.files++
    this.stats.bytes += h.size
  }

  hardlink(abs: string, rel: string, h: TarEntryHeader): void {
    const target = normalizeEntryPath(h.linkname, 'hard link target')
    if (target === '') throw new StrataError('IMAGE_BAD_ARCHIVE', `${JSON.stringify(rel)}: hard link to the root`)
    const kind = this.seen.get(target)
    if (kind !== 'node') {
      // a symlink on the target's path (of this layer, or applying, of a lower one) is unsafe, not a missing target
      for (const a of ancestorsOf(target)) {
        const st = lstatOrNull(this.abs(a))
        if (!st) break
        if (st.isSymbolicLink()) throw hardlinkThroughSymlink(rel, target, a)
        if (!st.isDirectory()) break
      }
    }
    if (kind === undefined && this.mode === 'apply') {
      if (!this.parents(target, false)) {
        throw new StrataError('IMAGE_BAD_ARCHIVE', `${JSON.stringify(rel)}: hard link target ${JSON.stringify(target)} does not exist`)
      }
      const st = lstatOrNull(this.abs(target))
      if (!st || st.isDirectory()) {
        throw new StrataError('IMAGE_BAD_ARCHIVE', `${JSON.stringify(rel)}: hard link target ${JSON.stringify(target)} is not an existing file`)
      }
    } else if (kind !== 'node') {
      throw badHardlink(rel, target, kind)
    }
    sys(`hard link ${JSON.stringify(rel)}`, () => fs.linkSync(this.abs(target), abs))
  }

  rootEntry(h: TarEntryHeader): void {
    if (h.type !== 'directory') throw new StrataError('IMAGE_BAD_ARCHIVE', `the root entry is a ${h.type}, not a directory`)
    this.attrs(this.root, '', h, true)
    this.rootTimes = h.mtime
  }

  async whiteout(target: string, h: TarEntryHeader): Promise<void> {
    this.stats.whiteouts++
    const over = whiteoutOver(target, this.seen.get(target), this.whited.has(target))
    this.whited.add(target)
    if (over === 'opaque') {
      if (this.mode === 'layer') this.whitedDirs.add(target)
      else {
        if (this.seen.get(target) === 'ldir') this.ownDir(target)
        await this.purge(target)
      }
    }
    if (over !== 'whiteout') return
    if (this.mode === 'layer') {
      this.parents(target, true)
      const abs = this.abs(target)
      sys(`whiteout ${JSON.stringify(target)}`, () => native().mknod(abs, S_IFCHR | 0o600, 0, 0))
      this.attrs(abs, target, { ...h, xattrs: new Map() }, true)
    } else if (this.parents(target, false)) {
      if (lstatOrNull(this.abs(target))) await this.removeExisting(target)
    }
    this.seen.set(target, 'wh')
  }

  async opaqueMarker(dir: string): Promise<void> {
    this.stats.whiteouts++
    if (this.opaque.has(dir)) throw dup(dir, 'has two opaque markers in this layer')
    const kind = this.seen.get(dir)
    if (kind === 'node') throw dup(dir, 'is both a non-directory entry and an opaque directory in this layer')
    this.opaque.add(dir)
    if (dir !== '') {
      this.parents(dir, true)
      const st = lstatOrNull(this.abs(dir))
      if (st && !st.isDirectory()) await this.removeExisting(dir)
      this.checkDir(dir, true)
    }
    if (this.mode === 'apply') await this.purge(dir)
  }

  /** Apply mode: removes everything under `dir` this layer did not write. */
  async purge(dir: string): Promise<void> {
    const names = sys(`reading ${JSON.stringify(dir)}`, () => fs.readdirSync(this.abs(dir)))
    for (const name of names.sort()) {
      const p = joinRel(dir, name)
      const kind = this.seen.get(p)
      if (kind === 'node') continue
      if (kind === 'ldir') this.ownDir(p)
      if (kind === 'dir' || kind === 'idir' || kind === 'ldir') {
        await this.purge(p)
        continue
      }
      await this.removeExisting(p)
    }
  }

  /** Apply mode: a lower directory this layer wrote into and hid the rest of becomes this layer's (implied) directory. */
  ownDir(p: string): void {
    const abs = this.abs(p)
    sys(`owner/mode of ${JSON.stringify(p)}`, () => {
      fs.lchownSync(abs, 0, 0)
      fs.chmodSync(abs, IMPLICIT_DIR_MODE)
    })
    clearXattrs(abs)
    this.seen.set(p, 'idir')
    this.restore.delete(p)
  }

  finish(): void {
    const n = native()
    const dflt: Timespec = { sec: this.stats.maxMtime, nsec: 0 }
    if (this.mode === 'layer') {
      for (const d of [...new Set([...this.opaque, ...this.whitedDirs])].sort()) {
        try {
          n.lsetxattr(this.abs(d), OPAQUE_XATTR, Buffer.from('y'), 0)
        } catch (e) {
          throw fsError(e, `opaque xattr on ${JSON.stringify(d)}`)
        }
      }
    }
    if (this.rootTimes === null) {
      // A layer without a root entry: the root looks like an implied directory.
      sys('owner/mode of the root', () => {
        fs.lchownSync(this.root, 0, 0)
        fs.chmodSync(this.root, IMPLICIT_DIR_MODE)
      })
      clearXattrs(this.root)
      if (this.mode === 'layer' && this.opaque.has('')) n.lsetxattr(this.root, OPAQUE_XATTR, Buffer.from('y'), 0)
    }
    for (const [rel, kind] of this.seen) {
      if (kind === 'idir') setTimes(this.abs(rel), dflt)
    }
    for (const [rel, t] of this.restore) if (this.seen.get(rel) === 'ldir') setTimes(this.abs(rel), t)
    for (const [rel, t] of this.dirTimes) setTimes(this.abs(rel), t)
    setTimes(this.root, this.rootTimes ?? dflt)
  }
}

/**
 * Unpacks one uncompressed OCI layer tar into `destDir` (see README.md for the
 * rules). `layer` mode needs an empty destDir and turns whiteouts into overlay
 * whiteouts; `apply` mode applies the layer over what destDir holds. The input
 * is consumed (and destroyed on failure). On failure destDir holds a partial
 * tree for the caller to remove; nothing is ever written outside it.
 */
export async function unpackLayer(tar: Readable, destDir: string, opts: UnpackOptions): Promise<UnpackStats> {
  if (opts?.mode !== 'layer' && opts?.mode !== 'apply') throw new TypeError(`unpackLayer: mode must be 'layer' or 'apply'`)
  if (process.getuid?.() !== 0) {
    tar.destroy()
    throw new StrataError('IMAGE_NEEDS_ROOT', 'unpacking a layer needs root (ownership, device nodes, trusted xattrs)')
  }
  let root: string
  try {
    root = await fs.promises.realpath(destDir)
    if (!(await fs.promises.stat(root)).isDirectory()) throw new StrataError('INVALID_ARGUMENT', `${destDir} is not a directory`)
    if (opts.mode === 'layer' && (await fs.promises.readdir(root)).length > 0) {
      throw new StrataError('INVALID_ARGUMENT', `${destDir} is not empty (layer mode unpacks into an empty directory)`)
    }
  } catch (e) {
    tar.destroy()
    if (e instanceof StrataError) throw e
    throw new StrataError('INVALID_ARGUMENT', `destination ${destDir}: ${(e as Error).message}`, { cause: e })
  }
  const u = new Unpacker(root, opts.mode, opts.keepTimesBefore1970 ?? false, opts.slackCap)
  const r = new TarReader(tar, opts.holeCap !== undefined ? { holeCap: opts.holeCap } : {})
  try {
    for (let h = await r.next(); h !== null; h = await r.next()) await u.entry(h, r)
  } finally {
    r.close()
  }
  u.finish()
  return u.stats
}
